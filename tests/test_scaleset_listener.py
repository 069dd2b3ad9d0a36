"""The scale-set listener against the fake GitHub over HTTP: what a scale-set pool's status shows.

Each test runs the listener's thread against ``FakeGitHub`` (its scale set service with a short
long poll) and watches what it publishes through ``FakeSink``, the stand-in for the pool's
``status.scaleSet``. The order of writes and acknowledgements is read from the calls the
listener's transport made (``RecordingWire``) and the sink's own record.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pytest
import requests
from github import Auth

from runnerpool import api, naming, scale_set_pools
from runnerpool.domain import Connection, PoolRef, Scope
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.github.types import JitRequest
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason
from runnerpool.scale_set_pools import (
    JustFinalized,
    PoolScaleSets,
    ScaleSetClaims,
    ScaleSetJitConfigs,
    listened_pools,
    resumed_view,
    status_of,
)
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.clients import ScaleSetClients, config_url
from runnerpool.scaleset.errors import ListenerStillRunning, ScaleSetNotThePools, ScaleSetStillUsed
from runnerpool.scaleset.fake import FakeSink
from runnerpool.scaleset.listener import (
    CALL_WORKERS,
    Holder,
    ScaleSetListener,
    ScaleSetSettings,
    ScaleSetView,
    Timing,
    alone,
    desired_scale_set,
    recorded,
)
from runnerpool.scaleset.poller import PollAnswer
from runnerpool.scaleset.runnable import PoolKey, ScaleSetListeners, later, listener_factory
from runnerpool.scaleset.session import MessageSession, parse_message
from runnerpool.scaleset.types import Label, RunnerScaleSet, RunnerSetting
from runnerpool.scaleset.wire import Policy, Wire
from runnerpool.settings import GitHubSettings, Settings
from tests.pools import pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.scaleset import ScaleSetService, service
from testworld.wait import poll_until

ORG = "octo-org"
PAT = "ghp_scaleset_listener"
OWNER = "runnerpool-operator-0"
NS = "team-a"
POOL = "linux"
NAME = "k8s-linux"
POLICY = Policy(timeout=5, poll_timeout=5, retries=1, backoff_min=0.01, backoff_max=0.05)
TIMING = Timing(backoff_min=0.02, backoff_max=0.2, conflict_wait=0.1)


class RecordingWire(Wire):
    """Keeps ``(method, url)`` of every request, in order, in a list shared by all its kind."""

    def __init__(self, calls: list[tuple[str, str]], lock: threading.Lock) -> None:
        super().__init__(POLICY)
        self._calls = calls
        self._calls_lock = lock

    def send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        with self._calls_lock:
            self._calls.append((method, url))
        answer = super().send(method, url, **kwargs)
        if method == "DELETE" and "/messages/" in url and answer.status_code == 204:
            with self._calls_lock:  # acknowledged: the message is gone from the queue
                self._calls.append(("ACKED", url.split("?", maxsplit=1)[0].rsplit("/", 1)[1]))
        return answer

    #: The threads the long polls were awaited on (all wires).
    poll_threads: ClassVar[set[str]] = set()

    async def send_async(self, method: str, url: str, **kwargs: Any) -> PollAnswer:
        """The listener's long polls (awaited on the poll loop)."""
        with self._calls_lock:
            self._calls.append((method, url))
            self.poll_threads.add(threading.current_thread().name)
        return await super().send_async(method, url, **kwargs)


