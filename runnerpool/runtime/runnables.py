"""One start path and one stop path for every long-running part of the operator.

controller-runtime's manager, reduced to what this operator needs: each part is a
:class:`Runnable` with ``start()`` and ``stop(timeout)``, marked always-on (every replica:
caches, probes, metrics, the webhook receiver) or leader-only (``NeedLeaderElection``:
workers, the secret updater, runner managers, the poller). :class:`Supervisor` starts the
always-on parts in order, then, once this replica holds the Lease (or at once without
leader election), the leader-only ones. Whatever asks for the stop - SIGTERM, a lost Lease,
a failed start - takes the same path: the leader-only parts stop in reverse order (after a
lost Lease all at once: another replica leads already), the Lease is released, then the
always-on parts stop in reverse order. A stop asked for before or
during start-up starts nothing more.

After a lost Lease the process ends, as controller-runtime's does, so a replica never acts
on a stale belief that it still leads. Written here because neither the kubernetes client
nor kopf has a runnable manager that leaves the reconciler a plain callable.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from apscheduler.schedulers.base import STATE_STOPPED, BaseScheduler
from prometheus_client import Gauge

from runnerpool.api_errors import log_failure

__all__ = ["LEADING", "Elector", "Runnable", "Supervisor", "scheduler_runnable"]

log = logging.getLogger(__name__)

#: Per replica; ``max`` over the replicas is 0 while none leads (the "no leader" alert).
LEADING = Gauge(
    "runnerpool_leader",
    "1 while this replica runs the leader-only parts (it holds the Lease, or runs without "
    "leader election), else 0.",
)


@dataclass(frozen=True)
class Runnable:
    """One part: ``start`` returns once it runs (it may block, watching ``stopping``)."""

    name: str
    start: Callable[[], object]
    stop: Callable[[float], object] = lambda timeout: None
    leader_only: bool = False


def scheduler_runnable(name: str, scheduler: BaseScheduler, stop_jobs: Callable[[], None]) -> Runnable:
    """A leader-only scheduler whose jobs are added while leading and end with leadership.

    A job stuck on a slow call is not waited for: ``stop_jobs`` must bar every write after it
    returns (``SecretUpdater.stop_all``, ``RunnerManagers.stop_all``). This is the one owner of
    the scheduler's lifecycle: the background jobs only add and remove jobs on it.
    """

    def stop(timeout: float) -> None:
        stop_jobs()
        if scheduler.state != STATE_STOPPED:
            scheduler.shutdown(wait=False)

    return Runnable(name, scheduler.start, stop, leader_only=True)


class Elector(Protocol):
    """The slice of ``runnerpool.runtime.leader.LeaderElector`` the supervisor drives."""

    def run(self) -> None: ...
    def stop(self, release: bool = True, timeout: float | None = None) -> bool: ...


#: Builds the elector with the two callbacks the supervisor gives it.
ElectorFactory = Callable[[Callable[[], None], Callable[[], None]], Elector]


class Supervisor:
    """Starts and stops the operator's parts (controller-runtime calls this its manager)."""

    def __init__(
        self,
        runnables: Sequence[Runnable],
        *,
        elector: ElectorFactory | None = None,
        stop_timeout: float = 30.0,
    ) -> None:
        self._always = [r for r in runnables if not r.leader_only]
        self._leader = [r for r in runnables if r.leader_only]
        self._elector_factory = elector
        self._timeout = stop_timeout
        #: Set by :meth:`stop`: nothing starts after it, and :meth:`run` tears down.
        self.stopping = threading.Event()
        self._leading = threading.Event()
        # Serialises starting the leader-only parts with stopping them.
        self._lock = threading.Lock()
        self._started: list[Runnable] = []

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def stop(self) -> None:
        """Ask for the stop (SIGTERM, a lost Lease); safe from any thread and a signal handler."""
        self.stopping.set()

    def run(self) -> None:
        """Start everything, block until :meth:`stop`, then stop everything that started."""
        elector: Elector | None = None
        thread: threading.Thread | None = None
        try:
            self._start_all(self._always)
            if self._elector_factory is not None and not self.stopping.is_set():
                elector = self._elector_factory(self._start_leading, self._lost_lease)
                thread = threading.Thread(target=elector.run, name="leader-election", daemon=True)
                thread.start()
            elif self._elector_factory is None:
                self._start_leading()
            self.stopping.wait()
        finally:
            self.stopping.set()
            self._stop_leading()
            if elector is not None:
                elector.stop(release=True, timeout=self._timeout)
            if thread is not None:
                thread.join(timeout=self._timeout)
            self._stop_started(self._always)
            log.info("operator stopped", extra={"pid": os.getpid()})

    def _start_leading(self) -> None:
        with self._lock:
            if self._start_all(self._leader):
                self._leading.set()
                if self._leader:  # a process without leader-only parts (the webhook receiver) leads nothing
                    LEADING.set(1)
                log.info("leading: %s started", ", ".join(r.name for r in self._leader))

    def _lost_lease(self) -> None:
        """Another replica leads now: every leader-only part is told to stop at once, not one
        after another as on a normal stop. The workers' stop waits for reconciles in flight (up
        to the stop timeout), and the runner managers and the secret updater, stopped after
        them, went on deregistering runners, deleting pods and asking for JIT configs beside the
        new leader meanwhile; their stops are barriers that take effect when called."""
        self._stop_leading(at_once=True)
        self.stop()

    def _stop_leading(self, *, at_once: bool = False) -> None:
        """``at_once``: every leader-only part is told to stop in its own thread (a lost Lease);
        else one after another, in reverse start order (a normal stop)."""
        with self._lock:
            self._leading.clear()
            LEADING.set(0)
            leading = [r for r in reversed(self._leader) if any(started is r for started in self._started)]
            self._started = [started for started in self._started if not any(started is r for r in leading)]
            if not at_once:
                for runnable in leading:
                    self._stop_one(runnable)
                return
            stops = [
                threading.Thread(target=self._stop_one, args=(r,), name=f"stop {r.name}", daemon=True)
                for r in leading
            ]
            for thread in stops:
                thread.start()
            for thread in stops:
                thread.join(self._timeout)

    def _start_all(self, runnables: Sequence[Runnable]) -> bool:
        """Start in order; ``False`` once a stop was asked for (what started is stopped later)."""
        for runnable in runnables:
            if self.stopping.is_set():
                return False
            self._started.append(runnable)
            try:
                runnable.start()
            except Exception as err:
                log_failure(log, logging.ERROR, "%s failed to start; stopping", runnable.name, err=err)
                self.stop()
                return False
        return not self.stopping.is_set()

    def _stop_started(self, runnables: Sequence[Runnable]) -> None:
        for runnable in reversed(runnables):
            if not any(started is runnable for started in self._started):
                continue
            self._started = [started for started in self._started if started is not runnable]
            self._stop_one(runnable)

    def _stop_one(self, runnable: Runnable) -> None:
        try:
            runnable.stop(self._timeout)
        except Exception as err:
            log_failure(log, logging.ERROR, "%s did not stop cleanly", runnable.name, err=err)
