"""SecretUpdater: job bookkeeping on a scheduler that never runs, and job runs driven directly.

Runs are driven with ``run_job``, which calls the job exactly as the scheduler would, and an
injected clock, so no test sleeps. One test uses a running BackgroundScheduler to prove the first fill really
fires immediately; it waits on an event, not a timer.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler
from kubernetes.client.rest import ApiException
from prometheus_client import REGISTRY

from runnerpool.domain import Connection, PoolRef, ProxyRef, RegistrationFailure, Scope
from runnerpool.github.credentials import ClientCache, client_from_secret_data
from runnerpool.github.errors import BadCredentials, NotFound, NotSent, RateLimited, Unavailable
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import RegistrationToken
from runnerpool.naming import TOKEN_EXPIRY_ANNOTATION, TOKEN_ISSUED_ANNOTATION, TOKEN_SECRET_KEY
from runnerpool.reasons import Reason
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.settings import TokenSettings
from secret_updater import SecretUpdater, token_patch
from tests.helpers import started_scheduler, wait_for
from tests.test_github_api import API, FAST, api, fixture, mock

__all__ = ["mock"]

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
TOKEN_1 = "AABF3JGZDX3P5PMEXLND6TS6FCWO6"
TOKEN_2 = "BBBF3JGZDX3P5PMEXLND6TS6FCWO7"
POOL = PoolRef(
    namespace="team-a",
    name="build",
    scope=Scope(organization="octo-org"),
    credential_secret_name="github-cred",
)


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class Harness:
    updater: SecretUpdater
    scheduler: BackgroundScheduler
    github: FakeGitHubClient
    clock: Clock
    secrets: dict[tuple[str, str], dict[str, str]]
    patches: list[tuple[str, str, dict[str, Any]]]
    notified: list[tuple[str, str]]

    def run(self, pool: PoolRef = POOL) -> datetime | None:
        return run_job(self.scheduler, pool)

    def next_run(self, pool: PoolRef = POOL) -> datetime:
        job = self.scheduler.get_job(pool.key)
        assert job is not None
        when: datetime = job.next_run_time
        return when


def run_job(scheduler: BaseScheduler, pool: PoolRef = POOL) -> datetime | None:
    """Run the pool's job now, in this thread, the way the scheduler calls it."""
    job = scheduler.get_job(pool.key)
    assert job is not None, f"no token job for {pool.key}"
    when: datetime | None = job.func(*job.args, **job.kwargs)
    return when


def token(value: str, lifetime: timedelta = timedelta(hours=1), *, now: datetime = T0) -> RegistrationToken:
    return RegistrationToken(token=value, expires_at=now + lifetime)


def make_harness(settings: TokenSettings = TokenSettings()) -> Harness:
    github = FakeGitHubClient()
    clock = Clock()
    secrets = {("team-a", "github-cred"): {"token": "ghp_x"}}
    patches: list[tuple[str, str, dict[str, Any]]] = []
    notified: list[tuple[str, str]] = []

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        return github

    cache = ClientCache(lambda ns, name: secrets.get((ns, name)), factory=factory)
    scheduler = BackgroundScheduler(timezone=UTC)  # never started: jobs stay inspectable
    updater = SecretUpdater(
        cache,
        lambda ns, name, body: patches.append((ns, name, body)),
        lambda ns, name: notified.append((ns, name)),
        clock=clock,
        scheduler=scheduler,
        remove_leftover=delete_leftover_runner,
        rng=random.Random(3),
        settings=settings,
    )
    return Harness(updater, scheduler, github, clock, secrets, patches, notified)


@pytest.fixture
def harness() -> Iterator[Harness]:
    made = make_harness()
    yield made
    made.updater.stop_all()


#: The refresh margin of the reviewers' case: short enough for a backoff to outgrow it.
SHORT_MARGIN = TokenSettings(refresh_margin_minutes=2)


@pytest.fixture
def short_margin() -> Iterator[Harness]:
    made = make_harness(SHORT_MARGIN)
    yield made
    made.updater.stop_all()


def sample(name: str, **labels: str) -> float | None:
    value: float | None = REGISTRY.get_sample_value(name, labels)
    return value


# -- job bookkeeping --------------------------------------------------------------------------------