class Rest:
    """``ClientCache`` for one Secret: ``rotate`` plays a changed Secret (a new REST client)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: GitHubClient = PyGithubClient.from_auth(Auth.Token(PAT), url)

    def get(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient:
        return self.client

    def rotate(self) -> None:
        self.client = PyGithubClient.from_auth(Auth.Token(PAT), self.url)


@dataclass
class World:
    fake: FakeGitHub
    service: ScaleSetService
    rest: Rest
    clients: ScaleSetClients
    sink: FakeSink
    pool: PoolRef
    calls: list[tuple[str, str]]
    events: list[tuple[str, int]] = field(default_factory=list)
    listeners: list[ScaleSetListener] = field(default_factory=list)

    def settings(self, **changes: Any) -> ScaleSetSettings:
        given: dict[str, Any] = {"labels": ("gpu",), "max_runners": 5} | changes
        return ScaleSetSettings(self.pool, NAME, **given)

    def listener(
        self,
        resume: ScaleSetView | None = None,
        holder: Holder = alone,
        timing: Timing = TIMING,
        **changes: Any,
    ) -> ScaleSetListener:
        settings = self.settings(**changes)
        made = ScaleSetListener(
            settings,
            lambda: self.clients.get(settings.pool),
            self.sink,
            OWNER,
            resume=resume,
            timing=timing,
            holder=holder,
        )
        self.listeners.append(made)
        made.start()
        return made

    @property
    def client(self) -> ScaleSetClient:
        return self.clients.get(self.pool)

    def wait(self, predicate: Any, timeout: float = 10.0, *, latest: bool = False) -> ScaleSetView:
        return self.sink.wait_for(NS, POOL, predicate, timeout, latest=latest)

    def listening(self) -> ScaleSetView:
        """The view once the listener holds its session (problem cleared, id known)."""
        view = self.wait(lambda v: v.scale_set_id and v.problem is None, latest=True)
        assert self.fake.wait_for(lambda: self.service.sessions(view.scale_set_id) == [OWNER])
        return view

    def acks(self) -> list[int]:
        """The messages acknowledged (the queue answered 204), in order."""
        return [int(message_id) for kind, message_id in self.calls if kind == "ACKED"]

    def runner(self, scale_set_id: int, name: str) -> None:
        self.client.generate_jit_config(scale_set_id, name)


@pytest.fixture
def world() -> Iterator[World]:
    calls: list[tuple[str, str]] = []
    lock = threading.Lock()
    with FakeGitHub(scopes=[ORG], tokens=[PAT]) as fake:
        rest = Rest(fake.url)
        clients = ScaleSetClients(rest, wire=lambda: RecordingWire(calls, lock))
        pool = PoolRef(NS, POOL, Scope(organization=ORG), "github-credentials", api_url=fake.url)
        made = World(fake, service(fake, poll_wait=0.2), rest, clients, FakeSink(), pool, calls)

        def record(namespace: str, name: str, view: ScaleSetView) -> None:
            with lock:
                calls.append(("PUBLISH", str(view.last_message_id)))

        made.sink.on_publish = record
        try:
            yield made
        finally:
            for listener in made.listeners:
                listener.stop()
            for listener in made.listeners:
                assert listener.wait(10), "a listener thread did not end"


def labels_on_github(world: World) -> list[str]:
    found = world.service.scale_set(NAME)
    assert found is not None
    return [label["name"] for label in found["labels"]]


def test_the_scale_set_is_created_with_the_pools_labels_and_its_id_published(world: World) -> None:
    world.listener()
    view = world.listening()
    found = world.service.scale_set(NAME)
    assert found is not None
    assert view.scale_set_id == found["id"] and view.runner_group_id == found["runnerGroupId"]
    assert labels_on_github(world) == [NAME, "gpu"]
    assert found["RunnerSetting"]["disableUpdate"] is True
    assert view.assigned_jobs == 0 and view.busy_runners == () and view.problem is None


def test_drifted_labels_are_put_back_and_an_existing_scale_set_adopted(world: World) -> None:
    group = world.client.runner_group("default")
    existing = world.client.create_scale_set(RunnerScaleSet(name=NAME, runnerGroupId=group.id))
    assert labels_on_github(world) == [NAME]
    world.listener(labels=("gpu", "x64"))
    view = world.listening()
    assert view.scale_set_id == existing.id
    assert labels_on_github(world) == [NAME, "gpu", "x64"]


def test_labels_are_compared_as_github_matches_them_whatever_their_case(world: World) -> None:
    """GitHub matches ``runs-on`` labels case-insensitively: a scale set labelled ``GPU`` serves
    a pool that says ``gpu``; patching it at every start, and publishing ``gpu`` as a label
    GitHub dropped (jobs would never come, the pool said), was wrong."""
    group = world.client.runner_group("default")
    labels = (Label(name=NAME), Label(name="GPU"))
    kept_settings = RunnerSetting(disableUpdate=True, ephemeral=True)
    as_made = RunnerScaleSet(name=NAME, runnerGroupId=group.id, labels=labels, RunnerSetting=kept_settings)
    existing = world.client.create_scale_set(as_made)
    world.listener(labels=("gpu", "Gpu"))
    view = world.listening()
    assert view.scale_set_id == existing.id and view.dropped_labels == ()
    assert not [u for m, u in world.calls if m == "PATCH"], "nothing to put back"
    assert [
        label.name for label in desired_scale_set(world.settings(labels=("gpu", "Gpu")), 1, "g").labels
    ] == [
        NAME,
        "gpu",
    ]


def test_labels_github_does_not_keep_are_published_for_the_pool_to_show(world: World) -> None:
    """A GHES without custom scale-set labels keeps only the name, without an error: jobs that ask
    for ``gpu`` would wait for good, unexplained, unless the pool says so."""
    world.service.custom_labels = False
    world.listener(labels=("gpu", "x64"))
    view = world.wait(lambda v: v.dropped_labels, latest=True)
    assert view.dropped_labels == ("gpu", "x64")
    assert labels_on_github(world) == [NAME]
    assert status_of(view)["droppedLabels"] == ["gpu", "x64"]


def test_labels_github_does_not_keep_are_asked_for_once_not_at_every_retry(world: World) -> None:
    """Each failed session (here: held by another owner) makes the listener start again; asking
    GitHub again for labels it just dropped would be one useless PATCH per retry."""
    world.service.custom_labels = False
    group = world.client.runner_group("default")
    created = world.client.create_scale_set(RunnerScaleSet(name=NAME, runnerGroupId=group.id))
    other = MessageSession.open(world.client, created.id, "another-replica", conflict_retries=0)
    world.listener(labels=("gpu",))
    assert world.fake.wait_for(lambda: world.service.answered("POST", "/sessions", 409) >= 3)
    path = f"/runnerscalesets/{created.id}"
    updates = [u for m, u in world.calls if m == "PATCH" and u.split("?")[0].endswith(path)]
    assert len(updates) == 1, updates
    assert world.wait(lambda v: v.dropped_labels == ("gpu",), latest=True).scale_set_id == created.id
    other.close()


def test_a_label_removed_on_github_after_it_was_kept_is_put_back_at_the_next_start(world: World) -> None:
    """Only what GitHub dropped from the listener's own request is left alone: a label someone
    removed later is put back when the listener starts again (here: after a held session)."""
    group = world.client.runner_group("default")
    created = world.client.create_scale_set(RunnerScaleSet(name=NAME, runnerGroupId=group.id))
    other = MessageSession.open(world.client, created.id, "another-replica", conflict_retries=0)
    world.listener(labels=("gpu",))
    assert world.fake.wait_for(lambda: labels_on_github(world) == [NAME, "gpu"])  # asked and kept
    kept_settings = RunnerSetting(disableUpdate=True, ephemeral=True)
    name_only = RunnerScaleSet(name=NAME, runnerGroupId=group.id, RunnerSetting=kept_settings)
    world.client.update_scale_set(created.id, name_only)
    assert labels_on_github(world) == [NAME]
    assert world.fake.wait_for(lambda: labels_on_github(world) == [NAME, "gpu"])
    assert world.wait(lambda v: v.problem is not None, latest=True).dropped_labels == ()
    other.close()


def test_jobs_are_acquired_and_each_view_is_written_before_its_message_is_acknowledged(world: World) -> None:
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.sink.fail_next(1)  # the status write of the first message fails: no ack, delivered again
    request_id = world.service.offer_job(scale_set_id)
    world.sink.wait_refused(1)
    assigned = world.wait(lambda v: v.assigned_jobs == 1)
    refused = world.sink.refused[0][2]
    # The refused message came again and was recorded then; the job was acquired (JobAssigned).
    assert any(v.last_message_id == refused.last_message_id for v in world.sink.views(NS, POOL))
    assert assigned.running_jobs == 0

    world.runner(scale_set_id, "linux-abc12")
    world.service.start_job(request_id, "linux-abc12")
    running = world.wait(lambda v: v.busy_runners == ("linux-abc12",))
    assert (running.assigned_jobs, running.running_jobs) == (1, 1)
    world.service.complete_job(request_id)
    done = world.wait(lambda v: v.last_message_id > running.last_message_id and not v.busy_runners)
    assert (done.assigned_jobs, done.running_jobs) == (0, 0)

    # Every acknowledged message was written first, and each once acknowledged.
    acks = world.acks()
    assert refused.last_message_id in acks and len(acks) == len(set(acks))
    order = world.calls
    for message_id in acks:
        written = order.index(("PUBLISH", str(message_id)))
        acked = order.index(("ACKED", str(message_id)))
        assert written < acked, f"message {message_id} acknowledged before its view was written"


def test_a_job_github_offers_again_after_a_cancelled_assignment_is_acquired_again(world: World) -> None:
    world.listener()
    scale_set_id = world.listening().scale_set_id
    request_id = world.service.offer_job(scale_set_id)
    first = world.wait(lambda v: v.assigned_jobs == 1)
    world.service.reassign(request_id)  # no runner took it: cancelled, then offered again
    again = world.wait(lambda v: v.last_message_id > first.last_message_id and v.assigned_jobs == 1)
    assert again.busy_runners == () and again.problem is None
    between = [v for v in world.sink.views(NS, POOL) if first.last_message_id < v.last_message_id]
    assert between[0].assigned_jobs == 0  # the cancellation's view, before the job was acquired again


def test_a_message_whose_jobs_cannot_be_acquired_is_recorded_and_acknowledged_all_the_same(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """actions/scaleset's listener acknowledges a message before it acquires, and the demand
    follows the assigned jobs. A refused acquire (a 4xx no retry clears) raised out of the
    message closed the session; the message came again, failed the same way, and the demand froze."""
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.fake.fail_next(1000, 400, path="acquirejobs")
    world.service.offer_job(scale_set_id)
    assert world.fake.wait_for(world.acks, timeout=5), "the message was never acknowledged"
    refused = world.acks()[0]
    assert world.calls.index(("PUBLISH", str(refused))) < world.calls.index(("ACKED", str(refused)))
    assert world.service.answered("POST", "/acquirejobs", 400) == 1, "acquired once, not on every delivery"
    assert "jobs offered were not acquired (POST runnerscalesets/{id}/acquirejobs: HTTP 400" in caplog.text
    assert "Bearer" not in caplog.text

    world.fake.clear_faults()
    world.service.offer_job(scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs == 1).problem is None
    assert world.service.answered("POST", "/sessions", 200) == 1, "one session all along"
    assert all(view.problem is None for view in world.sink.views(NS, POOL))


def test_an_acquire_whose_queue_token_is_refused_again_after_a_refresh_opens_a_new_session(
    world: World,
) -> None:
    """A 401 is the queue token: refreshed once, then the session is opened anew and the
    message, unacknowledged, comes again there and its job is acquired."""
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.fake.fail_next(2, 401, path="acquirejobs")
    world.service.offer_job(scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs == 1, latest=True).problem is None
    assert any(method == "PATCH" and "/sessions/" in url for method, url in world.calls)
    assert world.service.answered("POST", "/sessions", 200) == 2


def test_an_acquire_that_meets_an_outage_leaves_the_message_to_come_again(world: World) -> None:
    """A 5xx past the retries is no refusal: acknowledged, the message's job would never be
    offered again, nor acquired; left unacknowledged, the next session acquires it."""
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.fake.fail_next(5, 503, path="acquirejobs")
    world.service.offer_job(scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs == 1, latest=True).problem is None
    assert world.service.answered("POST", "/acquirejobs", 200) >= 1, "acquired once GitHub answered"
    assert world.service.answered("POST", "/sessions", 200) >= 2, "the session opened anew"


def rewrite_messages(world: World, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """The fake's queue answers (200s) go through ``change``: GitHub's odd answers, played."""
    hold = world.service._hold

    def held(*args: Any, **kwargs: Any) -> Any:
        answer = hold(*args, **kwargs)
        return change(answer) if isinstance(answer, dict) else answer

    world.service._hold = held  # type: ignore[method-assign]


def test_a_message_without_statistics_is_recorded_with_the_last_ones_seen(world: World) -> None:
    """The Go client accepts a message without statistics; refused, it was never acknowledged,
    its job never acquired, and it came back ahead of every later message."""
    stripped: list[int] = []

    def strip(answer: dict[str, Any]) -> dict[str, Any]:
        if '"JobAvailable"' not in answer["body"]:
            return answer
        stripped.append(answer["messageId"])
        return {key: value for key, value in answer.items() if key != "statistics"}

    rewrite_messages(world, strip)  # before the first poll, which is held in the fake
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.service.offer_job(scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs == 1).problem is None  # acquired: JobAssigned came
    kept = [v for v in world.sink.views(NS, POOL) if v.last_message_id == stripped[0]]
    assert kept and kept[0].assigned_jobs == 0, "the last statistics seen (the session's) kept"
    assert world.acks()[0] == stripped[0]


def test_a_message_of_an_unknown_type_is_acknowledged_and_passed_over(world: World) -> None:
    """Refused as malformed it failed the session again and again, and no later job was ever
    acquired; acknowledged, it is gone and the next message is handled."""
    renamed: list[int] = []

    def rename(answer: dict[str, Any]) -> dict[str, Any]:
        if "poison-repo" not in answer["body"]:
            return answer
        renamed.append(answer["messageId"])
        return {**answer, "messageType": "RunnerScaleSetSomethingNew"}

    rewrite_messages(world, rename)  # before the first poll, which is held in the fake
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.service.offer_job(scale_set_id, repository="poison-repo")
    assert world.fake.wait_for(lambda: renamed and renamed[0] in world.acks(), timeout=8)
    world.service.offer_job(scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs >= 1).problem is None
    assert world.service.answered("POST", "/sessions", 200) == 1, "one session all along"


def test_a_new_listener_handles_again_what_the_last_one_wrote_and_counts_nothing_twice(
    world: World,
) -> None:
    """Each session starts at message 0 (upstream's listener does): the message the last leader
    wrote but did not acknowledge comes again and is handled again, harmlessly."""
    first = world.listener()
    scale_set_id = world.listening().scale_set_id
    request_id = world.service.offer_job(scale_set_id)
    world.wait(lambda v: v.assigned_jobs == 1)
    world.runner(scale_set_id, "linux-abc12")

    # The leader dies between writing a message's view and acknowledging it.
    def die_after_write(namespace: str, name: str, view: ScaleSetView) -> None:
        if view.busy_runners:
            first.stop()

    world.sink.on_publish = die_after_write
    world.service.start_job(request_id, "linux-abc12")
    assert first.wait(10)
    resume = world.sink.latest(NS, POOL)
    assert resume is not None and resume.busy_runners == ("linux-abc12",)
    assert resume.last_message_id not in world.acks()  # written, never acknowledged
    before, calls_before = len(world.sink.published), len(world.calls)

    world.sink.on_publish = None
    world.listener(resume=resume)
    again = world.wait(lambda v: resume.last_message_id in world.acks(), latest=True)
    assert (again.busy_runners, again.assigned_jobs, again.running_jobs) == (("linux-abc12",), 1, 1)
    world.service.complete_job(request_id)
    done = world.wait(lambda v: v.last_message_id > resume.last_message_id and not v.busy_runners)
    assert (done.assigned_jobs, done.running_jobs) == (0, 0)
    after = [view for _, _, view in world.sink.published[before:]]
    assert all(view.busy_runners in ((), ("linux-abc12",)) for view in after)
    polls = [url for method, url in world.calls[calls_before:] if method == "GET" and "/messages" in url]
    assert "lastMessageId" not in polls[0], "the new session started at message 0"


def test_a_new_session_handles_messages_whose_ids_are_not_above_the_status_last_one(
    world: World,
) -> None:
    """Message ids are the queue's: resumed at the status's lastMessageId, the new session's
    first messages (ids below it here) were acknowledged unread and their jobs never acquired."""
    world.listener()
    first = world.listening()
    for listener in world.listeners:
        listener.stop()
        assert listener.wait(10)
    world.listener(resume=replace(first, last_message_id=500))  # the old session got to 500
    world.listening()
    world.service.offer_job(first.scale_set_id)
    assert world.wait(lambda v: v.assigned_jobs == 1).problem is None
    assert world.acks() and max(world.acks()) < 500, "the new session's ids were below the old one's"


def test_a_session_another_owner_holds_is_shown_and_taken_over_once_freed(world: World) -> None:
    group = world.client.runner_group("default")
    created = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    other = MessageSession.open(world.client, created.id, "another-replica", conflict_retries=0)
    world.listener()
    held = world.wait(lambda v: v.problem is not None)
    assert held.problem is not None
    reason, message = held.problem
    assert reason == Reason.SCALE_SET_SESSION_HELD
    assert "another listener holds the message session" in message
    assert world.service.sessions(created.id) == ["another-replica"]

    other.close()
    view = world.wait(lambda v: v.problem is None, latest=True)
    assert view.scale_set_id == created.id
    assert world.fake.wait_for(lambda: world.service.sessions(created.id) == [OWNER])


def test_rounds_waiting_for_a_held_session_leave_no_backoff_to_the_next_failure(world: World) -> None:
    """Each round that found the session held counted as a failure, and since 879ea07 an open
    session no longer starts the count anew: after five such rounds, the new session's first
    poll answering 404 was followed by a wait of 2**5 backoffs (32 s here) before the next."""
    group = world.client.runner_group("default")
    created = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    other = MessageSession.open(world.client, created.id, "another-replica", conflict_retries=0)
    world.listener(timing=Timing(backoff_min=1.0, backoff_max=60, conflict_wait=0.05, jitter=0))

    def asked(method: str, part: str) -> int:
        return sum(called == method and part in url for called, url in world.calls)

    assert poll_until(lambda: asked("POST", "/sessions") >= 5, timeout=10, interval=0.01)
    world.fake.fail_next(1, 404, method="GET", path="/messages")
    other.close()
    assert poll_until(lambda: asked("GET", "/messages") >= 2, timeout=10, interval=0.01)
    assert world.listening().problem is None


def test_a_backoff_after_any_number_of_failures_is_the_longest() -> None:
    """A scale set held by another pool for a day is thousands of rounds: 2.0 ** 1025 overflowed,
    and the listener's task died with an OverflowError."""
    assert Timing(jitter=0).backoff(5000) == Timing().backoff_max


def test_expired_queue_tokens_are_renewed_without_a_problem(world: World) -> None:
    world.listener()
    scale_set_id = world.listening().scale_set_id
    world.service.expire_queue_tokens()
    world.service.offer_job(scale_set_id)
    assigned = world.wait(lambda v: v.assigned_jobs == 1)
    assert assigned.problem is None
    assert any(method == "PATCH" and "/sessions/" in url for method, url in world.calls)
    assert all(view.problem is None for view in world.sink.views(NS, POOL))


def test_a_scale_set_deleted_on_github_is_created_again(world: World) -> None:
    world.listener()
    gone = world.listening().scale_set_id
    world.client.delete_scale_set(gone)
    view = world.wait(lambda v: v.scale_set_id not in (0, gone))
    found = world.service.scale_set(NAME)
    assert found is not None and found["id"] == view.scale_set_id
    assert labels_on_github(world) == [NAME, "gpu"]
    assert world.fake.wait_for(lambda: world.service.sessions(view.scale_set_id) == [OWNER])
    world.service.offer_job(view.scale_set_id)
    assert world.wait(lambda v: v.scale_set_id == view.scale_set_id and v.assigned_jobs == 1).problem is None


def test_stop_closes_the_session_so_another_owner_gets_it_at_once(world: World) -> None:
    listener = world.listener()
    scale_set_id = world.listening().scale_set_id
    listener.stop()
    assert listener.wait(5)
    assert world.service.sessions(scale_set_id) == []
    MessageSession.open(world.client, scale_set_id, "next-leader", conflict_retries=0).close()


def test_a_listener_stopped_while_its_poll_is_held_ends_within_a_second(world: World) -> None:
    world.service.poll_wait = 30.0
    listener = world.listener()
    scale_set_id = world.listening().scale_set_id
    assert world.fake.wait_for(lambda: world.service.polling(scale_set_id) == 1)

    started = time.monotonic()
    listener.stop()

    assert listener.wait(1.0), "the listener thread still runs a second after stop"
    assert time.monotonic() - started <= 2.0
    assert world.service.sessions(scale_set_id) == []


def test_fifty_listeners_poll_on_the_loops_thread_with_no_thread_each(world: World) -> None:
    """Issue 34: a poll's turnover stays on the poll loop; listeners add no thread each (only
    the loop's and the shared call threads, ``CALL_WORKERS`` at most, whatever their number)."""
    world.listener()
    world.listening()  # the loop and some call threads exist from here on
    before = {thread.ident for thread in threading.enumerate()}
    RecordingWire.poll_threads.clear()
    pools = [
        PoolRef(NS, f"pool-{i}", world.pool.scope, "github-credentials", api_url=world.fake.url)
        for i in range(50)
    ]
    for pool in pools:
        settings = ScaleSetSettings(pool, f"k8s-{pool.name}", max_runners=2)
        made = ScaleSetListener(
            settings, lambda: world.clients.get(world.pool), world.sink, OWNER, timing=TIMING
        )
        world.listeners.append(made)
        made.start()
    for pool in pools:  # each has its session and turns its 0.2 s poll over
        world.sink.wait_for(NS, pool.name, lambda v: v.scale_set_id and v.problem is None, 20.0, latest=True)
    assert world.fake.wait_for(
        lambda: all(world.service.polling(f"k8s-{pool.name}") == 1 for pool in pools), timeout=20.0
    )

    added = [
        thread.name
        for thread in threading.enumerate()
        if thread.ident not in before and "process_request" not in thread.name  # the fake's own
    ]
    assert all(name.startswith("scale-set-calls") for name in added), added
    assert len([t for t in threading.enumerate() if t.name.startswith("scale-set-calls")]) <= CALL_WORKERS
    assert RecordingWire.poll_threads == {"scale-set-long-polls"}
    assert all(listener.alive for listener in world.listeners)


def test_refused_credentials_are_shown_and_retried(world: World) -> None:
    world.fake.fail_next(3, 401, path="registration-token")
    world.listener()
    refused = world.wait(lambda v: v.problem is not None)
    assert refused.problem is not None and refused.problem[0] == Reason.SCALE_SET_CREDENTIALS_REFUSED
    assert "refused the pool's credentials" in refused.problem[1]
    world.listening()


def test_an_admin_token_refused_before_its_expiry_is_traded_again_with_no_problem_shown(
    world: World,
) -> None:
    world.fake.fail_next(1, 401, path="runnergroups")
    world.listener()
    world.listening()
    assert all(view.problem is None for view in world.sink.views(NS, POOL)), "nothing shown"
    assert world.fake.count("actions/runner-registration", status=200) == 2


def test_an_admin_token_refused_again_after_a_new_trade_shows_credentials_refused(world: World) -> None:
    world.fake.fail_next(2, 401, path="runnergroups")
    world.listener()
    refused = world.wait(lambda v: v.problem is not None)
    assert refused.problem is not None and refused.problem[0] == Reason.SCALE_SET_CREDENTIALS_REFUSED
    world.listening()


def test_an_unreachable_service_is_shown_and_retried(world: World) -> None:
    world.fake.fail_next(4, 503, path="runnergroups")
    world.listener()
    down = world.wait(lambda v: v.problem is not None)
    assert down.problem is not None and down.problem[0] == Reason.SCALE_SET_UNREACHABLE
    world.listening()


def test_a_session_that_fails_at_once_each_time_is_reopened_after_a_growing_wait(world: World) -> None:
    """A poll answering 404 ends the session, and the first reopening is at once. Each new session
    failing the same way used to count as the first failure again, so the listener reopened
    sessions in a loop as fast as GitHub answered (five requests a round, about 0.2 s here). The
    waits come from the second failure on: two of a second before the third and fourth poll."""
    world.fake.fail_next(3, 404, method="GET", path="/messages")
    began = time.monotonic()
    world.listener(timing=Timing(backoff_min=1.0, backoff_max=1.0, conflict_wait=60, jitter=0))

    def polls() -> int:
        return sum(method == "GET" and "/messages" in url for method, url in world.calls)

    assert poll_until(lambda: polls() > 3, timeout=10, interval=0.005)
    assert time.monotonic() - began >= 2.0
    assert world.listening().problem is None


# -- the clients ------------------------------------------------------------------------------


def test_one_client_per_credential_rebuilt_when_the_secret_changes(world: World) -> None:
    client = world.clients.get(world.pool)
    assert world.clients.get(world.pool) is client
    sibling = PoolRef(
        NS, "other", world.pool.scope, world.pool.credential_secret_name, api_url=world.fake.url
    )
    assert world.clients.get(sibling) is client
    assert client.connection.config_url == f"{world.fake.url}/{ORG}"
    world.rest.rotate()
    assert world.clients.get(world.pool) is not client
    assert len(world.clients) == 1


def test_the_config_url_is_the_scopes_web_page() -> None:
    org = PoolRef(NS, POOL, Scope(organization=ORG), "c")
    assert config_url(org) == f"https://github.com/{ORG}"
    ghes = PoolRef(NS, POOL, Scope(repository="o/r"), "c", api_url="https://ghe.example.com/api/v3")
    assert config_url(ghes) == "https://ghe.example.com/o/r"


# -- the runnable -----------------------------------------------------------------------------


def test_listeners_follow_the_pools_and_stop_with_the_operator(world: World) -> None:
    key: PoolKey = (NS, POOL)
    pools: dict[PoolKey, ScaleSetSettings] = {key: world.settings()}
    listeners = ScaleSetListeners(
        lambda: list(pools.items()),
        listener_factory(world.clients, world.sink, OWNER, TIMING),
        resume=lambda k: world.sink.latest(*k),
        interval=60,
    )
    listeners.sync()
    scale_set_id = world.listening().scale_set_id
    first = listeners.listener(key)

    pools[key] = world.settings(labels=("gpu", "arm64"))  # its settings change: replaced
    listeners.sync()
    assert listeners.listener(key) is not first and first is not None and not first.alive
    assert world.fake.wait_for(lambda: labels_on_github(world) == [NAME, "gpu", "arm64"])
    assert world.fake.wait_for(lambda: world.service.sessions(scale_set_id) == [OWNER])

    pools[key] = world.settings(labels=("gpu", "arm64"), deleting=True)  # being deleted: stopped
    listeners.sync()
    assert listeners.listening() == {}
    assert world.service.sessions(scale_set_id) == []

    pools[key] = world.settings()
    listeners.start()
    listeners.poke()
    assert world.fake.wait_for(lambda: world.service.sessions(scale_set_id) == [OWNER], timeout=10)
    assert listeners.stop(10)
    assert world.service.sessions(scale_set_id) == []
    assert listeners.listening() == {}


class PoolReads:
    """``ScaleSetPoolReads`` of the world's pool (``spec.scaleSet.name`` = NAME), made at
    ``MADE``, and of the pools ``add`` makes."""

    MADE = "2026-06-01T12:00:00Z"

    def __init__(self, **spec: Any) -> None:
        self.parsed: dict[PoolKey, ParsedPool] = {}
        #: The namespaces being deleted.
        self.terminating: set[str] = set()
        self.add(NS, POOL, **spec)

    def add(
        self,
        namespace: str,
        name: str,
        made: str = MADE,
        deleting: bool = False,
        finalized: bool = True,
        found: bool = False,
        **spec: Any,
    ) -> None:
        """``finalized``: the pool carries the operator's finalizer (its first pass is done);
        ``found``: its own listener found or made the scale set (``status.scaleSet.id``)."""
        given = {"scaleSet": {"name": NAME}, "autoscaling": {"maxReplicas": 5}} | spec
        raw = pool_manifest(name, org=ORG, **given)
        raw["metadata"].update(namespace=namespace, creationTimestamp=made)
        if finalized:
            raw["metadata"]["finalizers"] = [naming.POOL_FINALIZER]
        if found:
            raw["status"] = {"scaleSet": {"id": 1}}
        if deleting:
            raw["metadata"]["deletionTimestamp"] = "2026-06-02T12:00:00Z"
        self.parsed[(namespace, name)] = ParsedPool(raw, api.RunnerPool.model_validate(raw))

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        return self.parsed.get((namespace, name))

    def scale_set_pools(self) -> list[api.RunnerPool]:
        return [parsed.model for parsed in self.parsed.values() if parsed.model is not None]

    def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        parsed = self.pool(namespace, name)
        return None if parsed is None else parsed.raw

    def namespace_terminating(self, namespace: str) -> bool:
        return namespace in self.terminating


def claims_pools(world: World, reads: PoolReads) -> Callable[[], Iterable[tuple[PoolKey, ScaleSetSettings]]]:
    """The pools the listeners would serve (those of ``reads`` ``listened_pools`` takes, on the
    world's GitHub)."""

    def pool_ref(pool: api.RunnerPool, credentials: str) -> PoolRef:
        return PoolRef(pool.namespace, pool.name, pool.scope, "github-credentials", api_url=world.fake.url)

    return listened_pools(reads, pool_ref, lambda pool: True)


def claims(world: World, reads: PoolReads) -> ScaleSetClaims:
    """The assembly's claims."""
    return ScaleSetClaims(claims_pools(world, reads), reads)


def pool_scale_sets(
    world: World, listeners: ScaleSetListeners | None = None, reads: PoolReads | None = None, **spec: Any
) -> PoolScaleSets:
    listeners = listeners or ScaleSetListeners(lambda: [], lambda settings, view: None)  # type: ignore[arg-type,return-value]
    reads = reads or PoolReads(**spec)
    return PoolScaleSets(world.clients, listeners, reads, claims(world, reads))


def test_deleting_a_pool_deletes_its_scale_set_by_name_when_the_status_id_is_an_old_one(world: World) -> None:
    """Deleted on GitHub and made again under a new id the status does not have yet: deleting
    the old id answers 404, and that alone let the pool go with its live scale set registered."""
    group = world.client.runner_group("default")
    old = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    world.client.delete_scale_set(old.id)
    new = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    assert new.id != old.id
    pool_scale_sets(world).delete(world.pool, old.id)
    assert world.service.scale_set(NAME) is None, "the pool's scale set is still registered on GitHub"


def test_a_deleted_pools_listener_still_in_a_call_holds_the_deletion_of_its_scale_set_until_it_ends(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told to stop, the listener was still in a call that creates the scale set (its look-up
    done): the finalizer went on, found no scale set, let the pool go, and the create landed
    after, a scale set with no pool on GitHub for good. And a second stop answered that the
    listener had ended: the first had forgotten it."""
    monkeypatch.setattr(scale_set_pools, "STOP_WAIT", 0.05)
    ended = threading.Event()

    class InACall:
        def __init__(self, settings: ScaleSetSettings) -> None:
            self.settings, self.view = settings, ScaleSetView()

        @property
        def alive(self) -> bool:
            return not ended.is_set()

        def start(self) -> None: ...

        def stop(self) -> None: ...

        def wait(self, timeout: float | None = None) -> bool:
            return ended.wait(timeout)

    key: PoolKey = (NS, POOL)
    listeners = ScaleSetListeners(lambda: [(key, world.settings())], lambda settings, view: InACall(settings))  # type: ignore[arg-type,return-value]
    listeners.sync()
    deleting = pool_scale_sets(world, listeners)

    for _ in range(2):
        with pytest.raises(ListenerStillRunning) as held:
            deleting.delete(world.pool, None)
        assert held.value.reason == Reason.SCALE_SET_LISTENER_STOPPING and held.value.retry_after
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))  # the call lands
    ended.set()

    deleting.delete(world.pool, None)

    assert world.service.scale_set(NAME) is None, "the scale set its listener made is left on GitHub"


@pytest.mark.parametrize(("refused", "kept"), [(False, True), (True, False)])
def test_a_pool_in_a_namespace_not_checked_yet_keeps_the_scale_set_it_shares_with_a_deleted_pool(
    world: World, refused: bool, kept: bool
) -> None:
    """Right after a start or a leadership change no namespace is known enabled until a pass
    there checks it, and a deleted pool's finalizer checks none: it saw no other pool naming its
    scale set and deleted it, with the other pool's busy runners. A namespace known refused
    keeps nothing."""

    reads = PoolReads(deleting=True)
    reads.add("team-b", "linux-moved", made="2026-06-02T00:00:00Z", found=True)

    assembled_with_a_scale_set(world, reads, refused=refused).delete(world.pool, None)

    assert (world.service.scale_set(NAME) is not None) is kept


def assembled_with_a_scale_set(world: World, reads: PoolReads, *, refused: bool) -> PoolScaleSets:
    """The assembly's ``PoolScaleSets``, every namespace known refused (or not checked yet),
    and the world's pool's scale set on GitHub."""

    class Access:
        def refused(self, namespace: str) -> bool:
            return refused

    settings = Settings(github=GitHubSettings(api_url=world.fake.url))
    parts = scale_set_pools.assemble(
        reads,
        None,
        world.rest,
        settings,
        lambda pool: False,
        access=Access(),  # type: ignore[arg-type]
    )
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    return parts.pools


def test_a_deleted_pool_in_a_namespace_known_refused_still_keeps_the_shared_scale_set(world: World) -> None:
    """Its finalizer waits for the namespace to be enabled again, its busy runners with it: the
    other deleted pool waits too (a namespace's refusal is an answer each leader learns anew,
    and one wrong answer deleted the scale set under those runners)."""

    reads = PoolReads(deleting=True, found=True)
    reads.add("team-0", "linux-old", deleting=True, found=True)  # before team-a/linux in key order

    with pytest.raises(ScaleSetStillUsed):
        assembled_with_a_scale_set(world, reads, refused=True).delete(world.pool, None)
    assert world.service.scale_set(NAME) is not None


def _another_teams_scale_set(world: World) -> RunnerScaleSet:
    """A scale set of the same organization and runner group that is not the pool's."""
    group = world.client.runner_group("default")
    return world.client.create_scale_set(
        desired_scale_set(replace(world.settings(), name="team-b-linux"), group.id, group.name)
    )


def test_deleting_a_pool_whose_status_names_another_scale_set_deletes_only_its_own(world: World) -> None:
    """The webhook receiver's account may patch the status too: a receiver taken over could
    write another team's scale set id there, and the finalizer deleted whatever id it read."""
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    victim = _another_teams_scale_set(world)

    pool_scale_sets(world).delete(world.pool, victim.id)

    assert world.service.scale_set(NAME) is None, "the pool's own scale set is still registered"
    assert world.service.scale_set("team-b-linux") is not None, "another team's scale set was deleted"


def test_no_runner_is_made_in_a_scale_set_the_status_names_but_that_is_not_the_pools(world: World) -> None:
    """Pods of the pool would take the other scale set's jobs, and their secrets."""
    group = world.client.runner_group("default")
    own = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    victim = _another_teams_scale_set(world)
    jit = ScaleSetJitConfigs(world.clients, PoolReads())

    with pytest.raises(ScaleSetNotThePools) as refused:
        jit(world.pool, JitRequest("linux-abcde", (), scale_set_id=victim.id))

    assert refused.value.reason == Reason.SCALE_SET_NOT_THE_POOLS
    assert world.service.runners(victim.id) == []
    assert jit(world.pool, JitRequest("linux-fghij", (), scale_set_id=own.id)).runner_id
    assert [r["runnerName"] for r in world.service.runners(own.id)] == ["linux-fghij"]


def test_deleting_a_pool_whose_runner_group_github_no_longer_has_deletes_its_recorded_scale_set(
    world: World,
) -> None:
    """The group renamed or deleted on GitHub: the scale set the status recorded, of the pool's
    name, is still the pool's."""
    group = world.client.runner_group("default")
    own = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))

    pool_scale_sets(world, runnerGroup="renamed-group").delete(world.pool, own.id)

    assert world.service.scale_set(NAME) is None


