"""Scale set runners in the fake GitHub: the same runner through the REST API and the Actions service.

What issue 34's operator relies on, as GitHub behaves: a runner made by the scale set's
``generatejitconfig`` is listed by REST ``GET .../actions/runners`` (ETags as any listing),
labelled with the scale set's labels, offline until its JIT config runs, online after and busy
while it runs a job; REST and the Actions service remove the same runner, and each refuses a
busy one in its own words; a job the listener acquired goes to an online idle runner of the
scale set and, once done, the ephemeral runner is gone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runnerpool.scaleset.demand import Cursor
from runnerpool.scaleset.errors import JobStillRunning, RunnerNotFound
from runnerpool.scaleset.session import MessageSession
from runnerpool.scaleset.types import JitConfig, Label, RunnerScaleSet
from tests.helpers import wait_for
from tests.test_fakegithub_jit import run_sh
from tests.test_fakegithub_scaleset import ORG, PAT, START, World
from testworld.fakegithub import FakeGitHub, RegistrationRejectedError

NAME = "k8s-linux"


@pytest.fixture
def world() -> Iterator[World]:
    now = [START]
    with FakeGitHub(scopes=[ORG], tokens=[PAT], clock=lambda: now[0]) as fake:
        yield World(fake, now)


def rest(world: World, method: str, path: str, **headers: str) -> requests.Response:
    return requests.request(
        method,
        f"{world.fake.url}/orgs/{ORG}/actions/runners{path}",
        headers={"Authorization": f"token {PAT}", **headers},
        timeout=5,
    )


def listed(world: World) -> dict[str, dict[str, object]]:
    answer = rest(world, "GET", "")
    assert answer.status_code == 200
    return {r["name"]: r for r in answer.json()["runners"]}


def scale_set_with_runner(world: World, runner: str = "pool-abc") -> tuple[RunnerScaleSet, JitConfig]:
    group = world.client.runner_group("default")
    labels = (Label(name=NAME), Label(name="gpu", type="User"))
    wanted = RunnerScaleSet(name=NAME, runner_group_id=group.id, labels=labels)
    created = world.client.create_scale_set(wanted)
    return created, world.client.generate_jit_config(created.id, runner)


class Listener:
    """What the operator's listener does with the session: acquire what is offered, acknowledge all."""

    def __init__(self, session: MessageSession) -> None:
        self.session = session
        self.cursor = Cursor()
        self.seen: list[tuple[str, str]] = []

    def drain(self) -> list[tuple[str, str]]:
        """Every job message up to the first empty poll: (messageType, runnerName)."""
        got: list[tuple[str, str]] = []
        while (message := self.session.poll(self.cursor.last_message_id, 10)) is not None:
            offered = [job.runner_request_id for job in message.jobs if job.message_type == "JobAvailable"]
            if offered:
                self.session.acquire_jobs(offered)
            got += [(job.message_type, job.runner_name) for job in message.jobs]
            self.session.acknowledge(message.message_id)
            self.cursor = self.cursor.advance(message)
        self.seen += got
        return got


def test_a_scale_set_runner_is_listed_by_rest_with_the_scale_sets_labels(world: World) -> None:
    created, jit = scale_set_with_runner(world)
    runner = listed(world)["pool-abc"]
    assert runner["id"] == jit.runner.id
    assert (runner["status"], runner["busy"], runner["ephemeral"]) == ("offline", False, True)
    assert runner["runner_group_id"] == created.runner_group_id
    labels = runner["labels"]
    assert isinstance(labels, list)
    assert [(label["name"], label["type"]) for label in labels] == [(NAME, "read-only"), ("gpu", "custom")]

    first = rest(world, "GET", "")
    assert rest(world, "GET", "", **{"If-None-Match": first.headers["ETag"]}).status_code == 304
    assert world.fake.scale_sets.use_jit_config(jit.encoded_jit_config) == jit.runner.id
    assert listed(world)["pool-abc"]["status"] == "online"
    assert rest(world, "GET", "", **{"If-None-Match": first.headers["ETag"]}).status_code == 200


