"""The fake GitHub fails a job whose runner went silent, as GitHub does ("lost communication").

GitHub's lock on a running job lasts 10 minutes from the runner's last renewal; when it runs
out the job completes as ``failure`` and the runner is listed offline and idle, still
registered (see ``testworld.fakegithub``). These tests drive the fake's clock, so no test
waits out a timeout, and check what the operator would read (REST shapes from GitHub's
description, the ``workflow_job`` webhook) and what a runner process would be answered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.test_fake_runner_protocol import PAT, Listener, _kv
from tests.test_fakegithub import SPEC, ContractChecker
from testworld.fakegithub import LOST_CONTACT_SECONDS, FakeGitHub
from testworld.fakegithub.schema import validate

REPO = "octo/hello"
START = 1_800_000_000.0
LOST = 30.0
GET_JOB = SPEC["paths"]["/repos/{owner}/{repo}/actions/jobs/{job_id}"]["get"]
JOB_SCHEMA = GET_JOB["responses"]["200"]["content"]["application/json"]["schema"]
ANNOTATION = re.compile(
    r"The self-hosted runner: (?P<name>\S+) lost communication with the server\. Verify the machine is "
    r"running and has a healthy network connection\."
)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", clock=clock, lost_contact_seconds=LOST) as server:
        yield server


@pytest.fixture
def gh(fake: FakeGitHub) -> Iterator[requests.Session]:
    """The operator's view: REST calls, each answer checked against GitHub's description."""
    session = requests.Session()
    session.headers.update(PAT)
    session.hooks["response"].append(ContractChecker(fake.url))
    with session:
        yield session


def _running(fake: FakeGitHub, name: str = "pod-1", *, ephemeral: bool = True) -> tuple[Listener, int]:
    """A runner process that has started a 1-hour job."""
    runner = Listener(fake, REPO, name, ephemeral=ephemeral)
    runner.open()
    job_id = fake.queue_job(REPO, ["pool"], 3600)
    assert _kv(runner.poll(5))["job_id"] == str(job_id)
    assert runner.post(f"/jobs/{job_id}/started").status_code == 204
    return runner, job_id


def _renew(runner: Listener, job_id: int | str) -> requests.Response:
    return runner.post("/renewjob", job_id=str(job_id))


def _runner(gh: requests.Session, fake: FakeGitHub, name: str) -> dict[str, Any]:
    listed = gh.get(f"{fake.url}/repos/{REPO}/actions/runners").json()["runners"]
    found: dict[str, Any] = next(r for r in listed if r["name"] == name)
    return found


def test_a_job_whose_runner_stops_renewing_fails_and_the_runner_is_offline_idle_and_registered(
    fake: FakeGitHub, clock: Clock, gh: requests.Session
) -> None:
    runner, job_id = _running(fake)
    job_url = f"{fake.url}/repos/{REPO}/actions/jobs/{job_id}"
    clock.now += LOST - 1
    assert gh.get(job_url).json()["status"] == "in_progress"
    assert (_runner(gh, fake, "pod-1")["status"], _runner(gh, fake, "pod-1")["busy"]) == ("online", True)

    clock.now += 1  # the lock taken at the start has run out: GitHub gives up on the runner
    job = gh.get(job_url).json()
    assert not validate(job, JOB_SCHEMA)
    assert (job["status"], job["conclusion"]) == ("completed", "failure")
    assert job["completed_at"] == "2027-01-15T08:00:30Z"  # when the lock ran out
    assert (job["runner_name"], job["runner_id"]) == ("pod-1", runner.runner_id)
    [annotation] = fake.annotations(job_id)
    assert (found := ANNOTATION.match(annotation)) and found["name"] == "pod-1"
    # Ephemeral, and still registered: offline and idle until someone deletes it.
    listed = _runner(gh, fake, "pod-1")
    assert (listed["id"], listed["status"], listed["busy"], listed["ephemeral"]) == (
        runner.runner_id,
        "offline",
        False,
        True,
    )
    # A runner process that comes back cannot renew or report the job any more.
    assert _renew(runner, job_id).status_code == 404
    assert runner.post(f"/jobs/{job_id}/completed", conclusion="success").status_code == 404
    assert gh.get(job_url).json()["conclusion"] == "failure"
    # Unlike a busy one (422), it can be deleted.
    assert gh.delete(f"{fake.url}/repos/{REPO}/actions/runners/{runner.runner_id}").status_code == 204
    assert fake.runners(REPO) == []


def test_renewals_keep_a_job_alive_and_its_runner_online_for_as_long_as_it_runs(
    fake: FakeGitHub, clock: Clock, gh: requests.Session
) -> None:
    runner, job_id = _running(fake, ephemeral=False)
    renewed = _renew(runner, job_id)
    assert renewed.status_code == 200
    assert _kv(renewed) == {"locked_until": "2027-01-15T08:00:30Z", "renew_s": "3"}  # a tenth of the lock
    # Twenty minutes of renewals a little before each lock runs out (and the listener never polls).
    for _ in range(40):
        clock.now += LOST - 0.5
        assert fake.job(job_id)["status"] == "in_progress"
        assert _renew(runner, job_id).status_code == 200
    assert (_runner(gh, fake, "pod-1")["status"], _runner(gh, fake, "pod-1")["busy"]) == ("online", True)

    assert runner.post(f"/jobs/{job_id}/completed", conclusion="success").status_code == 204
    assert runner.poll(0.1).status_code == 204  # idle and listening again
    # Done is done: no lock runs out on a completed job.
    clock.now += 10 * LOST
    job = gh.get(f"{fake.url}/repos/{REPO}/actions/jobs/{job_id}").json()
    assert (job["conclusion"], job["completed_at"]) == ("success", "2027-01-15T08:19:40Z")
    assert fake.annotations(job_id) == []
    assert _renew(runner, job_id).status_code == 404


def test_a_completed_job_is_never_failed_later(fake: FakeGitHub, clock: Clock) -> None:
    runner, job_id = _running(fake)
    clock.now += LOST - 1
    assert runner.post(f"/jobs/{job_id}/completed", conclusion="success").status_code == 204
    clock.now += LOST
    assert (fake.job(job_id)["status"], fake.job(job_id)["conclusion"]) == ("completed", "success")
    assert fake.runners(REPO) == []  # an ephemeral runner's job done: GitHub removed it


def test_the_failure_is_delivered_as_a_completed_workflow_job_event(fake: FakeGitHub, clock: Clock) -> None:
    events: list[dict[str, Any]] = []
    fake.on_job_event(events.append)
    _runner_process, job_id = _running(fake)
    clock.now += LOST
    fake.jobs()
    assert [e["action"] for e in events] == ["queued", "in_progress", "completed"]
    completed = events[-1]["workflow_job"]
    assert not validate(completed, JOB_SCHEMA)
    assert (completed["id"], completed["conclusion"]) == (job_id, "failure")
    assert completed["runner_name"] == "pod-1"


def test_only_the_runner_of_a_running_job_may_renew_it(fake: FakeGitHub) -> None:
    runner, job_id = _running(fake)
    other = Listener(fake, REPO, "pod-2")
    other.open()
    assert _renew(other, job_id).status_code == 404
    assert _renew(runner, "x").status_code == 400
    queued = fake.queue_job(REPO, ["pool"], 60)
    assert _kv(other.poll(5))["job_id"] == str(queued)
    assert _renew(other, queued).status_code == 404  # offered, not started
    assert _renew(runner, job_id).status_code == 200


def test_lost_contact_is_600_s_by_default_and_settable_per_fake(clock: Clock) -> None:
    assert LOST_CONTACT_SECONDS == 600
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", clock=clock) as fake:
        runner, job_id = _running(fake)
        assert _kv(_renew(runner, job_id))["renew_s"] == "60"  # the real runner's interval
        clock.now += 599
        assert fake.job(job_id)["status"] == "in_progress"
        # Shortened while the job runs (what the test world's node tests do), over the control API.
        control = fake.url.removesuffix("/api/v3") + "/_fake"
        answer = requests.post(f"{control}/settings", json={"lost_contact_seconds": 4}, timeout=5)
        assert answer.json() == {"lost_contact_seconds": 4.0, "min_runner_version": None}
        assert fake.job(job_id)["conclusion"] == "failure"
    with pytest.raises(ValueError, match="positive"):
        FakeGitHub(lost_contact_seconds=0)