def test_deleting_a_pool_whose_status_has_no_id_deletes_its_scale_set_all_the_same(world: World) -> None:
    """The pool deleted before the listener's status write of the id: the scale set it made
    must go too."""
    world.client.create_scale_set(desired_scale_set(world.settings(), 1, "default"))
    pool_scale_sets(world).delete(world.pool, None)
    assert world.service.scale_set(NAME) is None


def test_deleting_a_pool_of_another_runner_group_than_its_scale_sets_leaves_that_one(world: World) -> None:
    """Found by name in the pool's runner group only: a scale set of that name elsewhere is not
    the pool's; a group that does not exist holds none (nothing to delete, no failure)."""
    world.client.create_scale_set(desired_scale_set(world.settings(), 1, "default"))
    pool_scale_sets(world, runnerGroup="no-such-group").delete(world.pool, None)
    assert world.service.scale_set(NAME) is not None


def test_deleting_a_pool_stops_its_listener_first_so_none_makes_the_scale_set_again(world: World) -> None:
    """With no id in the status the listener was not stopped, and could make the scale set again
    after the finalizer let the pool go."""
    key: PoolKey = (NS, POOL)
    pools: dict[PoolKey, ScaleSetSettings] = {key: world.settings()}
    listeners = ScaleSetListeners(
        lambda: list(pools.items()), listener_factory(world.clients, world.sink, OWNER, TIMING), interval=60
    )
    listeners.sync()
    world.listening()
    pool_scale_sets(world, listeners).delete(world.pool, None)
    assert listeners.listening() == {} and world.service.scale_set(NAME) is None
    pools[key] = world.settings(deleting=True)
    listeners.sync()
    time.sleep(0.3)  # a listener would have made it again by now
    assert listeners.listening() == {} and world.service.scale_set(NAME) is None
    assert listeners.stop(10)