def test_an_acquired_job_runs_on_an_online_runner_which_is_busy_then_gone(world: World) -> None:
    created, jit = scale_set_with_runner(world)
    finished: list[int] = []
    world.fake.scale_sets.on_runner_finished(finished.append)
    listener = Listener(world.session(created.id))
    request_id = world.fake.scale_sets.offer_job(NAME)
    assert listener.drain() == [("JobAvailable", ""), ("JobAssigned", "")]  # no runner online yet
    assert world.fake.scale_sets.jobs(NAME)[0]["state"] == "assigned"

    world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)
    assert listener.drain() == [("JobStarted", "pool-abc")]
    assert (listed(world)["pool-abc"]["status"], listed(world)["pool-abc"]["busy"]) == ("online", True)
    busy = rest(world, "DELETE", f"/{jit.runner.id}")
    assert busy.status_code == 422
    assert busy.json()["message"] == 'Bad request - Runner "pool-abc" is still running a job"'
    with pytest.raises(JobStillRunning):
        world.client.remove_runner(jit.runner.id)

    world.fake.scale_sets.complete_job(request_id)
    assert listener.drain() == [("JobCompleted", "pool-abc")]
    assert "pool-abc" not in listed(world)
    with pytest.raises(RunnerNotFound):
        world.client.runner(jit.runner.id)
    assert finished == [jit.runner.id]
    assert world.fake.scale_sets.wait_completed(1, NAME, timeout=1)
    assert world.fake.scale_sets.jobs(created.id)[0] == {
        "requestId": request_id,
        "scaleSetId": created.id,
        "state": "completed",
        "runnerName": "pool-abc",
        "result": "succeeded",
    }


def test_a_job_with_a_duration_completes_when_the_fakes_clock_passes_it(world: World) -> None:
    created, jit = scale_set_with_runner(world)
    world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)
    listener = Listener(world.session(created.id))
    world.fake.scale_sets.offer_job(created.id, duration_s=30)
    assert listener.drain() == [("JobAvailable", ""), ("JobAssigned", ""), ("JobStarted", "pool-abc")]
    assert not world.fake.scale_sets.wait_completed(1, timeout=0.2)
    world.now[0] += 30
    assert listener.drain() == [("JobCompleted", "pool-abc")]
    assert world.fake.scale_sets.completed(NAME) == 1
    assert world.fake.scale_sets.runners(NAME) == []


def test_rest_and_the_actions_service_remove_the_same_idle_runner(world: World) -> None:
    created, first = scale_set_with_runner(world, "pool-one")
    second = world.client.generate_jit_config(created.id, "pool-two")
    assert rest(world, "DELETE", f"/{first.runner.id}").status_code == 204
    with pytest.raises(RunnerNotFound):
        world.client.runner(first.runner.id)
    world.client.remove_runner(second.runner.id)
    assert rest(world, "GET", f"/{second.runner.id}").status_code == 404
    assert listed(world) == {}
    statistics = world.client.scale_set_by_id(created.id).statistics
    assert statistics is not None and statistics.total_registered_runners == 0


def test_a_jit_config_runs_once_and_not_after_its_runner_was_removed(world: World) -> None:
    created, jit = scale_set_with_runner(world)
    world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)
    with pytest.raises(RegistrationRejectedError, match="used already"):
        world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)
    removed = world.client.generate_jit_config(created.id, "pool-removed")
    world.client.remove_runner(removed.runner.id)
    with pytest.raises(RegistrationRejectedError, match="not registered"):
        world.fake.scale_sets.use_jit_config(removed.encoded_jit_config)
    with pytest.raises(RegistrationRejectedError, match="not a JIT config"):
        world.fake.scale_sets.use_jit_config("bm90IGpzb24=")


def test_a_scale_set_runner_takes_no_job_queued_for_label_runners(world: World) -> None:
    _created, jit = scale_set_with_runner(world)
    world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)
    job_id = world.fake.queue_job(f"{ORG}/app", [NAME], 1)
    assert world.fake.job(job_id)["status"] == "queued"
    assert listed(world)["pool-abc"]["busy"] is False


def test_offering_by_a_name_two_scale_sets_share_needs_the_id(world: World) -> None:
    group = world.client.runner_group("default")
    other = world.fake.add_runner_group(ORG, "gpu")
    world.client.create_scale_set(RunnerScaleSet(name=NAME, runner_group_id=group.id))
    world.client.create_scale_set(RunnerScaleSet(name=NAME, runner_group_id=other))
    with pytest.raises(LookupError, match="give the id"):
        world.fake.scale_sets.offer_job(NAME)


def test_reset_forgets_scale_sets_and_their_runners(world: World) -> None:
    created, _jit = scale_set_with_runner(world)
    world.fake.scale_sets.offer_job(created.id)
    world.fake.reset()
    assert world.fake.scale_sets.scale_sets() == []
    assert world.fake.scale_sets.jobs() == []
    assert listed(world) == {}
    client = World(world.fake, world.now).client  # the old admin token went with the reset
    assert client.scale_set(client.runner_group("default").id, NAME) is None


