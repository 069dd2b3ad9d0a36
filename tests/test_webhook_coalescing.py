"""Deliveries for one pool that arrive together share a status write (real HTTP, real API
server, the receiver's own pool informer), and each is answered 200 only once written.

At 200 deliveries/s every status PATCH costs the API server and etcd more CPU than the
receiver spends on a delivery (``bench/webhook_load.py``'s full path), so the writes are the
path: one request per write (the cached pool is written over, no GET), and one write for the
deliveries that waited while the previous one was in flight.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api
from runnerpool.demand import metrics as demand_metrics
from runnerpool.demand import runner_names
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.signature import sign
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.jobs import parse_delivery
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings, Settings
from runnerpool.webhook_component import ReceiverCache, receiver_parts
from tests.demand_payloads import API
from tests.helpers import wait_for
from tests.test_demand_recording import Pools, create, demand
from tests.test_demand_webhook import post
from tests.test_webhook_replays import signed_body

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

SECRET = b"replays secret"  # the one test_webhook_replays.signed_body's deliveries are sent with
DELIVERIES = 12


class HeldKube(Kube):
    """The real API server; every request listed, and the first PATCH held until released."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.requests: list[str] = []
        self.release = threading.Event()
        self.first_patch = threading.Event()

    def get(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.requests.append("GET")
        return super().get(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.requests.append("PATCH")
        if not self.first_patch.is_set():
            self.first_patch.set()
            assert self.release.wait(30)
        return super().patch(*args, **kwargs)


@pytest.fixture
def cache(api_client: client.ApiClient, namespace: str) -> Iterator[ReceiverCache]:
    create(api_client, namespace, "app", repository="octo-org/hello-world", autoscaling={"maxReplicas": 50})
    cache = ReceiverCache(api_client, [namespace], default_api_url=API)
    cache.start()
    assert cache.wait_for_sync(30)
    wait_for(lambda: cache.pool(namespace, "app"), message="the pool in the receiver's cache")
    yield cache
    cache.stop()


def queued(job_id: int) -> bytes:
    created = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return signed_body(job_id, "queued", created=created)


def test_deliveries_for_one_pool_at_once_share_a_write_and_are_answered_once_written(
    api_client: client.ApiClient, namespace: str, cache: ReceiverCache
) -> None:
    kube = HeldKube(api_client)
    # As the receiver component builds it (webhook_component.receiver_parts).
    writer = DemandWriter(kube, cache, GitHubSettings(api_url=API).api_url_of, runners=runner_names.by_name)
    server = WebhookServer(0, lambda: (SECRET,), writer.record_job, host="127.0.0.1")
    server.start()
    pools = Pools(api_client, namespace)
    answers: dict[int, tuple[int, set[str]]] = {}

    def deliver(job_id: int) -> None:
        body = queued(job_id)
        status, _ = post(server, body, signature=sign(SECRET, body), delivery_id=str(uuid.uuid4()))
        seen = demand(pools, "app")  # read from the API server once the answer is in
        answers[job_id] = status, set(seen.jobs) if seen is not None else set()

    try:
        first = threading.Thread(target=deliver, args=(1000,))
        first.start()
        assert kube.first_patch.wait(30)
        rest = [threading.Thread(target=deliver, args=(1000 + n,)) for n in range(1, DELIVERIES)]
        for thread in rest:
            thread.start()
        # The webhook's worker threads take 8 at a time; the others wait for a worker.
        wait_for(lambda: len(writer._pending.get((namespace, "app"), [])) >= 7, message="deliveries queued")
        assert answers == {}, "no delivery is answered before its write"
        kube.release.set()
        for thread in [first, *rest]:
            thread.join(30)
    finally:
        kube.release.set()
        server.stop()
    assert sorted(answers) == [1000 + n for n in range(DELIVERIES)]
    for job_id, (status, jobs) in answers.items():
        assert status == 200
        assert str(job_id) in jobs, f"job {job_id} answered 200 before it was in status.demand"
    patches = kube.requests.count("PATCH")
    assert patches < DELIVERIES, f"{DELIVERIES} deliveries for one pool cost {patches} patches"
    assert "GET" not in kube.requests, "the cached pool is written over: a write is one request"
    final = demand(pools, "app")
    assert final is not None and final.queued == DELIVERIES


def _queued_series(namespace: str) -> dict[str, float]:
    return {
        sample.labels["pool"]: sample.value
        for family in demand_metrics.QUEUED.collect()
        for sample in family.samples
        if sample.labels.get("namespace") == namespace
    }


def test_the_receiver_forgets_a_deleted_pool_and_stops_exporting_its_demand(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Nothing reconciles in the receiver component, so its writer kept every pool it had
    written to, and its /metrics went on showing a deleted pool's last queued count."""
    create(api_client, namespace, "app", repository="octo-org/hello-world", autoscaling={"maxReplicas": 50})
    receiver = receiver_parts(
        Settings(namespaces=(namespace,), github=GitHubSettings(api_url=API)), api_client, Kube(api_client)
    )
    receiver.cache.start()
    try:
        assert receiver.cache.wait_for_sync(30)
        wait_for(lambda: receiver.cache.pool(namespace, "app"), message="the pool in the receiver's cache")
        assert receiver.writer.record_job(parse_delivery(json.loads(queued(1000)))) == 1
        assert _queued_series(namespace) == {"app": 1.0}

        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, "app"
        )
        wait_for(lambda: not _queued_series(namespace), message="the deleted pool's series gone")
        assert (namespace, "app") not in receiver.writer._written, "nor is its last write kept"
    finally:
        receiver.cache.stop()