def test_a_pool_whose_namespace_is_being_deleted_is_not_listened_to_again_once_its_scale_set_went(
    world: World,
) -> None:
    """The reconciler finalizes a pool as soon as its namespace is Terminating, before the
    namespace's sweep marks the pool deleted. Its scale set was deleted, and the next sync,
    seeing a pool not being deleted, started a listener that made the scale set again: left on
    GitHub once the namespace was gone."""
    reads = PoolReads()
    listeners = ScaleSetListeners(
        claims_pools(world, reads), listener_factory(world.clients, world.sink, OWNER, TIMING), interval=60
    )
    listeners.sync()
    world.listening()
    reads.terminating.add(NS)
    pool_scale_sets(world, listeners, reads).delete(world.pool, None)
    listeners.sync()
    assert listeners.listening() == {} and world.service.scale_set(NAME) is None
    assert listeners.stop(10)


@pytest.mark.parametrize(
    "old", [(NS, "linux-old"), ("team-b", POOL)], ids=["renamed", "moved to another namespace"]
)
def test_deleting_an_old_pool_leaves_the_scale_set_a_live_pool_naming_it_listens_on(
    world: World, old: PoolKey
) -> None:
    """The user made the new pool with the old one's spec.scaleSet.name (the workflows' runs-on),
    then deleted the old one: its finalizer deleted the scale set, the new pool's runners and
    their jobs with it."""
    reads = PoolReads(found=True)  # its listener runs: it found the scale set
    reads.add(*old, made="2026-05-01T12:00:00Z", deleting=True)
    world.listener(holder=claims(world, reads).holder)
    view = world.listening()
    world.runner(view.scale_set_id, "linux-aaaaa")
    old_ref = PoolRef(*old, Scope(organization=ORG), "github-credentials", api_url=world.fake.url)

    pool_scale_sets(world, reads=reads).delete(old_ref, view.scale_set_id)

    assert world.service.scale_set(NAME) is not None, "the new pool's scale set was deleted"
    assert world.service.sessions(view.scale_set_id) == [OWNER]
    assert [runner["runnerName"] for runner in world.service.runners(NAME)] == ["linux-aaaaa"]