def test_start_adds_one_job_due_now(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.clock.advance(timedelta(seconds=5))
    harness.updater.start(POOL)  # same PoolRef: no-op, first run stays "now"

    jobs = harness.scheduler.get_jobs()
    assert [job.id for job in jobs] == ["team-a/build"]
    assert jobs[0].next_run_time == T0
    assert harness.scheduler.get_job("team-a/build") is not None
    assert harness.scheduler.get_job("team-a/other") is None


def test_changed_poolref_replaces_job_and_runs_now(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    harness.clock.advance(timedelta(minutes=3))

    moved = PoolRef("team-a", "build", Scope(repository="octocat/Hello-World"), "github-cred")
    harness.updater.start(moved)
    harness.github.tokens.append(token(TOKEN_1))  # same value, new scope: must be written again
    harness.run()

    assert len(harness.scheduler.get_jobs()) == 1
    assert harness.github.token_requests == [POOL.scope, moved.scope]
    assert len(harness.patches) == 2


def test_start_is_immediate_even_after_earlier_reschedule(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    assert harness.next_run() == T0 + timedelta(minutes=30)

    harness.updater.stop("team-a", "build")
    harness.clock.advance(timedelta(minutes=1))
    harness.updater.start(POOL)
    assert harness.next_run() == T0 + timedelta(minutes=1)


def test_stop_removes_job_and_failure(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(Unavailable("down"))
    harness.run()
    assert harness.updater.failure("team-a", "build") is not None

    harness.updater.stop("team-a", "build")
    harness.updater.stop("team-a", "build")  # idempotent

    assert harness.scheduler.get_jobs() == []
    assert harness.scheduler.get_job("team-a/build") is None
    assert harness.updater.failure("team-a", "build") is None


def test_withdraw_empties_the_secret_and_no_fill_follows(harness: Harness) -> None:
    """A deleted pool's token goes with the writer that put it there: a restarted runner
    container finds nothing to register with."""
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()

    assert harness.updater.withdraw("team-a", "build", has_token=True) is True
    assert harness.updater.withdraw("team-a", "build", has_token=False) is False, "empty: no write"

    assert harness.patches[1:] == [
        (
            "team-a",
            "runner-token-build",
            {"data": {TOKEN_SECRET_KEY: None}, "metadata": {"annotations": {TOKEN_EXPIRY_ANNOTATION: None}}},
        )
    ]
    assert harness.scheduler.get_jobs() == [], "no job left to fill it again"


# -- a successful run -------------------------------------------------------------------------------


def test_fill_patches_secret_and_reschedules_without_notifying(harness: Harness) -> None:
    """The write enqueues the pool by itself (the Secret's informer event): no second enqueue."""
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))

    next_run = harness.run()

    assert harness.patches == [
        (
            "team-a",
            "runner-token-build",
            {
                "metadata": {
                    "annotations": {
                        TOKEN_EXPIRY_ANNOTATION: "2025-03-01T13:00:00Z",
                        TOKEN_ISSUED_ANNOTATION: "true",
                    }
                },
                "stringData": {TOKEN_SECRET_KEY: TOKEN_1},
            },
        )
    ]
    assert next_run == T0 + timedelta(hours=1) - TokenSettings().refresh_margin
    assert harness.next_run() == next_run
    assert harness.notified == []
    assert harness.updater.failure("team-a", "build") is None
    assert sample("runnerpool_token_fills_total", namespace="team-a", pool="build") == 1
    expiry = sample("runnerpool_token_expiry_timestamp_seconds", namespace="team-a", pool="build")
    assert expiry == (T0 + timedelta(hours=1)).timestamp()


def test_unchanged_token_is_not_rewritten(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens += [token(TOKEN_1), token(TOKEN_1)]
    harness.run()
    harness.clock.advance(timedelta(minutes=30))

    next_run = harness.run()

    assert len(harness.patches) == 1
    assert harness.notified == []
    # The token expires in 30 min, i.e. at the margin: try again after the minimum delay.
    assert next_run == harness.clock.now + timedelta(minutes=1)


def test_rotating_token_is_written_each_time(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    harness.clock.advance(timedelta(minutes=30))
    harness.github.tokens.append(token(TOKEN_2, now=harness.clock.now))

    harness.run()

    assert [p[2]["stringData"][TOKEN_SECRET_KEY] for p in harness.patches] == [TOKEN_1, TOKEN_2]
    assert harness.next_run() == T0 + timedelta(minutes=60)
    assert sample("runnerpool_token_fills_total", namespace="team-a", pool="build") == 2


def test_token_patch_body_is_a_merge_patch() -> None:
    body = token_patch("t", datetime(2025, 1, 1, 4, 5, 6, 789000, tzinfo=UTC))
    assert body == {
        "metadata": {
            "annotations": {TOKEN_EXPIRY_ANNOTATION: "2025-01-01T04:05:06Z", TOKEN_ISSUED_ANNOTATION: "true"}
        },
        "stringData": {TOKEN_SECRET_KEY: "t"},
    }


# -- failures ---------------------------------------------------------------------------------------


def test_transient_failure_backs_off_and_recovers(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens += [Unavailable("GitHub 502"), Unavailable("GitHub 502"), token(TOKEN_1)]

    first = harness.run()
    assert first is not None
    assert T0 + timedelta(seconds=2.5) <= first <= T0 + timedelta(seconds=5)
    failure = harness.updater.failure("team-a", "build")
    assert failure == RegistrationFailure("GitHubUnavailable", "GitHub 502", T0)
    assert harness.notified == [("team-a", "build")]

    harness.clock.advance(timedelta(seconds=5))
    second = harness.run()
    assert second is not None
    assert timedelta(seconds=5) <= second - harness.clock.now <= timedelta(seconds=10)
    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.since == T0  # the streak's start
    assert len(harness.notified) == 1  # same failure again: no new notification

    harness.clock.advance(timedelta(seconds=10))
    failure_at_write: list[RegistrationFailure | None] = []
    harness.updater._patch_secret = lambda ns, name, body: failure_at_write.append(
        harness.updater.failure(ns, "build")
    )
    harness.run()
    assert harness.updater.failure("team-a", "build") is None
    assert failure_at_write == [None], "the reconcile the write brings sees the recovery"
    assert len(harness.notified) == 1, "the write announces the recovery: no extra enqueue"
    count = sample(
        "runnerpool_token_failures_total", namespace="team-a", pool="build", reason="GitHubUnavailable"
    )
    assert count == 2


def test_rate_limit_waits_for_reset(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(RateLimited("HTTP 403 (API rate limit exceeded)", retry_after=1200))

    next_run = harness.run()

    assert next_run == T0 + timedelta(seconds=1201)
    assert harness.next_run() == next_run
    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.reason == "RateLimited"


def test_a_refresh_failing_in_a_rate_limit_storm_is_retried_before_the_token_expires(
    short_margin: Harness,
) -> None:
    """A 2-minute margin and GitHub answering 429 (retry after 20 s) to every refresh: the
    retries came at 20, 40, 60, 85 and 146 s, and the token expired while the refresh waited."""
    harness = short_margin
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    expiry = T0 + timedelta(hours=1)
    harness.clock.now = harness.next_run()
    assert expiry - harness.clock.now == SHORT_MARGIN.refresh_margin
    harness.github.tokens += [RateLimited("HTTP 429", retry_after=20, status=429)] * 20

    retries = []
    while expiry - harness.clock.now > timedelta(seconds=5):
        retry = harness.run()
        assert retry is not None
        assert retry < expiry, f"retried {retry - expiry} after the token expired"
        retries.append(retry)
        harness.clock.now = retry

    assert retries[0] == expiry - timedelta(seconds=99), "GitHub's 20 s wait is kept while it fits"
    halfway = expiry - SHORT_MARGIN.refresh_margin / 2
    assert any(halfway <= retry < expiry for retry in retries), "tried again in the token's last minute"


def test_a_new_leaders_first_refresh_failing_is_retried_before_the_token_in_the_secret_expires(
    short_margin: Harness,
) -> None:
    """After a restart or a change of leader the job has written nothing yet, so it knew no
    expiry: a first refresh that GitHub rate limited for 5 minutes waited past the expiry of the
    token the Secret held, and new pods got an expired token."""
    harness = short_margin
    expiry = T0 + timedelta(minutes=2)
    harness.updater.start(POOL)
    harness.updater.check_secret(POOL.namespace, POOL.name, "dG9rZW4=", recreated=False, expires_at=expiry)
    harness.github.tokens.append(RateLimited("HTTP 429", retry_after=300, status=429))

    retry = harness.run()

    assert retry is not None and retry < expiry, f"retried at {retry}, the token expires at {expiry}"


def test_calls_the_client_held_back_unsent_do_not_lengthen_the_backoff(harness: Harness) -> None:
    """The rate gate refuses a call whose wait is not quite over, a slow host's calls are refused
    until its probe: neither asked GitHub anything, so neither counts as a try."""
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    harness.clock.now = harness.next_run()
    gate_refusal = RateLimited("HTTP 429", retry_after=0.5, status=429, held_back=True)
    slow_host = NotSent("not sent: the host is held slow", reason=Reason.GITHUB_HOST_SLOW, held_back=True)
    harness.github.tokens += [RateLimited("HTTP 429", retry_after=1, status=429)]
    harness.github.tokens += [gate_refusal, slow_host] * 3 + [Unavailable("GitHub 502")]

    waits = []
    for _ in range(8):
        retry = harness.run()
        assert retry is not None
        waits.append((retry - harness.clock.now).total_seconds())
        harness.clock.now = retry

    assert all(wait <= 5 for wait in waits[:7]), f"the first try's backoff (at most 5 s): {waits}"
    assert 5 <= waits[7] <= 10, f"the second try's (5 to 10 s), not the eighth's: {waits}"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (BadCredentials("HTTP 401 (Bad credentials)"), "BadCredentials"),
        (BadCredentials("HTTP 403", reason="Forbidden"), "Forbidden"),
        (NotFound("HTTP 404 (Not Found)"), "ScopeNotFound"),
    ],
)
def test_permanent_failures_retry_slowly(harness: Harness, error: Exception, reason: str) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(error)

    next_run = harness.run()

    assert next_run is not None
    assert timedelta(minutes=1) <= next_run - T0 <= timedelta(minutes=2)
    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.reason == reason
    assert harness.notified == [("team-a", "build")]
    assert harness.patches == []


def test_missing_credential_secret_then_fixed(harness: Harness) -> None:
    del harness.secrets[("team-a", "github-cred")]
    harness.updater.start(POOL)

    harness.run()
    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.reason == "CredentialSecretMissing"
    assert "team-a/github-cred" in failure.message

    harness.secrets[("team-a", "github-cred")] = {"token": "ghp_new"}
    harness.github.tokens.append(token(TOKEN_1))
    harness.clock.advance(timedelta(seconds=1))
    # What the reconciler does when the credential Secret's content changes.
    harness.updater.start(replace(POOL, credentials_version="2"))
    assert harness.next_run() == harness.clock.now, "a fixed credential is tried at once"
    harness.run()
    assert harness.updater.failure("team-a", "build") is None


def test_patch_failure_is_transient_and_scrubbed(harness: Harness) -> None:
    class ApiError(Exception):
        status = 404
        reason = "Not Found"

    def failing_patch(ns: str, name: str, body: dict[str, Any]) -> None:
        raise ApiError(f"cannot patch with {body}")  # a careless message containing the token

    harness.updater._patch_secret = failing_patch
    harness.updater.start(POOL)
    harness.github.tokens += [token(TOKEN_1), token(TOKEN_1)]

    next_run = harness.run()

    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.reason == "TokenSecretPatchFailed"
    assert "team-a/runner-token-build" in failure.message
    assert TOKEN_1 not in failure.message
    assert next_run is not None
    assert next_run - T0 <= timedelta(seconds=5)
    # Not recorded as written: the next success must write again.
    harness.updater._patch_secret = lambda ns, name, body: harness.patches.append((ns, name, body))
    harness.run()
    assert len(harness.patches) == 1


def test_a_refused_token_write_quotes_the_cluster_without_the_token(harness: Harness) -> None:
    """A policy's or quota's refusal said only "HTTP 403 Forbidden": nothing to act on. A
    webhook may quote the Secret it refused, whose data holds the token in base64."""
    encoded = base64.b64encode(TOKEN_1.encode()).decode()
    # The token at the end of a long message too, where one line's length would cut it in two.
    message = f"secrets are read-only here (data.runnertoken={encoded}, {'.' * 380} {TOKEN_1})"

    def refused_patch(ns: str, name: str, body: dict[str, Any]) -> None:
        status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}
        raise ApiException(status=403, reason="Forbidden", body=json.dumps(status))

    harness.updater._patch_secret = refused_patch
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))

    harness.run()

    failure = harness.updater.failure("team-a", "build")
    assert failure is not None and failure.reason == "TokenSecretPatchFailed"
    assert "403 Forbidden: secrets are read-only here" in failure.message, failure.message
    assert TOKEN_1[:8] not in failure.message and encoded[:8] not in failure.message


def test_unexpected_error_never_escapes(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(ZeroDivisionError("boom"))

    next_run = harness.run()

    assert next_run is not None
    failure = harness.updater.failure("team-a", "build")
    assert failure is not None
    assert failure.reason == "TokenRefreshError"


def test_notify_errors_are_contained(harness: Harness) -> None:
    def broken_notify(ns: str, name: str) -> None:
        raise RuntimeError("queue closed")

    harness.updater._notify = broken_notify
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))

    assert harness.run() is not None
    assert len(harness.patches) == 1


