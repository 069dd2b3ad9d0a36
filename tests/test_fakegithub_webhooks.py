"""The fake GitHub's webhook deliveries reach the operator's receiver as GitHub's would."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.verification import Verdict
from runnerpool.github.jobs import Job
from testworld.fakegithub import FakeGitHub

REPO = "octo-org/hello-world"
SECRET = b"It's a Secret to Everybody"


class Received:
    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self._lock = threading.Lock()

    def __call__(self, job: Job, verdict: Verdict) -> int:
        with self._lock:
            self.jobs.append(job)
        return 1


@pytest.fixture
def receiver() -> Iterator[tuple[WebhookServer, Received]]:
    received = Received()
    server = WebhookServer(0, lambda: (SECRET,), received, host="127.0.0.1")
    server.start()
    yield server, received
    server.stop()


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[REPO]) as github:
        yield github


def test_a_job_queued_started_and_completed_is_delivered_three_times(
    fake: FakeGitHub, receiver: tuple[WebhookServer, Received]
) -> None:
    server, received = receiver
    hook = fake.send_webhooks(f"http://127.0.0.1:{server.port}/webhook", SECRET)
    try:
        job_id = fake.queue_job(REPO, ["self-hosted", "gpu"], 0)
        runner = fake.register_runner(REPO, "r1", ["gpu"])
        fake.job(job_id)  # the fake hands the job to the idle runner
        fake.complete_job(REPO, runner)
        assert hook.wait_idle()
    finally:
        fake.stop_webhooks(hook)
    assert [d.status for d in hook.deliveries] == [200, 200, 200]
    states = sorted((j.state or "") for j in received.jobs if j.id == job_id)
    assert states == ["completed", "in_progress", "queued"]
    started = next(j for j in received.jobs if j.state == "in_progress")
    assert (started.repository, started.labels, started.runner_name) == (REPO, ("self-hosted", "gpu"), "r1")
    assert started.api_url == fake.url


def test_a_delivery_signed_with_another_secret_is_refused(
    fake: FakeGitHub, receiver: tuple[WebhookServer, Received]
) -> None:
    server, received = receiver
    hook = fake.send_webhooks(f"http://127.0.0.1:{server.port}/webhook", SECRET)
    hook.sign_with = b"not the secret"
    try:
        fake.queue_job(REPO, ["self-hosted"], 0)
        assert hook.wait_idle()
    finally:
        fake.stop_webhooks(hook)
    assert [d.status for d in hook.deliveries] == [401]
    assert received.jobs == []


def test_a_dropped_delivery_never_arrives(fake: FakeGitHub, receiver: tuple[WebhookServer, Received]) -> None:
    server, received = receiver
    hook = fake.send_webhooks(f"http://127.0.0.1:{server.port}/webhook", SECRET)
    hook.drop = lambda action, job: action == "queued"
    try:
        fake.queue_job(REPO, ["self-hosted"], 0)
        assert hook.wait_idle()
    finally:
        fake.stop_webhooks(hook)
    assert [(d.dropped, d.status) for d in hook.deliveries] == [(True, None)]
    assert received.jobs == []


def test_two_hooks_deliver_one_event_under_one_guid(
    fake: FakeGitHub, receiver: tuple[WebhookServer, Received]
) -> None:
    """GitHub's X-GitHub-Delivery is the event's, "shared with all deliveries for all webhooks
    that subscribe to this event"; the fake gave each hook its own, so the receiver's count of
    one event sent to two tenants' webhooks was never tried against GitHub's shape."""
    server, _ = receiver
    hooks = [fake.send_webhooks(f"http://127.0.0.1:{server.port}/webhook", SECRET) for _ in range(2)]
    try:
        fake.queue_job(REPO, ["self-hosted"], 0)
        fake.queue_job(REPO, ["self-hosted"], 0)
        assert all(hook.wait_idle() for hook in hooks)
    finally:
        for hook in hooks:
            fake.stop_webhooks(hook)
    first, second = ([d.guid for d in hook.deliveries] for hook in hooks)
    assert first == second and len(set(first)) == 2, "one GUID per event, the same for each hook"