@pytest.mark.parametrize(
    "other",
    [
        {"runnerGroup": "other-group"},
        {"scaleSet": {"name": "another-scale-set"}},
    ],
    ids=["another runner group", "another name"],
)
def test_a_pool_naming_no_scale_set_another_live_pool_names_deletes_its_own(
    world: World, other: dict[str, Any]
) -> None:
    reads = PoolReads()
    reads.add("team-b", "other", **other)
    world.client.create_scale_set(desired_scale_set(world.settings(), 1, "default"))
    pool_scale_sets(world, reads=reads).delete(world.pool, None)
    assert world.service.scale_set(NAME) is None


def test_a_pool_without_the_finalizer_gets_no_listener_and_keeps_no_scale_set(world: World) -> None:
    """A scale-set pool refused by a gate on its first pass (a runner-group look-up failing)
    has no finalizer: its listener made the scale set all the same, and deleting the pool, which
    went at once, left it on GitHub for good. Nor does such a pool keep a deleted pool's."""
    reads = PoolReads(deleting=True)
    reads.add("team-b", "linux-v2", finalized=False)
    pools = claims_pools(world, reads)
    listeners = ScaleSetListeners(pools, listener_factory(world.clients, world.sink, OWNER, TIMING))
    listeners.sync()
    assert listeners.listening() == {}, "a listener for a pool nothing will clean up after"
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))

    pool_scale_sets(world, reads=reads).delete(world.pool, None)

    assert world.service.scale_set(NAME) is None, "kept for a pool that can go without a word"


