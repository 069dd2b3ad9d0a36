"""The one way this operator puts work on APScheduler: jobs that pick their own next run.

Both the token jobs and the runner managers decide after each run when the next
one is due (a token's expiry, a rate-limit reset, a backoff), so the trigger is
only a safety net; the first run is due at once, a run never overlaps itself,
and a late run still happens.

"Never overlaps itself" is kept here, per added job, not by APScheduler's ``max_instances``:
APScheduler counts running instances per job *id*, and a job replaced under the same id (a
token job whose pool changed - its credential Secret edited - or a scope that lost its last
pool and got a new one) shared its stale predecessor's count.
Its first run was skipped while the stale run went on, and waited for the safety net: minutes
in which a new pool waited for its token or its first listing. Here every ``add`` gets its
own guard, so a replaced job runs at once, whatever its predecessor is doing (blocked on a
slow GitHub call, or returning early because it is stale); the predecessor sees it is stale
through the caller's own generation check and leaves the schedule alone. A run that finds
its own job's previous run still going is dropped: that run sets the next one when it ends.

APScheduler's limit stays as a backstop (``MAX_GENERATIONS`` replacements running at once);
a run it skips is tried again every ``SKIPPED_RETRY`` seconds instead of at the safety net.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

__all__ = [
    "MAX_GENERATIONS",
    "SKIPPED_RETRY",
    "OneRunAtATime",
    "add_self_scheduling_job",
    "background_scheduler",
]

#: Seconds between tries of a run APScheduler skipped (the backstop below).
SKIPPED_RETRY = 0.5
#: Runs of one job id, across its replacements, that may be in flight at once.
MAX_GENERATIONS = 8

_retrying: weakref.WeakSet[BaseScheduler] = weakref.WeakSet()
_retrying_lock = threading.Lock()

log = logging.getLogger(__name__)


class OneRunAtATime:
    """One added job's function: a run that finds the previous one still going is dropped.

    A fresh instance per ``add_self_scheduling_job``: a replacement has a guard of its own.
    Calling it returns what the function returns (``None`` for a dropped run), so tests can
    call ``job.func(*job.args)`` as the scheduler does.
    """

    def __init__(self, func: Callable[..., Any], name: str) -> None:
        self._func = func
        self._name = name
        self._running = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if not self._running.acquire(blocking=False):
            log.debug("%s: previous run still going; it schedules the next one", self._name)
            return None
        try:
            return self._func(*args)
        finally:
            self._running.release()

    def __repr__(self) -> str:
        return f"OneRunAtATime({self._name})"


class _HandledSkip(logging.Filter):
    """APScheduler warns of every skip; a skip is retried here, so it is not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances" not in record.getMessage()


def _retry_skipped_runs(scheduler: BaseScheduler) -> None:
    """Once per scheduler: a skipped run is due again ``SKIPPED_RETRY`` seconds later."""
    with _retrying_lock:
        if scheduler in _retrying:
            return
        _retrying.add(scheduler)

    def on_skipped(event: JobSubmissionEvent) -> None:
        # Dispatched after the scheduler stored the job's next run: this change lands last.
        with contextlib.suppress(JobLookupError):
            scheduler.modify_job(
                event.job_id, next_run_time=datetime.now(UTC) + timedelta(seconds=SKIPPED_RETRY)
            )

    scheduler.add_listener(on_skipped, EVENT_JOB_MAX_INSTANCES)


logging.getLogger("apscheduler.scheduler").addFilter(_HandledSkip())


def background_scheduler(max_workers: int) -> BaseScheduler:
    """Not started: jobs added before ``start()`` wait for it (the operator starts it on leading)."""
    return BackgroundScheduler(
        timezone=UTC, executors={"default": {"type": "threadpool", "max_workers": max_workers}}
    )


def add_self_scheduling_job(
    scheduler: BaseScheduler,
    func: Callable[..., Any],
    args: Sequence[Any],
    *,
    job_id: str,
    name: str,
    first_run: datetime,
    safety_net_seconds: float,
) -> None:
    """Add (or replace) the job ``job_id``; ``func`` must see for itself when it is stale."""
    _retry_skipped_runs(scheduler)
    scheduler.add_job(
        OneRunAtATime(func, name),
        trigger=IntervalTrigger(seconds=safety_net_seconds, timezone=UTC),
        args=tuple(args),
        id=job_id,
        name=name,
        replace_existing=True,
        next_run_time=first_run,
        coalesce=True,
        max_instances=MAX_GENERATIONS,
        misfire_grace_time=None,
    )
