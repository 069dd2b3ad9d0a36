"""The pool and the reconcile on every log line, as a log pipeline reads the operator's JSON.

The lines are taken from the operator's own handler (``runnerpool.logs.handler``) and parsed
one object per line, as a pipeline does. The work runs where it runs in the operator: on the
controller's worker threads, and on APScheduler's thread pool for the token jobs and the
runner managers.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses

from runnerpool import logs
from runnerpool.domain import PoolRef, Scope
from runnerpool.github.credentials import PAT_KEY, ClientCache, NamedClientCache
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.types import RegistrationToken
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.runners.manager import RunnerManagers
from runnerpool.runtime.controller import Controller, Result, TerminalError
from runnerpool.runtime.workqueue import RateLimiter, RateLimitingQueue
from runnerpool.scheduling import background_scheduler
from runnerpool.settings import RunnerSettings
from secret_updater import SecretUpdater
from tests.github_mocks import RunnerEndpoint, fast_client_factory, github
from tests.helpers import started_scheduler, wait_for
from tests.test_runner_listing import NS, Cache, Pods

__all__ = ["github"]  # the shared fixture

#: A logger of code that knows nothing of pools (a library, a helper).
elsewhere = logging.getLogger("tests.somewhere")


class Lines:
    """What the operator's handler wrote, parsed the way a log pipeline parses it."""

    def __init__(self, stream: io.StringIO) -> None:
        self._stream = stream

    def all(self) -> list[dict[str, Any]]:
        text = self._stream.getvalue()
        parsed = []
        for line in text.splitlines():
            entry = json.loads(line)  # one whole object per line, or this fails
            assert isinstance(entry, dict), line
            parsed.append(entry)
        return parsed

    def with_msg(self, msg: str) -> list[dict[str, Any]]:
        return [entry for entry in self.all() if entry["msg"] == msg]

    def one(self, msg: str) -> dict[str, Any]:
        found = self.with_msg(msg)
        assert len(found) == 1, f"{msg!r}: {found}"
        return found[0]