def _config_files(encoded: str) -> dict[str, str]:
    """The key=value lines of a JIT config's ``.runner`` and ``.credentials``, as run.sh reads them."""
    files = json.loads(base64.b64decode(encoded))
    lines = [line for text in files.values() for line in base64.b64decode(text).decode().splitlines()]
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_runner_process_with_a_scale_set_config_runs_the_job_itself(world: World) -> None:
    created, jit = scale_set_with_runner(world)
    config = _config_files(jit.encoded_jit_config)
    service, auth = config["service"], {"Authorization": f"Bearer {config['credential']}"}
    listener = Listener(world.session(created.id))
    request_id = world.fake.scale_sets.offer_job(NAME, script="echo built")
    assert listener.drain() == [("JobAvailable", ""), ("JobAssigned", "")]

    opened = requests.post(f"{service}/sessions", headers=auth, timeout=5)
    assert opened.status_code == 201, opened.text
    session = dict(line.split("=", 1) for line in opened.text.splitlines())["session_id"]
    assert listed(world)["pool-abc"]["status"] == "online"
    offered = requests.get(f"{service}/sessions/{session}/job", params={"wait": 5}, headers=auth, timeout=10)
    assert offered.status_code == 200, offered.text
    job = dict(line.split("=", 1) for line in offered.text.splitlines())
    assert (job["labels"], job["script"]) == (NAME, "echo built")
    assert listener.drain() == []  # offered, not started yet

    assert (
        requests.post(f"{service}/jobs/{job['job_id']}/started", headers=auth, timeout=5).status_code == 204
    )
    assert listener.drain() == [("JobStarted", "pool-abc")]
    assert listed(world)["pool-abc"]["busy"] is True
    done = requests.post(
        f"{service}/jobs/{job['job_id']}/completed", data={"conclusion": "success"}, headers=auth, timeout=5
    )
    assert done.status_code == 204
    assert listener.drain() == [("JobCompleted", "pool-abc")]
    assert world.fake.scale_sets.jobs(NAME)[0]["result"] == "succeeded"
    assert world.fake.scale_sets.jobs(NAME)[0]["requestId"] == request_id
    assert "pool-abc" not in listed(world)
    workflow_job = world.fake.job(int(job["job_id"]))
    assert (workflow_job["conclusion"], workflow_job["runner_name"]) == ("success", "pool-abc")


def test_the_run_sh_stand_in_runs_a_scale_set_config_and_its_job_then_exits(
    world: World, tmp_path: Path
) -> None:
    created, jit = scale_set_with_runner(world)
    listener = Listener(world.session(created.id))
    world.fake.scale_sets.offer_job(NAME, script='echo built >> "$GITHUB_STEP_SUMMARY"')
    listener.drain()
    runner = run_sh(tmp_path, jit.encoded_jit_config, "pod")
    try:
        assert runner.wait(timeout=30) == 0, runner.stdout.read() if runner.stdout else b""
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    listener.drain()
    assert [kind for kind, _ in listener.seen] == [
        "JobAvailable",
        "JobAssigned",
        "JobStarted",
        "JobCompleted",
    ]
    [job] = world.fake.jobs(f"{ORG}/app")
    assert (job["runner_name"], world.fake.summary(job["id"]).strip()) == ("pool-abc", "built")
    assert world.fake.scale_sets.completed(NAME) == 1
    assert listed(world) == {}


def test_stopping_the_fake_lets_go_of_a_held_poll_at_once(world: World) -> None:
    created, _ = scale_set_with_runner(world)
    session = world.session(created.id).session
    world.fake.scale_sets.poll_wait = 60
    answers: list[int] = []

    def poll() -> None:
        headers = {"Authorization": f"Bearer {session.message_queue_access_token}"}
        with contextlib.suppress(requests.RequestException):
            answers.append(requests.get(session.message_queue_url, headers=headers, timeout=90).status_code)

    poller = threading.Thread(target=poll)
    poller.start()
    wait_for(lambda: world.fake.scale_sets.polling(created.id) == 1, message="the poll held")
    started = time.monotonic()
    world.fake.stop()
    poller.join(timeout=30)
    assert not poller.is_alive()
    assert time.monotonic() - started < 10, "stop waited for the 60 s poll"
    assert answers in ([], [202])  # let go with a 202, or the connection closed under it
    assert world.fake.scale_sets.polling(created.id) == 0
