"""Each delivery counts once: the same ``X-GitHub-Delivery`` signed by the same secrets.

GitHub may deliver twice (a redelivery from the UI or API keeps the delivery's GUID), and a
receiver behind a load balancer may see a retry. A bounded LRU of recent deliveries is enough:
jobs' states only move forward (``jobs.STATE_RANK``), so a duplicate that slipped past an
evicted entry still changes nothing. A delivery whose recording failed is released again
so that a redelivery is processed.

The GUID alone does not name a delivery: GitHub gives one event one GUID, "shared with all
deliveries for all webhooks that subscribe to this event" (its ``hook-delivery`` schema), so
two tenants' webhooks for one repository, each at its own URL with its own secret, send the
same job under the same GUID, and the second was answered "duplicate" and recorded nowhere.
A delivery is therefore its GUID *and* the secrets that signed it
(``verification.Verdict.signers``), which decide which pools it may move: the same event
reaching other pools is another delivery, a redelivery to the same pools is not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["DeliveryLog"]


class DeliveryLog:
    """The last ``capacity`` deliveries seen, by any hashable key (the receiver's:
    ``(guid, signers)``), least recently seen dropped first."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def claim(self, delivery: Hashable) -> bool:
        """True for the first claim of ``delivery``; False for a repeat."""
        with self._lock:
            if delivery in self._seen:
                self._seen.move_to_end(delivery)
                return False
            self._seen[delivery] = None
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    def release(self, delivery: Hashable) -> None:
        with self._lock:
            self._seen.pop(delivery, None)