@pytest.fixture
def json_lines() -> Iterator[Lines]:
    stream = io.StringIO()
    handler = logs.handler("json", stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield Lines(stream)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _controller_runs(reconcile: Callable[[str], Result], *keys: str) -> None:
    """Each key reconciled once, in turn, by the controller's worker threads."""
    done = threading.Semaphore(0)

    def counted(key: str) -> Result:
        try:
            return reconcile(key)
        finally:
            done.release()

    queue = RateLimitingQueue(RateLimiter(), name="t-log-context")
    controller = Controller(queue, counted, workers=2)
    controller.start()
    try:
        for key in keys:
            queue.add(key)
            assert done.acquire(timeout=10), f"{key} was not reconciled"
    finally:
        controller.stop(timeout=5)


def test_a_reconciles_lines_carry_its_pool_and_its_own_reconcile_id(json_lines: Lines) -> None:
    calls: list[str] = []

    def reconcile(key: str) -> Result:
        calls.append(key)
        elsewhere.info("reading %s", key)  # a logger that was told nothing of the pool
        elsewhere.warning("writing")
        if key == "team-b/broken":
            raise TerminalError("spec invalid")
        return Result()

    _controller_runs(reconcile, "team-a/web", "team-a/web", "team-b/broken")
    elsewhere.info("outside any pool")

    reads = json_lines.with_msg("reading team-a/web")
    writes = json_lines.with_msg("writing")
    assert len(reads) == 2 and len(writes) == 3
    first, second = reads
    assert first["pool"] == second["pool"] == "team-a/web"
    assert first["reconcileID"] != second["reconcileID"], "each reconcile has an id of its own"
    assert [w["reconcileID"] for w in writes[:2]] == [first["reconcileID"], second["reconcileID"]]
    assert all(len(r["reconcileID"]) == 16 for r in (first, second))
    # The controller's own line about the reconcile is part of it.
    broken = json_lines.with_msg("reading team-b/broken")[0]
    verdict = json_lines.one("reconcile team-b/broken cannot succeed until the object changes: spec invalid")
    assert verdict["pool"] == broken["pool"] == "team-b/broken"
    assert verdict["reconcileID"] == broken["reconcileID"] == writes[2]["reconcileID"]
    outside = json_lines.one("outside any pool")
    assert "pool" not in outside and "reconcileID" not in outside


def test_a_pool_named_by_the_call_is_kept(json_lines: Lines) -> None:
    """The reconciler's own line names its pool as the context does: one key per pool."""

    def reconcile(key: str) -> Result:
        elsewhere.info("about another pool", extra={"pool": "team-z/other"})
        return Result()

    _controller_runs(reconcile, "team-a/web")
    line = json_lines.one("about another pool")
    assert line["pool"] == "team-z/other"
    assert len(line["reconcileID"]) == 16


def test_text_lines_show_the_pool_too() -> None:
    stream = io.StringIO()
    handler = logs.handler("text", stream)
    elsewhere.addHandler(handler)
    try:
        _controller_runs(lambda key: (elsewhere.error("in %s", key), Result())[1], "team-a/web")
        elsewhere.error("after")
    finally:
        elsewhere.removeHandler(handler)
    during, after = stream.getvalue().splitlines()
    assert "in team-a/web pool=team-a/web reconcileID=" in during
    assert after.endswith("tests.somewhere: after")


def test_a_token_job_run_on_the_scheduler_logs_for_its_pool(json_lines: Lines) -> None:
    """APScheduler runs the job on a thread of its pool; the next job on that thread (one
    worker) must not inherit the pool."""
    pool = PoolRef("team-a", "build", Scope(organization="octo-org"), "github-cred")
    github = FakeGitHubClient()
    github.tokens.append(
        RegistrationToken("AABF3JGZDX3P5PMEXLND6TS6FCWO6", datetime.now(UTC) + timedelta(hours=1))
    )
    cache = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=lambda data, url: github)
    scheduler = started_scheduler(1)
    updater = SecretUpdater(
        cache, lambda ns, name, body: None, lambda ns, name: None, scheduler, delete_leftover_runner
    )
    other = threading.Event()
    try:
        updater.start(pool)
        refreshed = wait_for(
            lambda: [e for e in json_lines.all() if e["msg"].startswith("registration token for pool")],
            message="the token job's line",
        )
        scheduler.add_job(lambda: (elsewhere.info("another job"), other.set()))
        assert other.wait(10)
    finally:
        updater.stop_all()
        scheduler.shutdown(wait=False)
    assert refreshed[0]["pool"] == "team-a/build"
    assert "reconcileID" not in refreshed[0], "a job run is no reconcile"
    assert "pool" not in json_lines.one("another job")


def test_a_runner_managers_round_logs_each_pools_part_for_that_pool(
    json_lines: Lines, github: responses.RequestsMock
) -> None:
    """One round lists a scope for all its pools; what it does for each pool is that pool's."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(1, "a-1", [f"{NS}/a"])
    endpoint.add(2, "b-1", [f"{NS}/b"], busy=True)
    cache = Cache()
    scheduler = background_scheduler(1)  # started once both pools are in: one round for both
    managers = RunnerManagers(
        cache,
        NamedClientCache(lambda ns, name: {PAT_KEY: "ghp_rounds"}, factory=fast_client_factory),
        Pods(),
        lambda key: elsewhere.info("counts changed"),  # the manager tells the reconciler
        settings=RunnerSettings(sync_interval=60),
        scheduler=scheduler,
    )
    try:
        managers.start(cache.add("a", org="octo-org"))
        managers.start(cache.add("b", org="octo-org"))
        scheduler.start()
        wait_for(lambda: len(json_lines.with_msg("counts changed")) >= 2, message="both pools' counts")
    finally:
        managers.stop_all()
        scheduler.shutdown(wait=False)
    assert endpoint.listed == [(1, 200)], "one listing for both"
    pools = [line.get("pool") for line in json_lines.with_msg("counts changed")]
    assert sorted(pools[:2]) == [f"{NS}/a", f"{NS}/b"]
