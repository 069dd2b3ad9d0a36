"""Polling GitHub for active jobs, against GitHub's shapes and codes served by ``responses``."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
import responses
from github import Auth, Github

from runnerpool.github.errors import BadCredentials, NotFound, RateLimited
from runnerpool.github.pygithub import ACTIVE_RUN_STATUSES, PyGithubClient
from tests.demand_payloads import API, fixture, job_object

REPO = "octo-org/hello-world"
RUNS = "/repos/octo-org/hello-world/actions/runs"
NOW = 1_900_000_000.0
BUDGET = {
    "x-ratelimit-limit": "5000",
    "x-ratelimit-remaining": "4990",
    "x-ratelimit-reset": str(int(NOW) + 600),
}


def url(path: str) -> re.Pattern[str]:
    return re.compile(r"https://api\.github\.com(:443)?" + re.escape(path) + r"(\?.*)?$")


def runs(*ids: int, status: str) -> dict[str, Any]:
    template = fixture("repo-workflow-runs.json")["workflow_runs"][0]
    items = [copy.deepcopy(template) | {"id": run_id, "status": status} for run_id in ids]
    return {"total_count": len(items), "workflow_runs": items}


def jobs(*items: dict[str, Any]) -> dict[str, Any]:
    return {"total_count": len(items), "jobs": list(items)}


def status_is(value: str) -> Any:
    return responses.matchers.query_param_matcher({"status": value, "per_page": "100"})


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def jobs_client() -> PyGithubClient:
    gh = Github(auth=Auth.Token("ghp_test"), base_url=API, retry=None, lazy=True)
    return PyGithubClient(gh, clock=lambda: NOW)


def test_lists_jobs_of_queued_in_progress_and_waiting_runs(mock: responses.RequestsMock) -> None:
    mock.get(url(RUNS), json=runs(11, status="queued"), match=[status_is("queued")], headers={"ETag": '"q1"'})
    mock.get(
        url(RUNS),
        json=runs(12, status="in_progress"),
        match=[status_is("in_progress")],
        headers={"ETag": '"p1"'},
    )
    mock.get(url(RUNS), json=runs(13, status="waiting"), match=[status_is("waiting")])
    mock.get(url(f"{RUNS}/11/jobs"), json=jobs(job_object(1, "queued", ["self-hosted"], run_id=11)))
    mock.get(
        url(f"{RUNS}/13/jobs"),
        json=jobs(
            job_object(4, "waiting", ["self-hosted"], run_id=13),  # a deploy job awaiting approval
            job_object(5, "queued", ["self-hosted"], run_id=13),  # its sibling wants a runner now
        ),
    )
    mock.get(
        url(f"{RUNS}/12/jobs"),
        json=jobs(
            job_object(2, "in_progress", ["self-hosted"], run_id=12, runner="gpu-abcde"),
            job_object(3, "queued", ["self-hosted", "gpu"], run_id=12),  # a matrix wider than the pool
        ),
        headers=BUDGET,
    )
    active = jobs_client().active_jobs(REPO)
    assert sorted((job.id, job.state, job.repository) for job in active.jobs) == [
        (1, "queued", REPO),
        (2, "in_progress", REPO),
        (3, "queued", REPO),
        (4, None, REPO),  # awaiting approval: wants no runner yet
        (5, "queued", REPO),
    ], "a run awaiting an approval is waiting, and its queued jobs are seen there only"
    assert active.spent == 6
    jobs_query = [call.request.url for call in mock.calls if "/jobs" in (call.request.url or "")]
    assert all("filter=latest" in str(u) and "per_page=100" in str(u) for u in jobs_query)


def test_an_idle_repository_costs_nothing_the_second_time(mock: responses.RequestsMock) -> None:
    empty = {"total_count": 0, "workflow_runs": []}
    for status in ACTIVE_RUN_STATUSES:
        mock.get(url(RUNS), json=empty, match=[status_is(status)], headers={"ETag": f'"{status}"'})
    client = jobs_client()
    assert client.active_jobs(REPO).spent == 3
    mock.reset()
    for status in ACTIVE_RUN_STATUSES:
        mock.get(
            url(RUNS),
            status=304,
            match=[status_is(status), responses.matchers.header_matcher({"If-None-Match": f'"{status}"'})],
        )
    again = client.active_jobs(REPO)
    assert (again.jobs, again.spent) == ((), 0)


def test_follows_link_pagination(mock: responses.RequestsMock) -> None:
    page2 = "https://api.github.com/repositories/1296269/actions/runs?status=queued&per_page=100&page=2"
    mock.get(
        url(RUNS),
        json=runs(11, status="queued"),
        match=[status_is("queued")],
        headers={"Link": f'<{page2}>; rel="next"'},
    )
    mock.get(url("/repositories/1296269/actions/runs"), json=runs(13, status="queued"))
    mock.get(url(RUNS), json=runs(status="in_progress"), match=[status_is("in_progress")])
    mock.get(url(RUNS), json=runs(status="waiting"), match=[status_is("waiting")])
    mock.get(url(f"{RUNS}/11/jobs"), json=jobs(job_object(1, "queued", ["self-hosted"])))
    mock.get(url(f"{RUNS}/13/jobs"), json=jobs(job_object(3, "queued", ["self-hosted"])))
    assert sorted(job.id for job in jobs_client().active_jobs(REPO).jobs) == [1, 3]


def test_rate_limit_is_handed_to_the_caller(mock: responses.RequestsMock) -> None:
    mock.get(
        url(RUNS),
        status=403,
        json={
            "message": "API rate limit exceeded for user ID 1.",
            "documentation_url": "https://docs.github.com",
        },
        headers={**BUDGET, "x-ratelimit-remaining": "0"},
    )
    client = jobs_client()
    with pytest.raises(RateLimited) as info:
        client.active_jobs(REPO)
    assert info.value.retry_after == pytest.approx(600)
    budget = client.rate_limit()
    assert budget is not None and budget.remaining == 0


def test_bad_credentials_are_reported(mock: responses.RequestsMock) -> None:
    mock.get(
        url(RUNS),
        status=401,
        json={"message": "Bad credentials", "documentation_url": "https://docs.github.com"},
    )
    with pytest.raises(BadCredentials):
        jobs_client().active_jobs(REPO)


def test_a_run_gone_between_the_two_listings_takes_only_its_own_jobs(mock: responses.RequestsMock) -> None:
    """A run deleted after the runs listing answers 404 for its jobs: the repository's other
    queued jobs still count (a 404 read as "repository gone" ended them all for 10 minutes)."""
    mock.get(url(RUNS), json=runs(11, 12, status="queued"), match=[status_is("queued")])
    mock.get(url(RUNS), json=runs(status="in_progress"), match=[status_is("in_progress")])
    mock.get(url(RUNS), json=runs(status="waiting"), match=[status_is("waiting")])
    mock.get(url(f"{RUNS}/11/jobs"), json=jobs(job_object(1, "queued", ["self-hosted"], run_id=11)))
    mock.get(
        url(f"{RUNS}/12/jobs"),
        status=404,
        json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"},
    )
    active = jobs_client().active_jobs(REPO)
    assert [(job.id, job.state) for job in active.jobs] == [(1, "queued")]


def test_the_repository_gone_is_still_reported(mock: responses.RequestsMock) -> None:
    mock.get(
        url(RUNS), status=404, json={"message": "Not Found", "documentation_url": "https://docs.github.com"}
    )
    with pytest.raises(NotFound):
        jobs_client().active_jobs(REPO)
