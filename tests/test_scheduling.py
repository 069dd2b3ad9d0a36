"""Self-scheduling jobs: a job replaced while its predecessor still runs is not left waiting.

APScheduler counts running instances per job id. A job replaced under the same id (the
token job of a pool whose credential Secret changed, a runner manager's scope that lost its
last pool and got a new one) could not run while the old instance was busy, and was skipped
until its safety-net interval: minutes in which a new pool waited for its token.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from apscheduler.schedulers.base import BaseScheduler

from runnerpool.scheduling import add_self_scheduling_job
from tests.helpers import started_scheduler, wait_for

SAFETY_NET = 300.0


def _add(scheduler: BaseScheduler, func: object) -> None:
    add_self_scheduling_job(
        scheduler,
        func,  # type: ignore[arg-type]
        (),
        job_id="pool",
        name="token job",
        first_run=datetime.now(UTC),
        safety_net_seconds=SAFETY_NET,
    )


def test_a_job_replaced_while_its_predecessor_runs_runs_once_the_predecessor_ends() -> None:
    scheduler = started_scheduler(2)
    release, running, replaced_ran = threading.Event(), threading.Event(), threading.Event()

    def stale() -> None:
        running.set()
        release.wait(10)

    try:
        _add(scheduler, stale)
        wait_for(running.is_set, message="the first run to start")
        scheduler.remove_job("pool")
        _add(scheduler, replaced_ran.set)  # due now, while the stale run still holds the id
        release.set()
        wait_for(replaced_ran.is_set, timeout=5, message="the replacement to run (not after the safety net)")
    finally:
        release.set()
        scheduler.shutdown(wait=True)


def test_a_replaced_job_runs_while_its_predecessor_still_runs() -> None:
    """Whatever the stale run is doing (here: blocked), its replacement does not wait for it."""
    scheduler = started_scheduler(2)
    release, running, replaced_ran = threading.Event(), threading.Event(), threading.Event()

    def stale() -> None:
        running.set()
        release.wait(10)

    try:
        _add(scheduler, stale)
        wait_for(running.is_set, message="the first run to start")
        _add(scheduler, replaced_ran.set)  # replace_existing, as the secret updater does
        wait_for(replaced_ran.is_set, timeout=5, message="the replacement to run while the stale one blocks")
        assert not release.is_set()
    finally:
        release.set()
        scheduler.shutdown(wait=True)


def test_a_job_never_overlaps_itself() -> None:
    """Due again while its run goes on (brought forward, or the safety net): the run is dropped,
    and the run in progress sets the next one when it ends."""
    scheduler = started_scheduler(2)
    release, running = threading.Event(), threading.Event()
    runs: list[int] = []

    def slow() -> None:
        runs.append(1)
        running.set()
        release.wait(10)

    try:
        _add(scheduler, slow)
        wait_for(running.is_set, message="the first run to start")
        for _ in range(3):
            scheduler.modify_job("pool", next_run_time=datetime.now(UTC))
            wait_for(
                lambda: scheduler.get_job("pool").next_run_time > datetime.now(UTC),
                message="the due run to be submitted",
            )
        release.set()
        assert runs == [1]
    finally:
        release.set()
        scheduler.shutdown(wait=True)
