"""Worker threads that drain the work queue into a reconcile callable.

This is controller-runtime's ``reconcileHandler`` loop.  The Python kubernetes
client has informers and leader election but no controller loop, and kopf
(the maintained Python operator framework) owns the whole process, its own
queueing and its own handler model, which would not let the reconciler stay a
plain ``key -> Result`` callable; so this small loop is written by hand.

Keeping the reconciler a plain callable is what lets unit tests call it
directly, without threads, queues or an API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter, Histogram

from runnerpool import log_context
from runnerpool.api_errors import describe

__all__ = ["Controller", "Result", "TerminalError", "WorkQueue"]

logger = logging.getLogger(__name__)

RECONCILE_TOTAL = Counter(
    "runnerpool_reconcile", "Reconciles by outcome (success, error, requeue, terminal).", ["result"]
)
RECONCILE_ERRORS = Counter("runnerpool_reconcile_errors", "Reconciles that raised.")
RECONCILE_DURATION = Histogram(
    "runnerpool_reconcile_duration_seconds",
    "Wall time of one reconcile, including the API and GitHub calls it makes.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)


@dataclass(frozen=True)
class Result:
    """What a reconcile asks of the loop.

    ``requeue_after`` is a plain "look again in N seconds" (e.g. to poll GitHub
    for runner state): it resets the key's error backoff and is not an error.
    What the reconcile did is the reconciler's to log; the queue needs only this.
    """

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile that cannot succeed until the object itself changes (controller-runtime's
    ``reconcile.TerminalError``): counted and logged, never retried, no backoff.

    The object's next change brings its key back through the informer.
    """


class WorkQueue(Protocol):
    """The slice of :class:`~runnerpool.runtime.workqueue.RateLimitingQueue` the loop needs."""

    def get(self, timeout: float | None = None) -> str | None: ...
    def done(self, key: str) -> None: ...
    def forget(self, key: str) -> None: ...
    def add_after(self, key: str, seconds: float) -> None: ...
    def add_rate_limited(self, key: str) -> None: ...
    def shutdown(self) -> None: ...


class Controller:
    """Runs ``workers`` threads, each taking one key at a time from ``queue``.

    Correctness against concurrent reconciles of one pool rests on the queue,
    which never hands out a key that is still being processed.
    """

    def __init__(self, queue: WorkQueue, reconcile: Callable[[str], Result], workers: int = 2) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._queue = queue
        self._reconcile = reconcile
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._threads:
                return
            for i in range(self._workers):
                thread = threading.Thread(target=self._run_worker, name=f"reconcile-worker-{i}", daemon=True)
                thread.start()
                self._threads.append(thread)

    def stop(self, timeout: float | None = None) -> bool:
        """Shut the queue down and wait for workers; ``True`` if all finished.

        In-flight reconciles run to completion (Python threads cannot be
        interrupted safely); no new key is handed out after this call.
        """
        self._queue.shutdown()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            logger.warning("reconcile workers still running after stop timeout: %s", ", ".join(alive))
            return False
        return True

    def _run_worker(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:  # only on shutdown when called without a timeout
                return
            try:
                self.process(key)
            finally:
                self._queue.done(key)

    def process(self, key: str) -> None:
        """Reconcile one key and requeue it as the outcome demands.

        Public so tests can drive a single step without threads.  The caller
        owns ``queue.done(key)``.  Every line logged meanwhile, by the reconcile
        and by this loop, carries the key and a ``reconcileID`` of this reconcile's
        own (``runnerpool.log_context``); the reconcile does not need to know.
        """
        with log_context.for_reconcile(key):
            self._process(key)

    def _process(self, key: str) -> None:
        started = time.perf_counter()
        try:
            result = self._reconcile(key)
        except TerminalError as exc:
            RECONCILE_DURATION.observe(time.perf_counter() - started)
            RECONCILE_TOTAL.labels(result="terminal").inc()
            logger.warning("reconcile %s cannot succeed until the object changes: %s", key, exc)
            self._queue.forget(key)
            return
        except Exception as exc:
            RECONCILE_DURATION.observe(time.perf_counter() - started)
            RECONCILE_TOTAL.labels(result="error").inc()
            RECONCILE_ERRORS.inc()
            # One line per failure: a failing pool retries often, and a traceback
            # each time would drown the log.  The traceback is there at debug.
            # describe(): the API's reason and message, never the HTTP headers str() prints.
            logger.error("reconcile %s failed: %s", key, describe(exc))
            logger.debug("reconcile %s traceback", key, exc_info=True)
            self._queue.add_rate_limited(key)
            return
        RECONCILE_DURATION.observe(time.perf_counter() - started)
        if result.requeue_after is not None and result.requeue_after > 0:
            RECONCILE_TOTAL.labels(result="requeue").inc()
            self._queue.forget(key)
            self._queue.add_after(key, result.requeue_after)
        else:
            RECONCILE_TOTAL.labels(result="success").inc()
            self._queue.forget(key)
        logger.debug("reconciled %s: requeue_after=%s", key, result.requeue_after)
