"""Creates the pod cache has not shown yet, so that a lagging cache does not cause a second create.

The reconciler reads pods from an informer cache.  Right after it created a pod, the next
reconcile (often triggered by that very create's events on other objects) may run before
the watch delivered the pod, see one pod too few and create another.  Kubernetes' own
ReplicaSet controller and controller-runtime users solve this with "expectations"; this is
the same idea kept small: the reconciler records the names the API server gave its
creates, and a name stops being expected once the cache has shown it (the pod informer
reports every event with :meth:`observe`) or after ``timeout`` seconds (a create whose pod
was deleted again before any watch event, which cannot happen with a working watch but must
not block the pool for ever).

The order matters: take :meth:`expected` *before* reading the pods, then count with
:func:`still_pending`. A pod the watch delivers between the two is then either in the read
or still expected, never neither (which made one pod too many).

Kept in memory on purpose: a restarted operator starts with a freshly listed cache, which
has nothing left to catch up on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

__all__ = ["DEFAULT_TIMEOUT", "Expectations", "still_pending"]

#: The ReplicaSet controller's ExpectationsTimeout.
DEFAULT_TIMEOUT = 300.0


class Expectations:
    def __init__(self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, float]] = {}

    def created(self, pool: str, pod: str) -> None:
        with self._lock:
            self._pending.setdefault(pool, {})[pod] = self._clock() + self._timeout

    def observe(self, pool: str, pod: str) -> None:
        """A watch event for ``pod`` of ``pool`` (any kind: the cache has seen it)."""
        with self._lock:
            names = self._pending.get(pool)
            if names is not None:
                names.pop(pod, None)
                if not names:
                    del self._pending[pool]

    def expected(self, pool: str) -> frozenset[str]:
        """The pool's creates the cache has not shown yet, as of now: take it before the read."""
        now = self._clock()
        with self._lock:
            names = self._pending.get(pool)
            if not names:
                return frozenset()
            for name, deadline in list(names.items()):
                if deadline <= now:
                    del names[name]
            if not names:
                del self._pending[pool]
            return frozenset(names)

    def forget(self, pool: str) -> None:
        with self._lock:
            self._pending.pop(pool, None)


def still_pending(expected: frozenset[str], cached: Iterable[str]) -> int:
    """How many of ``expected`` (taken before the read) the read (``cached``: names) lacks."""
    return len(expected - set(cached))
