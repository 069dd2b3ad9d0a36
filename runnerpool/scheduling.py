"""The one way this operator puts work on APScheduler: jobs that pick their own next run.

Both the token jobs and the runner managers decide after each run when the next
one is due (a token's expiry, a rate-limit reset, a backoff), so the trigger is
only a safety net; the first run is due at once, a run never overlaps itself,
and a late run still happens.

A run that APScheduler skips because the job's previous instance still runs (it counts
instances per job id, and a job replaced under the same id - a token job whose pool
changed, a scope that lost its last pool and got a new one - shares the old one's count)
is tried again every ``SKIPPED_RETRY`` seconds until it runs, instead of waiting for the
safety net: minutes in which a new pool waited for its token or its first listing. Written
here because APScheduler 3 only reports the skip (``EVENT_JOB_MAX_INSTANCES``).
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

#: Seconds between tries of a run skipped because its predecessor still runs.
SKIPPED_RETRY = 0.5

_retrying: weakref.WeakSet[BaseScheduler] = weakref.WeakSet()
_retrying_lock = threading.Lock()


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


def started_scheduler(max_workers: int) -> BaseScheduler:
    scheduler = background_scheduler(max_workers)
    scheduler.start()
    return scheduler


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
    _retry_skipped_runs(scheduler)
    scheduler.add_job(
        func,
        trigger=IntervalTrigger(seconds=safety_net_seconds, timezone=UTC),
        args=tuple(args),
        id=job_id,
        name=name,
        replace_existing=True,
        next_run_time=first_run,
        coalesce=True,
        max_instances=1,
        misfire_grace_time=None,
    )