# -- stop races, metrics and secrecy ----------------------------------------------------------------


def test_stop_during_a_run_prevents_the_write(harness: Harness) -> None:
    harness.updater.start(POOL)

    def stop_then_token() -> RegistrationToken:
        harness.updater.stop("team-a", "build")
        return token(TOKEN_1)

    harness.github.tokens.append(stop_then_token)

    harness.updater._run("team-a/build", 1)

    assert harness.patches == []
    assert harness.notified == []
    assert harness.scheduler.get_jobs() == []
    assert sample("runnerpool_token_fills_total", namespace="team-a", pool="build") is None


def test_stop_removes_metric_series(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens += [NotFound("HTTP 404"), token(TOKEN_1)]
    harness.run()
    harness.clock.advance(timedelta(minutes=5))  # its retry, after the backoff
    harness.run()
    labels = {"namespace": "team-a", "pool": "build"}
    assert sample("runnerpool_token_fills_total", **labels) == 1
    assert sample("runnerpool_token_failures_total", reason="ScopeNotFound", **labels) == 1

    harness.updater.stop("team-a", "build")

    assert sample("runnerpool_token_fills_total", **labels) is None
    assert sample("runnerpool_token_expiry_timestamp_seconds", **labels) is None
    assert sample("runnerpool_token_failures_total", reason="ScopeNotFound", **labels) is None


def test_token_never_in_logs_reprs_or_labels(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    harness.updater.start(POOL)
    harness.github.tokens += [token(TOKEN_1), Unavailable("down"), token(TOKEN_2)]
    for _ in range(3):
        harness.run()
        harness.clock.advance(timedelta(minutes=31))

    assert TOKEN_1 not in caplog.text
    assert TOKEN_2 not in caplog.text
    assert "refreshed" in caplog.text
    assert TOKEN_1 not in repr(harness.updater.failure("team-a", "build"))
    assert TOKEN_1 not in repr(token(TOKEN_1))
    assert TOKEN_1 not in repr(harness.updater._pools)
    exposition = "".join(str(m) for m in REGISTRY.collect())
    assert TOKEN_1 not in exposition
    assert TOKEN_2 not in exposition


# -- the real scheduler, once -----------------------------------------------------------------------


def test_running_scheduler_fires_first_fill_immediately() -> None:
    done = threading.Event()
    patches: list[dict[str, Any]] = []
    github = FakeGitHubClient()
    github.tokens.append(RegistrationToken(TOKEN_1, datetime.now(UTC) + timedelta(hours=1)))
    cache = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=lambda data, url: github)

    def patch(ns: str, name: str, body: dict[str, Any]) -> None:
        patches.append(body)
        done.set()

    scheduler = started_scheduler(2)
    updater = SecretUpdater(cache, patch, lambda ns, name: None, scheduler, delete_leftover_runner)
    expected = datetime.now(UTC) + timedelta(minutes=30)

    def rescheduled() -> bool:
        job = scheduler.get_job(POOL.key)
        return job is not None and abs((job.next_run_time - expected).total_seconds()) < 60

    try:
        updater.start(POOL)
        assert done.wait(10), "first fill did not run"
        assert patches[0]["stringData"][TOKEN_SECRET_KEY] == TOKEN_1
        wait_for(rescheduled, message="the next fill 30 minutes before expiry")
        updater.stop_all()
        assert scheduler.get_jobs() == [], "shutdown leaves no job behind"
    finally:
        scheduler.shutdown(wait=False)


def test_a_pool_started_again_while_its_first_run_is_in_flight_gets_its_token_at_once() -> None:
    """An edit of the credential Secret has the reconciler start the pool's job again, here
    milliseconds after the first start: the first run, now stale, must
    not leave the replacement waiting for the safety net (minutes without a token)."""
    github, in_flight, release = FakeGitHubClient(), threading.Event(), threading.Event()

    def slow_token() -> RegistrationToken:
        in_flight.set()
        release.wait(10)
        return token(TOKEN_1, now=datetime.now(UTC))

    github.tokens += [slow_token, token(TOKEN_2, now=datetime.now(UTC))]
    cache = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=lambda data, url: github)
    written: list[str] = []
    scheduler = started_scheduler(2)
    updater = SecretUpdater(
        cache,
        lambda ns, name, body: written.append(body["stringData"][TOKEN_SECRET_KEY]),
        lambda ns, n: None,
        scheduler=scheduler,
        remove_leftover=delete_leftover_runner,
    )
    try:
        updater.start(POOL)
        assert in_flight.wait(10), "the first run did not start"
        updater.start(replace(POOL, credentials_version="2"))  # the Secret's new content
        wait_for(lambda: written, timeout=5, message="a token from the restarted job within seconds")
        release.set()
        wait_for(lambda: not github.tokens, message="the stale request to be answered")
        # The replacement asked with the Secret's new version, not waiting for the stale
        # request (made with the old one), whose token is never written.
        assert written == [TOKEN_2]
    finally:
        release.set()
        updater.stop_all()
        scheduler.shutdown(wait=False)