def test_a_pool_gets_its_listener_at_once_in_the_pass_that_put_its_finalizer_on(world: World) -> None:
    """The listeners' sync read a cache that did not show the new finalizer yet and started no
    listener; the finalizer's echo wakes no pass, so the pool waited for the next sync (10 s)."""
    reads = PoolReads(finalized=False)  # the cache lags behind the finalizer's write
    finalized = JustFinalized()

    def pool_ref(pool: api.RunnerPool, credentials: str) -> PoolRef:
        return PoolRef(pool.namespace, pool.name, pool.scope, "github-credentials", api_url=world.fake.url)

    listeners = ScaleSetListeners(
        listened_pools(reads, pool_ref, lambda pool: True, finalized),
        listener_factory(world.clients, world.sink, OWNER, TIMING),
        interval=600,
    )
    listeners.start()
    try:
        PoolScaleSets(world.clients, listeners, reads, claims(world, reads), finalized).listen(NS, POOL)
        assert world.fake.wait_for(lambda: (NS, POOL) in listeners.listening(), timeout=10)
    finally:
        assert listeners.stop(10)


def test_of_two_deleted_pools_naming_one_scale_set_the_last_deletes_it_once_the_other_is_gone(
    world: World,
) -> None:
    """Two pools naming one scale set (a rename), both deleted (a namespace, a GitOps prune):
    the first finalizer to look saw no live pool naming it and deleted it, with the runners the
    other pool was still waiting for and their jobs. Exactly one deletes it, after the other."""
    reads = PoolReads(deleting=True, found=True)
    reads.add("team-b", "linux-v2", deleting=True, found=True)
    group = world.client.runner_group("default")
    scale_set = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    world.runner(scale_set.id, "linux-aaaaa")  # team-a/linux's runner, running a job
    later_pool = PoolRef(
        "team-b", "linux-v2", Scope(organization=ORG), "github-credentials", api_url=world.fake.url
    )
    deleting = pool_scale_sets(world, reads=reads)

    deleting.delete(world.pool, scale_set.id)  # team-a/linux's drain is done: it goes, leaving it
    with pytest.raises(ScaleSetStillUsed) as waiting:
        deleting.delete(later_pool, None)  # team-b/linux-v2 is done too, team-a/linux not gone yet

    assert world.service.scale_set(NAME) is not None, "deleted under the other pool's runners"
    assert [runner["runnerName"] for runner in world.service.runners(NAME)] == ["linux-aaaaa"]
    assert waiting.value.reason == Reason.SCALE_SET_STILL_USED and "team-a/linux" in waiting.value.message

    del reads.parsed[(NS, POOL)]  # team-a/linux went
    deleting.delete(later_pool, None)
    assert world.service.scale_set(NAME) is None, "left on GitHub with no pool naming it"


