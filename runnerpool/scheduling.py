"""The one way this operator puts work on APScheduler: jobs that pick their own next run.

Both the token jobs and the runner managers decide after each run when the next
one is due (a token's expiry, a rate-limit reset, a backoff), so the trigger is
only a safety net; the first run is due at once, a run never overlaps itself,
and a late run still happens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger


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
