"""Each ``X-GitHub-Delivery`` counts once.

GitHub may deliver twice (a redelivery from the UI or API keeps the delivery's GUID), and a
receiver behind a load balancer may see a retry. A bounded LRU of recent GUIDs is enough:
jobs' states only move forward (``jobs.STATE_RANK``), so a duplicate that slipped past an
evicted entry still changes nothing. A delivery whose recording failed is released again
so that a redelivery is processed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["DeliveryLog"]


class DeliveryLog:
    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def claim(self, delivery: str) -> bool:
        """True for the first claim of ``delivery``; False for a repeat."""
        with self._lock:
            if delivery in self._seen:
                self._seen.move_to_end(delivery)
                return False
            self._seen[delivery] = None
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return True

    def release(self, delivery: str) -> None:
        with self._lock:
            self._seen.pop(delivery, None)