def test_a_pool_naming_the_scale_set_an_older_live_pool_has_waits_for_it_asking_github_nothing(
    world: World,
) -> None:
    """Two live pools sharing one scale set take its session from each other and relabel it in
    turn: the one made first keeps it, the other says so and takes it over once that one is
    being deleted (which leaves the scale set on GitHub)."""
    reads = PoolReads()
    reads.add("team-b", "linux-old", made="2026-05-01T12:00:00Z", found=True)
    world.listener(holder=claims(world, reads).holder)

    held = world.wait(lambda v: v.problem is not None, latest=True)
    assert held.problem is not None
    reason, message = held.problem
    assert reason == Reason.SCALE_SET_HELD_BY_ANOTHER_POOL and "team-b/linux-old" in message
    assert held.scale_set_id == 0 and status_of(held)["id"] is None, "its pods would get JIT configs"
    assert [call for call in world.calls if call[0] != "PUBLISH"] == [], "it asked GitHub"
    assert world.service.scale_set(NAME) is None

    reads.add("team-b", "linux-old", made="2026-05-01T12:00:00Z", deleting=True, found=True)
    view = world.listening()
    assert world.service.scale_set(NAME) is not None and view.scale_set_id


def test_a_listening_pool_lets_go_once_an_older_pool_naming_its_scale_set_is_live(world: World) -> None:
    """The holder was asked only when an attempt began: an older pool that became live while a
    newer one listened (its namespace enabled later) contended for the session for good."""
    reads = PoolReads()
    world.listener(holder=claims(world, reads).holder)
    view = world.listening()

    reads.add(NS, "linux-old", made="2026-05-01T12:00:00Z")

    held = world.wait(lambda v: v.problem is not None, latest=True)
    assert held.problem is not None and held.problem[0] == Reason.SCALE_SET_HELD_BY_ANOTHER_POOL
    assert world.fake.wait_for(lambda: world.service.sessions(view.scale_set_id) == []), (
        "its session is closed"
    )


def test_another_tenants_pool_naming_a_scale_set_its_credential_never_found_claims_nothing(
    world: World,
) -> None:
    """Any tenant could make a pool naming another team's scale set, without a credential: made
    first, it held the scale set (the team's new pool waited for it for good); live, the team's
    old pool's deletion left the scale set to it; being deleted (a finalizer of its own), it
    kept the team's deletion waiting for good. A pool of another namespace counts only once its
    own listener found the scale set."""
    reads = PoolReads(deleting=True)
    reads.add("team-b", "squat", made="2026-01-01T00:00:00Z")
    assert claims(world, reads).holder(world.settings()) is None, "held by a pool with no credential"
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    reads.add("team-b", "squat-too", made="2026-01-01T00:00:00Z", deleting=True)

    pool_scale_sets(world, reads=reads).delete(world.pool, None)  # ("team-b", ...) sort after it

    assert world.service.scale_set(NAME) is None, "left on GitHub to another tenant's pools"


def test_a_deleted_pool_the_allow_list_refuses_now_still_keeps_the_scale_set_from_going_under_it(
    world: World,
) -> None:
    """A pool refused since it made runners is drained like any other, busy runners in the
    scale set too: the other deleted pool naming it must wait for it, though no listener
    serves the refused one."""
    reads = PoolReads(deleting=True, found=True)
    reads.add("team-0", "linux-old", deleting=True, found=True)  # before team-a/linux in key order

    def pool_ref(pool: api.RunnerPool, credentials: str) -> PoolRef:
        return PoolRef(pool.namespace, pool.name, pool.scope, "github-credentials", api_url=world.fake.url)

    refused = ScaleSetClaims(
        listened_pools(reads, pool_ref, lambda pool: pool.namespace != "team-0"),
        reads,
        every=listened_pools(reads, pool_ref, lambda pool: True),
    )
    group = world.client.runner_group("default")
    world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    listeners = ScaleSetListeners(lambda: [], lambda settings, view: None)  # type: ignore[arg-type,return-value]

    with pytest.raises(ScaleSetStillUsed):
        PoolScaleSets(world.clients, listeners, reads, refused).delete(world.pool, None)
    assert world.service.scale_set(NAME) is not None


def test_the_later_view_of_one_scale_set_is_resumed() -> None:
    old, new = (
        ScaleSetView(scale_set_id=3, last_message_id=5),
        ScaleSetView(scale_set_id=3, last_message_id=9),
    )
    assert later(old, new) is new and later(new, old) is new
    other = ScaleSetView(scale_set_id=4, last_message_id=20)
    assert later(old, other) is old and later(None, other) is other and later(None, None) is None


