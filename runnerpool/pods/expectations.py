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

And a create is wrapped in :meth:`creating`: its name is known only from the API server's
answer, and the watch may deliver the pod before the creating thread gets the CPU back to
record it. An event of a name not expected, while one of the pool's creates is in flight, is
kept until the creates end, and a name already seen is not recorded. Recorded after its only
event, it stayed expected until the timeout: a live pool counts only what its cache lacks, but
a deleted pool's finalizer, which waits for the pods it created to reach the cache
(``PodStep.unseen_creates``), held the pool and its runners on GitHub for five minutes (the
bench's ten-pool deletion, once in CI).

Kept in memory on purpose: a restarted operator starts with a freshly listed cache, which
has nothing left to catch up on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator

__all__ = ["DEFAULT_TIMEOUT", "Expectations", "still_pending"]

#: The ReplicaSet controller's ExpectationsTimeout.
DEFAULT_TIMEOUT = 300.0


class Expectations:
    def __init__(self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, float]] = {}
        #: Per pool with creates in flight: how many, and the names its watch events showed
        #: meanwhile that were not expected (one may be a create's pod, seen before its answer).
        self._in_flight: dict[str, int] = {}
        self._seen_early: dict[str, set[str]] = {}

    @contextlib.contextmanager
    def creating(self, pool: str) -> Iterator[Callable[[str], None]]:
        """Around one create of ``pool``'s: call what it yields with the pod's name the API
        server answered (see the module docstring)."""
        with self._lock:
            self._in_flight[pool] = self._in_flight.get(pool, 0) + 1
        try:
            yield lambda pod: self.created(pool, pod)
        finally:
            with self._lock:
                left = self._in_flight.pop(pool) - 1
                if left:
                    self._in_flight[pool] = left
                else:
                    self._seen_early.pop(pool, None)

    def created(self, pool: str, pod: str) -> None:
        with self._lock:
            early = self._seen_early.get(pool)
            if early is not None and pod in early:
                early.discard(pod)  # its event came first: the cache has it
                return
            self._pending.setdefault(pool, {})[pod] = self._clock() + self._timeout

    def observe(self, pool: str, pod: str) -> None:
        """A watch event for ``pod`` of ``pool`` (any kind: the cache has seen it)."""
        with self._lock:
            names = self._pending.get(pool)
            if names is not None and pod in names:
                del names[pod]
                if not names:
                    del self._pending[pool]
            elif pool in self._in_flight:
                self._seen_early.setdefault(pool, set()).add(pod)

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
