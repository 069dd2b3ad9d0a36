"""The scale set client against the fake GitHub over HTTP: what issue 34's operator will see.

The registration token comes through the REST client (PyGithub against the fake), is traded
at ``/actions/runner-registration`` for the Actions service and an expiring admin token, and
every scale set call, the session and its long poll go over real HTTP to
``testworld.fakegithub.scaleset``. The fake and the client share one clock, so token expiry is
a step of that clock, not a wait.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from github import Auth

from runnerpool.domain import Scope
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.connection import ActionsConnection, from_rest
from runnerpool.scaleset.demand import Cursor, desired_runners
from runnerpool.scaleset.errors import (
    JobStillRunning,
    RunnerNotFound,
    ScaleSetNotFound,
    SessionConflict,
    SessionNotFound,
)
from runnerpool.scaleset.session import MessageSession
from runnerpool.scaleset.types import JobMessageType, Label, RunnerScaleSet
from runnerpool.scaleset.wire import Policy, Wire
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.scaleset import ScaleSetService, service

ORG = "octo-org"
PAT = "ghp_scaleset"
START = 1_767_000_000.0


class World:
    def __init__(self, fake: FakeGitHub, now: list[float]) -> None:
        self.fake = fake
        self.now = now
        self.sleeps: list[float] = []
        rest = PyGithubClient.from_auth(Auth.Token(PAT), fake.url, clock=lambda: now[0])
        self.wire = Wire(Policy(timeout=10, poll_timeout=10), sleep=self.sleeps.append)
        scope = Scope(organization=ORG)
        web = fake.url  # the fake serves web and API on one origin
        self.connection = ActionsConnection(
            fake.url, scope.html_url(web), from_rest(rest, scope), self.wire, clock=lambda: now[0]
        )
        self.client = ScaleSetClient(self.connection, self.wire)
        self.service: ScaleSetService = service(fake, poll_wait=0.2)

    def scale_set(self, name: str = "k8s-linux") -> RunnerScaleSet:
        group = self.client.runner_group("default")
        return self.client.create_scale_set(RunnerScaleSet(name=name, runner_group_id=group.id))

    def session(self, scale_set_id: int, owner: str = "replica-a", **kwargs: float) -> MessageSession:
        return MessageSession.open(self.client, scale_set_id, owner, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def world() -> Iterator[World]:
    now = [START]
    with FakeGitHub(scopes=[ORG], tokens=[PAT], clock=lambda: now[0]) as fake:
        yield World(fake, now)


def test_a_scale_set_from_creation_to_deletion(world: World) -> None:
    client = world.client
    group = client.runner_group("default")
    assert client.scale_set(group.id, "k8s-linux") is None
    created = world.scale_set()
    assert client.scale_set(group.id, "k8s-linux") == created
    assert [(label.name, label.type) for label in created.labels] == [("k8s-linux", "System")]
    updated = client.update_scale_set(
        created.id,
        RunnerScaleSet(name="k8s-linux", labels=(Label(name="k8s-linux"), Label(name="gpu", type="User"))),
    )
    assert [label.name for label in updated.labels] == ["k8s-linux", "gpu"]

    jit = client.generate_jit_config(created.id, "pool-abc")
    assert jit.runner.runner_scale_set_id == created.id
    assert client.runner_by_name("pool-abc") == jit.runner
    client.remove_runner(jit.runner.id)
    with pytest.raises(RunnerNotFound):
        client.runner(jit.runner.id)

    client.delete_scale_set(created.id)
    with pytest.raises(ScaleSetNotFound):
        client.scale_set_by_id(created.id)
    assert world.fake.count("actions/runner-registration", status=200) == 1


def test_jobs_flow_through_the_session_and_the_statistics_follow(world: World) -> None:
    created = world.scale_set()
    session = world.session(created.id)
    assert session.statistics is not None and session.statistics.total_assigned_jobs == 0
    assert session.poll(0, 10) is None  # 202 after the fake's short hold

    request_id = world.service.offer_job(created.id)
    cursor = Cursor()
    offered = session.poll(cursor.last_message_id, 10)
    assert offered is not None
    assert [job.runner_request_id for job in offered.of(JobMessageType.AVAILABLE)] == [request_id]
    assert session.acquire_jobs([request_id]) == [request_id]
    session.acknowledge(offered.message_id)
    cursor = cursor.advance(offered)

    assigned = session.poll(cursor.last_message_id, 10)
    assert assigned is not None and assigned.of(JobMessageType.ASSIGNED)
    assert assigned.statistics.total_assigned_jobs == 1
    assert desired_runners(assigned.statistics, 0, 10, min_idle=1) == 2
    session.acknowledge(assigned.message_id)
    cursor = cursor.advance(assigned)

    jit = world.client.generate_jit_config(created.id, "pool-abc")
    world.service.start_job(request_id, "pool-abc")
    started = session.poll(cursor.last_message_id, 10)
    assert started is not None and started.of(JobMessageType.STARTED)[0].runner_id == jit.runner.id
    assert started.statistics.total_busy_runners == 1
    with pytest.raises(JobStillRunning):
        world.client.remove_runner(jit.runner.id)
    session.acknowledge(started.message_id)
    cursor = cursor.advance(started)

    world.service.complete_job(request_id)
    completed = session.poll(cursor.last_message_id, 10)
    assert completed is not None and completed.of(JobMessageType.COMPLETED)[0].result == "succeeded"
    assert completed.statistics.total_assigned_jobs == 0
    with pytest.raises(RunnerNotFound):
        world.client.runner(jit.runner.id)
    session.close()
    assert world.service.sessions(created.id) == []


def test_an_unacknowledged_message_comes_again_and_the_cursor_ignores_it(world: World) -> None:
    created = world.scale_set()
    session = world.session(created.id)
    world.service.offer_job(created.id)
    first = session.poll(0, 10)
    again = session.poll(0, 10)  # a new leader that knows no last id gets it again
    assert first is not None and again is not None and again.message_id == first.message_id
    cursor = Cursor().advance(first)
    assert cursor.advance(again) is cursor
    assert session.poll(cursor.last_message_id, 10) is None  # passing the last id: nothing new


def test_a_session_another_replica_holds_is_waited_for(world: World) -> None:
    created = world.scale_set()
    holder = world.session(created.id, "replica-a")
    with pytest.raises(SessionConflict):
        world.session(created.id, "replica-b", conflict_retries=2, conflict_wait=30)
    assert world.sleeps == [30.0, 30.0]
    assert world.service.sessions(created.id) == ["replica-a"]

    holder.close()
    taker = world.session(created.id, "replica-b", conflict_retries=0)
    assert taker.session.owner_name == "replica-b"


def test_a_session_whose_owner_went_silent_is_taken_over(world: World) -> None:
    created = world.scale_set()
    world.session(created.id, "replica-a")
    world.now[0] += world.service.session_timeout + 1
    assert world.session(created.id, "replica-b", conflict_retries=0).session.owner_name == "replica-b"


def test_expired_queue_and_admin_tokens_are_renewed_on_the_way(world: World) -> None:
    created = world.scale_set()
    session = world.session(created.id)
    first_token = session.session.message_queue_access_token
    world.service.expire_queue_tokens()
    world.service.offer_job(created.id)
    assert session.poll(0, 10) is not None
    assert session.session.message_queue_access_token != first_token

    world.now[0] += 3600  # the admin token (and its registration token) lapsed
    assert world.client.scale_set_by_id(created.id).id == created.id
    assert world.fake.count("actions/runner-registration", status=200) == 2


def test_server_errors_are_retried_and_a_deleted_scale_set_surfaces(world: World) -> None:
    created = world.scale_set()
    world.fake.fail_next(2, 503, path=f"/runnerscalesets/{created.id}")
    assert world.client.scale_set_by_id(created.id).name == "k8s-linux"
    assert world.sleeps == [1.0, 2.0]

    session = world.session(created.id)
    world.client.delete_scale_set(created.id)
    with pytest.raises(SessionNotFound):  # 401 on the queue, then 404 on the refresh
        session.poll(0, 10)
    with pytest.raises(ScaleSetNotFound):  # and a new session says why
        world.session(created.id, conflict_retries=0)


def test_a_job_no_runner_took_is_cancelled_and_offered_again(world: World) -> None:
    created = world.scale_set()
    session = world.session(created.id)
    request_id = world.service.offer_job(created.id)
    offered = session.poll(0, 10)
    assert offered is not None
    session.acquire_jobs([request_id])
    session.acknowledge(offered.message_id)
    assigned = session.poll(offered.message_id, 10)
    assert assigned is not None and assigned.statistics.total_assigned_jobs == 1
    session.acknowledge(assigned.message_id)

    world.service.reassign(request_id)
    again = session.poll(assigned.message_id, 10)
    assert again is not None
    assert [(job.message_type, job.result) for job in again.jobs] == [
        ("JobCompleted", "canceled"),
        ("JobAvailable", ""),
    ]
    assert (again.statistics.total_assigned_jobs, again.statistics.total_available_jobs) == (0, 1)