def written(view: ScaleSetView) -> dict[str, Any]:
    """``status.scaleSet`` as ``StatusSink`` writes the view (a merge patch: unset keys absent)."""
    return {key: value for key, value in status_of(view).items() if value is not None}


def resumed_from(scale_set: dict[str, Any]) -> ScaleSetView | None:
    """The view a new leader's listener starts from when the pool's ``status.scaleSet`` is this."""
    reads = PoolReads()
    raw = reads.parsed[(NS, POOL)].raw
    raw["status"] = {"scaleSet": scale_set}
    reads.parsed[(NS, POOL)] = ParsedPool(raw, api.RunnerPool.model_validate(raw))
    return resumed_view(reads)((NS, POOL))


def scale_set_on_github(world: World) -> ScaleSetView:
    """The view of the pool's scale set, made on GitHub, as a listener that held it wrote it."""
    group = world.client.runner_group("default")
    made = world.client.create_scale_set(desired_scale_set(world.settings(), group.id, group.name))
    return ScaleSetView(scale_set_id=made.id, runner_group_id=group.id)


def polled(world: World) -> bool:
    """The listener polls its session: it has opened it (``_opened`` ran before)."""
    return world.fake.wait_for(lambda: any(m == "GET" and "/messages" in u for m, u in world.calls))


def test_a_new_leader_resumes_the_status_as_the_last_one_wrote_it_problem_included() -> None:
    view = ScaleSetView(
        scale_set_id=7,
        runner_group_id=1,
        last_message_id=12,
        assigned_jobs=2,
        running_jobs=1,
        busy_runners=("linux-abc12",),
        problem=(Reason.SCALE_SET_UNREACHABLE, "the scale set cannot be reached; trying again in 60 s"),
        dropped_labels=("gpu",),
    )
    assert resumed_from(written(view)) == view
    newer = {"id": 7, "problem": {"reason": "ScaleSetSomethingNewer", "message": "said by a newer operator"}}
    resumed = resumed_from(newer)
    assert resumed is not None
    assert resumed.problem == (Reason.SCALE_SET_PENDING, "said by a newer operator"), "kept, to be cleared"


def test_a_problem_the_last_leader_showed_is_cleared_once_the_new_leaders_session_opens(world: World) -> None:
    """Users restart the operator once they fixed the Secret: the new leader's listener got in at
    its first try, with the statistics the status held, so it wrote nothing, and the pool said
    DemandVisible False ScaleSetCredentialsRefused, "trying again in 60 s", until the scale set's
    next message: hours for a quiet pool."""
    refused = (
        Reason.SCALE_SET_CREDENTIALS_REFUSED,
        "GitHub refused the pool's credentials; trying again in 60 s",
    )
    shown = replace(scale_set_on_github(world), problem=refused)
    world.listener(resume=resumed_from(written(shown)))
    assert polled(world)
    latest = world.sink.latest(NS, POOL)
    assert latest is not None, "nothing written: the status still shows the last leader's problem"
    assert written(latest) == written(replace(shown, problem=None))


def test_a_new_leader_writes_nothing_to_a_quiet_healthy_pools_status(world: World) -> None:
    """Its status says all there is: a write for each pool at every leader change is needless."""
    world.listener(resume=resumed_from(written(scale_set_on_github(world))))
    assert polled(world)
    assert world.sink.published == []


def test_labels_unchanged_mean_no_update(world: World) -> None:
    world.listener()
    world.listening()
    assert not any(
        method == "PATCH" and "/runnerscalesets/" in url and "/sessions/" not in url
        for method, url in world.calls
    )
    assert [Label(name=NAME), Label(name="gpu")] == list(
        desired_scale_set(world.settings(), 1, "Default").labels
    )


def test_a_new_leader_starts_its_listeners_apart_not_all_at_once() -> None:
    """Each start trades a token and opens a session: a thousand at once tripped the slow-host
    gate (bench/scale_sets.py --scopes 1000); they start ``start_gap`` apart."""
    started: list[float] = []

    class Recorded:
        def __init__(self, settings: ScaleSetSettings) -> None:
            self.settings, self.view, self.alive = settings, ScaleSetView(), True

        def start(self) -> None:
            started.append(time.monotonic())

        def stop(self) -> None:
            self.alive = False

        def wait(self, timeout: float | None = None) -> bool:
            return True

    pools = [
        (
            (NS, f"pool-{i}"),
            ScaleSetSettings(PoolRef(NS, f"pool-{i}", Scope(organization=ORG), "c"), f"s{i}", 2),
        )
        for i in range(4)
    ]
    listeners = ScaleSetListeners(lambda: pools, lambda settings, view: Recorded(settings), start_gap=0.2)
    listeners.sync()
    assert len(started) == 4
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert min(gaps) >= 0.2, gaps


def test_a_sync_that_read_the_pools_before_a_stop_starts_no_listener_for_the_stopped_pool() -> None:
    """The finalizer's ``stop_pool`` can come between a sync's read of the pools (the pool not
    yet marked deleting) and its start of the pool's listener, which would then make the scale
    set again after the finalizer deleted it. A later sync that sees the pool gone forgets the
    stop: a pool made again under the same name gets its listener."""
    key: PoolKey = (NS, POOL)
    settings = ScaleSetSettings(PoolRef(NS, POOL, Scope(organization=ORG), "c"), NAME, 2)
    made: list[ScaleSetSettings] = []
    listeners: ScaleSetListeners

    class Started:
        def __init__(self, settings: ScaleSetSettings) -> None:
            self.settings, self.view, self.alive = settings, ScaleSetView(), True
            made.append(settings)

        def start(self) -> None: ...

        def stop(self) -> None:
            self.alive = False

        def wait(self, timeout: float | None = None) -> bool:
            return True

    listed: list[list[tuple[PoolKey, ScaleSetSettings]]] = [
        [(key, settings)],  # read, then the finalizer stops the pool (below)
        [(key, replace(settings, deleting=True))],
        [],  # the pool is gone
        [(key, settings)],  # and made again
    ]

    def pools() -> list[tuple[PoolKey, ScaleSetSettings]]:
        read = listed.pop(0)
        if len(listed) == 3:
            listeners.stop_pool(key, 1)
        return read

    listeners = ScaleSetListeners(pools, lambda settings, view: Started(settings))  # type: ignore[arg-type,return-value]
    listeners.sync()
    assert made == [] and listeners.listening() == {}
    listeners.sync()
    listeners.sync()
    assert made == []
    listeners.sync()
    assert made == [settings] and listeners.listening() == {key: settings}


def test_busy_runners_whose_completion_never_came_do_not_outgrow_the_status() -> None:
    """A name whose JobCompleted was lost (the service cuts a message at 50 jobs) stayed for
    good; past the CRD's 1,000 the status write was refused, and no message was acknowledged
    again. The newest names stay: a pool has at most that many runners."""
    stale = tuple(f"linux-{i:05}" for i in range(api.MAX_REPLICAS))
    started = {"messageType": "JobStarted", "runnerRequestId": 7, "runnerName": "linux-new"}
    message = parse_message(
        {"messageId": 9, "messageType": "RunnerScaleSetJobMessages", "body": json.dumps([started])}
    )
    view = recorded(ScaleSetView(busy_runners=stale), message)
    assert len(view.busy_runners) == api.MAX_REPLICAS and view.busy_runners[-1] == "linux-new"
    assert "linux-00000" not in view.busy_runners, "the oldest goes"
    api.ScaleSetStatus(busyRunners=list(view.busy_runners))  # the status write's bound
