"""A replayed delivery changes nothing (``demand.replays``): real HTTP deliveries to the
receiver, the pool on the real API server, demand written by the demand writer.

``X-GitHub-Delivery`` is not signed: a captured delivery sent again under a new id verifies.
The job's own times, inside the signed body, say how old it is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.signature import sign
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.jobs import parse_delivery
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings
from tests.demand_payloads import API, delivery, job_object
from tests.test_demand_recording import REPO, Pools, create, demand, job
from tests.test_demand_webhook import post

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

SECRET = b"replays secret"
LABELS = ["self-hosted"]


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(minutes: float) -> str:
    return rfc3339(datetime.now(UTC) - timedelta(minutes=minutes))


@pytest.fixture
def pools(api_client: client.ApiClient, namespace: str) -> Pools:
    create(api_client, namespace, "app", repository="octo-org/hello-world", autoscaling={"maxReplicas": 5})
    return Pools(api_client, namespace)


@pytest.fixture
def receiver(api_client: client.ApiClient, pools: Pools) -> Iterator[WebhookServer]:
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of)
    server = WebhookServer(0, lambda: (SECRET,), writer.record_job, host="127.0.0.1")
    server.start()
    yield server
    server.stop()


def signed_body(job_id: int, status: str, **kw: Any) -> bytes:
    return json.dumps(delivery(job_object(job_id, status, LABELS, **kw))).encode()


def send(server: WebhookServer, body: bytes) -> tuple[int, str]:
    """As a replay is sent: the same signed body, a new delivery id."""
    return post(server, body, signature=sign(SECRET, body), delivery_id=str(uuid.uuid4()))


def version(pools: Pools) -> str:
    return str(pools.get("app")["metadata"]["resourceVersion"])


def test_a_replayed_queued_delivery_changes_nothing_while_the_ended_job_is_remembered(
    receiver: WebhookServer, pools: Pools
) -> None:
    queued = signed_body(501, "queued", created=ago(2))
    assert send(receiver, queued)[0] == 200
    app = demand(pools, "app")
    assert app is not None and app.queued == 1
    completed = signed_body(501, "completed", created=ago(2), started=ago(1.5), completed=ago(1))
    assert send(receiver, completed)[0] == 200
    before = version(pools)
    assert send(receiver, queued)[0] in (200, 202)
    app = demand(pools, "app")
    assert app is not None and app.queued == 0 and app.jobs["501"].state == "completed"
    assert version(pools) == before


def test_a_replayed_queued_delivery_of_a_job_ended_past_the_forget_window_changes_nothing(
    receiver: WebhookServer, pools: Pools, caplog: pytest.LogCaptureFixture
) -> None:
    """The job was queued 12 minutes ago and has ended: forgotten after 10, never counted again."""
    caplog.set_level(logging.INFO)
    before = version(pools)
    status, text = send(receiver, signed_body(502, "queued", created=ago(12)))
    assert status == 202 and "changes nothing" in text, text
    assert "recorded nowhere" not in caplog.text, "the pool polls the repository: nothing to say"
    in_progress = signed_body(502, "in_progress", created=ago(12), started=ago(11), runner="app-x1y2z")
    assert send(receiver, in_progress)[0] == 202
    assert version(pools) == before
    assert demand(pools, "app") is None


def test_a_delivery_within_the_window_still_counts(receiver: WebhookServer, pools: Pools) -> None:
    """Sent a few minutes late (GitHub queues deliveries under load): still counted."""
    assert send(receiver, signed_body(503, "queued", created=ago(4)))[0] == 200
    app = demand(pools, "app")
    assert app is not None and app.queued == 1


def test_a_replayed_completed_delivery_of_a_job_the_pool_never_tracked_changes_nothing(
    receiver: WebhookServer, pools: Pools
) -> None:
    """Whoever captured old ``completed`` deliveries could send them again under new delivery
    ids: each job the pool did not track was written into its demand (a write and a reconcile
    each), and enough of them pushed the real completed jobs out of its record, letting a fresh
    replay of their ``queued`` count again."""
    assert send(receiver, signed_body(505, "queued", created=ago(1)))[0] == 200
    before = version(pools)

    for job_id in (506, 507, 508):
        old = signed_body(job_id, "completed", created=ago(30), started=ago(29), completed=ago(20))
        assert send(receiver, old)[0] == 200

    assert version(pools) == before
    app = demand(pools, "app")
    assert app is not None and set(app.jobs) == {"505"}


def test_a_late_queued_delivery_has_an_organization_pool_poll_its_repository_to_count_it(
    api_client: client.ApiClient, namespace: str
) -> None:
    """An organization pool that lists no repositories hears of a job only from its
    deliveries: a ``queued`` one more than 5 minutes late (a redelivery, a job held for an
    environment's approval) was dropped, and the job waited for a runner for good. It is kept
    unconfirmed, not counted, until a poll of its repository lists it; a replay of it costs
    no runner and no further write."""
    create(api_client, namespace, "org", organization="octo-org", autoscaling={"maxReplicas": 5})
    pools = Pools(api_client, namespace)
    api_url_of = GitHubSettings(api_url=API).api_url_of
    writer = DemandWriter(Kube(api_client), pools, api_url_of)
    server = WebhookServer(0, lambda: (SECRET,), writer.record_job, host="127.0.0.1")
    server.start()
    try:
        late = signed_body(520, "queued", created=ago(20), repository=REPO)
        status, text = send(server, late)
        assert status == 202 and "count it once a poll of its repository lists it" in text, text
        org = demand(pools, "org")
        assert org is not None and org.queued == 0 and org.jobs["520"].unconfirmed
        written = str(pools.get("org")["metadata"]["resourceVersion"])
        assert send(server, late)[0] == 202
        assert str(pools.get("org")["metadata"]["resourceVersion"]) == written, "a replay writes nothing"
    finally:
        server.stop()

    github = FakeGitHubClient()
    github.jobs[REPO] = [job(520, "queued", LABELS, created=ago(20))]
    poller = DemandPoller(pools, writer, lambda pool: github, api_url_of, interval=30)
    poller.poll_once()
    org = demand(pools, "org")
    assert github.jobs_requests == [REPO], "the job's repository is polled"
    assert org is not None and org.queued == 1 and not org.jobs["520"].unconfirmed

    github.jobs[REPO] = []  # it ran and ended, its deliveries lost
    poller.poll_once()
    org = demand(pools, "org")
    assert org is not None and org.queued == 0 and org.jobs["520"].state == "completed"


def test_a_late_queued_delivery_no_poll_lists_ends_at_the_next_poll(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A replay of an old job's ``queued``: the poll of its repository does not list it."""
    create(api_client, namespace, "org", organization="octo-org", autoscaling={"maxReplicas": 5})
    pools = Pools(api_client, namespace)
    api_url_of = GitHubSettings(api_url=API).api_url_of
    writer = DemandWriter(Kube(api_client), pools, api_url_of)
    late = json.loads(signed_body(521, "queued", created=ago(40), repository=REPO))
    assert writer.record_job(dataclasses.replace(parse_delivery(late), unconfirmed=True)) == 1
    github = FakeGitHubClient()
    poller = DemandPoller(pools, writer, lambda pool: github, api_url_of, interval=30)
    poller.poll_once()
    org = demand(pools, "org")
    assert org is not None and org.queued == 0 and org.jobs["521"].state == "completed"
    assert github.jobs_requests == [REPO]
