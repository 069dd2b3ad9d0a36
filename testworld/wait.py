"""Waiting on a condition that lives in another process, without a fixed sleep.

A module of its own, below everything that waits, so the control plane, the node, the seal and
the simulator share it without importing each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["poll_until"]


def poll_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Re-check ``predicate`` until it holds; False on timeout.

    For conditions that live in another process (an HTTP endpoint, the API server) and so
    have nothing to block on here.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        if predicate():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        pause.wait(min(interval, left))