# -- through the real client ------------------------------------------------------------------------


def test_end_to_end_with_pygithub_client(mock: Any) -> None:
    mock.post(
        api("/orgs/octo-org/actions/runners/registration-token"),
        json=fixture("org-registration-token.json")["body"],
        status=201,
    )

    def factory(data: Mapping[str, str], url: str) -> GitHubClient:
        return client_from_secret_data(data, url, FAST)

    cache = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=factory)
    patches: list[tuple[str, str, dict[str, Any]]] = []
    updater = SecretUpdater(
        cache,
        lambda ns, name, body: patches.append((ns, name, body)),
        lambda ns, name: None,
        clock=Clock(),
        scheduler=(scheduler := BackgroundScheduler(timezone=UTC)),
        remove_leftover=delete_leftover_runner,
    )
    updater.start(POOL)
    try:
        run_job(scheduler)
    finally:
        updater.stop_all()

    annotations = patches[0][2]["metadata"]["annotations"]
    assert annotations[TOKEN_EXPIRY_ANNOTATION] == "2020-01-22T20:13:35Z"
    assert patches[0][2]["stringData"][TOKEN_SECRET_KEY] == "LLBF3JGZDX3P5PMEXLND6TS6FCWO6"
    assert mock.calls[0].request.url.startswith(API)


