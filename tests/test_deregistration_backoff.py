"""A deleted pool's deregistration backs off during a GitHub outage (issue 22).

The finalizer asks the runner managers to drain a deleted pool on every reconcile, and a
failing reconcile comes back as fast as the work queue allows: a pool deleted during a 15 s
outage made 30 GitHub calls in it. Here GitHub is ``responses`` on its real endpoints, the
finalizer is a loop calling ``drain`` every 100 ms of a fake clock (more often than the work
queue would), and the tests count the HTTP requests that reached GitHub.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from github import Auth

from runnerpool import naming
from runnerpool.domain import PoolRef
from runnerpool.github.credentials import PAT_KEY, NamedClientCache
from runnerpool.github.errors import GitHubError
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import ClientOptions, PyGithubClient
from runnerpool.runners.manager import RunnerManagers
from runnerpool.settings import RunnerSettings
from tests.github_mocks import FAST, gh, github, runner_json
from tests.test_runner_listing import NS, Cache, Pods

__all__ = ["github"]

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
#: One attempt is 1 + ``retries`` requests when GitHub answers 5xx (the client's transport retry).
REQUESTS_PER_ATTEMPT = 1 + ClientOptions().retries
ORG_RUNNERS = "/orgs/octo-org/actions/runners"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _managers(clock: Clock, cache: Cache) -> RunnerManagers:
    secrets = {(NS, naming.DEFAULT_CREDENTIAL_SECRET): {PAT_KEY: "ghp_deregistration_test"}}
    started, real = clock.now, time.time()

    def unix_now() -> float:
        """The client's clock (Unix seconds, as GitHub's reset times are) moves with the test's."""
        return real + (clock.now - started).total_seconds()

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        return PyGithubClient.from_auth(Auth.Token(data[PAT_KEY]), base_url, FAST, clock=unix_now)

    clients = NamedClientCache(lambda ns, name: secrets.get((ns, name)), factory=factory)
    return RunnerManagers(
        cache,
        clients,
        Pods(),  # type: ignore[arg-type]
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        clock=clock,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started: only drain() runs
    )


def _finalizer(
    mock: responses.RequestsMock,
    managers: RunnerManagers,
    ref: PoolRef,
    clock: Clock,
    seconds: float,
    every: float = 0.1,
) -> list[float]:
    """Drain ``ref`` every ``every`` seconds for ``seconds``; the times (from the start) of the
    drains that sent GitHub a request, as opposed to those refused without one."""
    started, attempts = clock.now, []
    requests = len(mock.calls)
    while (clock.now - started).total_seconds() < seconds:
        with contextlib.suppress(GitHubError):
            managers.drain(ref)
        if len(mock.calls) > requests:
            attempts.append(round((clock.now - started).total_seconds(), 1))
            requests = len(mock.calls)
        clock.advance(every)
    return attempts


@pytest.fixture
def mock(github: responses.RequestsMock) -> responses.RequestsMock:
    return github


def _deleted_pool(cache: Cache, name: str = "build", org: str = "octo-org") -> PoolRef:
    return cache.add(name, org=org)


@pytest.mark.parametrize("broken", ["listing", "delete"])
def test_a_pool_deleted_during_an_outage_backs_off_per_scope(
    mock: responses.RequestsMock, broken: str
) -> None:
    clock, cache = Clock(), Cache()
    managers = _managers(clock, cache)
    ref = _deleted_pool(cache)
    if broken == "listing":
        mock.get(gh(ORG_RUNNERS), status=503, json={"message": "down"})
    else:
        listed = {"total_count": 1, "runners": [runner_json(7, "build-a", [f"{NS}/build"])]}
        mock.get(gh(ORG_RUNNERS), json=listed)
        mock.delete(gh(ORG_RUNNERS, r"/\d+"), status=503, json={"message": "down"})

    attempts = _finalizer(mock, managers, ref, clock, seconds=15)

    # 150 drains; GitHub is asked at 0, 1, 3, 7 s (then 15 s): doubling from one second.
    assert attempts == [0.0, 1.0, 3.0, 7.0]
    if broken == "listing":
        assert len(mock.calls) == len(attempts) * REQUESTS_PER_ATTEMPT, "the calls in 15 s of outage"
    else:
        # Every attempt deletes; the listing made at 0 s serves them all: the pool has no pods,
        # so no runner can register since, and a failed delete learnt nothing new.
        listings = [call for call in mock.calls if call.request.method == "GET"]
        assert len(listings) == 1
        assert len(mock.calls) == len(listings) + len(attempts) * REQUESTS_PER_ATTEMPT


def test_retry_after_is_honoured(mock: responses.RequestsMock) -> None:
    clock, cache = Clock(), Cache()
    managers = _managers(clock, cache)
    ref = _deleted_pool(cache)
    mock.get(gh(ORG_RUNNERS), status=429, headers={"Retry-After": "30"}, json={"message": "slow down"})

    attempts = _finalizer(mock, managers, ref, clock, seconds=45)

    assert attempts == [0.0, 30.0], "not asked again before GitHub's Retry-After"


def test_a_rate_limit_reset_is_honoured(mock: responses.RequestsMock) -> None:
    clock, cache = Clock(), Cache()
    managers = _managers(clock, cache)
    ref = _deleted_pool(cache)
    reset = int(time.time()) + 40
    mock.get(
        gh(ORG_RUNNERS),
        status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000", "x-ratelimit-reset": str(reset)},
        json={"message": "API rate limit exceeded"},
    )

    attempts = _finalizer(mock, managers, ref, clock, seconds=50)

    # Past the reset this mock still says "limited": the later attempts back off from there.
    assert len(attempts) >= 2
    assert 38.0 <= attempts[1] <= 41.0, f"asked again {attempts[1]} s later; the reset was 40 s away"


def test_another_scope_is_not_held_back(mock: responses.RequestsMock) -> None:
    clock, cache = Clock(), Cache()
    managers = _managers(clock, cache)
    down = _deleted_pool(cache, "build", "octo-org")
    up = _deleted_pool(cache, "other", "other-org")
    mock.get(gh(ORG_RUNNERS), status=503, json={"message": "down"})
    mock.get(gh("/orgs/other-org/actions/runners"), json={"total_count": 0, "runners": []})

    with pytest.raises(GitHubError):
        managers.drain(down)
    before = len(mock.calls)
    with pytest.raises(GitHubError):
        managers.drain(down)  # backing off: refused without a request
    assert len(mock.calls) == before

    drained = managers.drain(up)

    assert (drained.busy, drained.pods_left) == (0, 0)
    assert len(mock.calls) == before + 1
