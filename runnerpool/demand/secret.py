"""The webhook secret, read from a file mounted into the operator pod.

Why a file: the secret belongs to the operator (one GitHub App or one webhook per
organization), not to a pool's namespace; a mounted Secret reaches both operator replicas
without any API read or extra RBAC, and the kubelet updates the file when the Secret
changes, which this picks up without a restart (the file is re-read when its mtime or size
changes). One secret per line: during a rotation both the old and the new one verify.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

__all__ = ["SecretFile"]

log = logging.getLogger(__name__)


class SecretFile:
    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._secrets: tuple[bytes, ...] = ()

    def secrets(self) -> tuple[bytes, ...]:
        """The current secrets; empty when the file is missing or blank (every delivery fails)."""
        try:
            stat = os.stat(self._path)
        except OSError:
            return ()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    text = self._path.read_bytes()
                except OSError as err:
                    log.warning("cannot read the webhook secret file %s: %s", self._path, err.strerror)
                    return ()
                self._secrets = tuple(line.strip() for line in text.splitlines() if line.strip())
                self._stamp = stamp
            return self._secrets
