"""The scaling rule, pure: desired = clamp(min, busy + queued, max), up at once, down late.

Scaling down waits like a HorizontalPodAutoscaler's scale-down stabilization window: the
decision is the highest recommendation of the last ``scaleDownDelay``, so a pool shrinks
only after demand stayed low for that long, and a burst right after a lull finds its
runners still there. Scaling up takes the new recommendation at once.

The window lives in memory (of the leader, which reconciles). A new leader has no history,
so the first recommendation it keeps for a pool is the pool's last decision
(``status.desiredReplicas``) as of now: a failover can delay a scale-down by up to one
window, never bring it forward.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

__all__ = ["Window", "recommend"]


def recommend(min_replicas: int, max_replicas: int, busy: int, queued: int) -> int:
    return max(min_replicas, min(max_replicas, busy + queued))


class Window:
    """Recommendations of the last ``delay``, each with the time it was last the current one.

    Recommendations come when demand changes (a watch event), not on a clock, so an entry
    stays current until the next one arrives: demand of 5 recorded at 10:00 and of 0 at
    10:04 holds 5 until 10:04 + delay. Kept as a monotonic deque (values falling from the
    front), the usual sliding-window maximum.
    """

    def __init__(self) -> None:
        self._items: deque[tuple[datetime, int]] = deque()

    def __bool__(self) -> bool:
        return bool(self._items)

    def add(self, now: datetime, replicas: int) -> None:
        if self._items:
            self._items[-1] = (now, self._items[-1][1])  # it was current until now
        while self._items and self._items[-1][1] <= replicas:
            self._items.pop()  # never again the highest: a newer one is at least as high
        self._items.append((now, replicas))

    def decide(self, now: datetime, delay: timedelta) -> tuple[int, float | None]:
        """The highest recommendation current within ``delay``; seconds until it expires."""
        while len(self._items) > 1 and now - self._items[0][0] >= delay:
            self._items.popleft()
        until, top = self._items[0]
        if len(self._items) == 1:
            return top, None
        return top, max(0.0, (until + delay - now).total_seconds())