def test_pools_of_one_scope_share_one_token_request(harness: Harness) -> None:
    """A new pool in a scope that already has a fresh token gets it without asking GitHub."""
    second = PoolRef(
        namespace="team-a", name="deploy", scope=POOL.scope, credential_secret_name="github-cred"
    )
    other_credential = PoolRef(
        namespace="team-b", name="build", scope=POOL.scope, credential_secret_name="github-cred"
    )
    harness.secrets[("team-b", "github-cred")] = {"token": "ghp_y"}
    for pool in (POOL, second, other_credential):
        harness.updater.start(pool)
    harness.github.tokens += [token(TOKEN_1), token(TOKEN_2)]

    for pool in (POOL, second, other_credential):
        harness.run(pool)

    assert len(harness.github.token_requests) == 2, "one request per scope and credential, not per pool"
    tokens = {(ns, name): body["stringData"][TOKEN_SECRET_KEY] for ns, name, body in harness.patches}
    assert tokens == {
        ("team-a", "runner-token-build"): TOKEN_1,
        ("team-a", "runner-token-deploy"): TOKEN_1,
        ("team-b", "runner-token-build"): TOKEN_2,
    }


def test_pools_of_one_scope_due_together_share_githubs_failure_too(harness: Harness) -> None:
    """GitHub answers 502 (or refuses a revoked PAT) when a scope's pools are due together: one
    request answers for all of them. Before, each pool asked in turn, a hundred requests for one
    answer; each still backs off, and after its backoff the scope asks again, once."""
    pools = [replace(POOL, name=f"build-{index}") for index in range(5)]
    for pool in pools:
        harness.updater.start(pool)
    harness.github.tokens += [Unavailable("GitHub 502"), token(TOKEN_1)]

    for pool in pools:
        harness.run(pool)
    assert len(harness.github.token_requests) == 1, "one request for the scope's pools due together"
    assert all(harness.next_run(pool) > harness.clock.now for pool in pools), "each backs off"

    harness.clock.advance(timedelta(minutes=5))
    for pool in pools:
        harness.run(pool)
    assert len(harness.github.token_requests) == 2
    assert {body["stringData"][TOKEN_SECRET_KEY] for _, _, body in harness.patches} == {TOKEN_1}
    assert len(harness.patches) == 5


