"""A pool's missing pods created concurrently, in slow-start batches: kube-controller-manager's rule.

Created one after the other, 500 pods take 500 round trips (about 5 s on the bench machine,
twice a ReplicaSet's time). The ReplicaSet controller sends them in batches of 1, 2, 4, 8, ...
(``slowStartBatch``), each batch's creates at once, and stops after the first batch that had
a failure: a create that is refused (a quota, Pod Security, an invalid template) is refused
for its siblings too, so a pool that cannot create sends one request, then three, not 500.
The same here, with the batch capped at the creates allowed in flight at once
(``--pod-create-concurrency``, 64): the API server's time per create is mostly waiting (for
its own write), so more in flight go through faster, up to a point (bench, 1 pool x 500 on an
otherwise idle 2-core machine: 16 in flight took 3.4 s median until every pod existed, 32 and
64 about 2.6 s, 128 no faster; each create costs the operator a little more CPU the more
threads share its interpreter).

One difference: once the batches reached the cap, the rest go through a window of that many
creates in flight, a new one sent as each returns, until one fails. A batch waits for its
slowest create, and a loaded API server's slowest is several times its median (bench, 1 pool
x 500 on a busy machine, 16 in flight: 0.22 s median, 0.9 s slowest; batches of 16 kept the
server half idle). The refusal a ReplicaSet's batches guard against has been ruled out by
then: 1 + 2 + 4 + ... creates went through.

The caller records each created pod's expectation (``runnerpool.pods.expectations``) as its
create returns, so the next pass, which the pods' own watch events bring, does not create
them again before the cache shows them; the work queue never runs a pool twice at once, and
:meth:`SlowStart.run` returns only once every create it sent has returned.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

__all__ = ["Batched", "SlowStart", "batches"]

#: The first batch: one create, which alone meets a refusal that would refuse every create.
INITIAL_BATCH = 1


def batches(total: int, cap: int) -> Iterator[int]:
    """The sizes of the batches that create ``total`` pods: 1, 2, 4, ... (at most ``cap``),
    the last one what is left. The caller stops taking them after a batch with a failure."""
    if cap < 1:
        raise ValueError("need cap >= 1")
    left, size = total, min(INITIAL_BATCH, cap)
    while left > 0:
        batch = min(size, left)
        yield batch
        left -= batch
        size = min(size * 2, cap)


@dataclass(frozen=True)
class Batched:
    """What :meth:`SlowStart.run` did: the creates that went through, and the failures of the
    batch that stopped it (in the order the batch sent them; empty: all ``total`` were made)."""

    made: int
    failures: tuple[BaseException, ...] = ()


class SlowStart:
    """Runs creates in :func:`batches` on a thread pool shared by every pool (``concurrency``
    threads: the creates in flight at once, whichever pools they are for). A batch of one
    runs on the caller's thread: a one-replica pool costs no thread hop."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError("need concurrency >= 1")
        self.concurrency = concurrency
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, total: int, create: Callable[[], object]) -> Batched:
        """Call ``create`` ``total`` times, batch after batch, until a batch has a failure; from
        the first full batch on, in a window of ``concurrency`` creates in flight."""
        made = 0
        for size in batches(total, self.concurrency):
            if size == self.concurrency > 1:
                windowed = self._window(total - made, create)
                return Batched(made + windowed.made, windowed.failures)
            failures = self._batch(size, create)
            made += size - len(failures)
            if failures:
                return Batched(made, tuple(failures))
        return Batched(made)

    def _window(self, count: int, create: Callable[[], object]) -> Batched:
        """``count`` creates, ``concurrency`` in flight, none sent after the first failure."""
        pool = self._pool()
        in_flight: set[Future[object]] = set()
        sent = made = 0
        failures: list[BaseException] = []
        while in_flight or (not failures and sent < count):
            while not failures and sent < count and len(in_flight) < self.concurrency:
                in_flight.add(pool.submit(contextvars.copy_context().run, create))
                sent += 1
            done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                failure = future.exception()
                if failure is None:
                    made += 1
                else:
                    failures.append(failure)
        return Batched(made, tuple(failures))

    def _batch(self, size: int, create: Callable[[], object]) -> list[BaseException]:
        if size == 1:
            try:
                create()
            except Exception as err:  # handed back: the caller decides what it means
                return [err]
            return []
        pool = self._pool()
        # Each create runs in a copy of the caller's context: its log lines name the pool.
        futures: list[Future[object]] = [
            pool.submit(contextvars.copy_context().run, create) for _ in range(size)
        ]
        failures = (future.exception() for future in futures)
        return [failure for failure in failures if failure is not None]

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pod-create")
            return self._executor