def test_a_pool_reaching_github_its_own_way_is_not_handed_anothers_failure(harness: Harness) -> None:
    """Same Secret and scope, but one pool goes through a proxy that fails: the other, due with
    it, asks GitHub for itself and gets its token."""
    proxied = replace(
        POOL, name="proxied", connection=Connection(proxies=(ProxyRef("http", "http://proxy:3128"),))
    )
    for pool in (proxied, POOL):
        harness.updater.start(pool)
    harness.github.tokens += [NotSent("proxy refused the connection"), token(TOKEN_1)]

    harness.run(proxied)
    harness.run(POOL)

    assert [body["stringData"][TOKEN_SECRET_KEY] for _, _, body in harness.patches] == [TOKEN_1]
    assert harness.updater.failure("team-a", "build") is None


# -- a Secret that lost its token -------------------------------------------------------------------


def _encoded(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def test_a_lost_token_is_refilled_now_from_the_shared_token(harness: Harness) -> None:
    """Deleted and recreated empty, or emptied by hand: written again at once, no GitHub call."""
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    harness.clock.advance(timedelta(minutes=5))

    assert harness.updater.check_secret("team-a", "build", _encoded(TOKEN_1), recreated=False) is None
    assert harness.next_run() > harness.clock.now, "the token is there: nothing to do"

    assert harness.updater.check_secret("team-a", "build", None, recreated=False) is None
    assert harness.next_run() == harness.clock.now, "emptied: refill now"
    harness.run()

    assert [body["stringData"][TOKEN_SECRET_KEY] for _, _, body in harness.patches] == [TOKEN_1, TOKEN_1]
    assert len(harness.github.token_requests) == 1, "the scope's token was still fresh: no second request"


def test_a_cache_that_lags_the_jobs_own_write_is_asked_again(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens.append(token(TOKEN_1))
    harness.run()
    scheduled = harness.next_run()

    recheck = harness.updater.check_secret("team-a", "build", None, recreated=False)

    assert recheck is not None and 0 < recheck <= 2, "right after the write: ask again shortly"
    assert harness.next_run() == scheduled, "and no refill yet"
    harness.clock.advance(timedelta(seconds=recheck))
    assert harness.updater.check_secret("team-a", "build", None, recreated=False) is None
    assert harness.next_run() == harness.clock.now


def test_a_failing_job_keeps_its_backoff_when_the_secret_is_recreated(harness: Harness) -> None:
    harness.updater.start(POOL)
    harness.github.tokens += [token(TOKEN_1), BadCredentials("revoked")]
    harness.run()
    harness.clock.advance(timedelta(minutes=31))
    harness.run()
    backoff = harness.next_run()

    harness.updater.check_secret("team-a", "build", None, recreated=True)

    assert harness.next_run() == backoff, "no hammering GitHub with bad credentials"
