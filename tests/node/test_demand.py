"""Pools that follow demand, on the real node: real operator, real pods, real jobs.

The fake GitHub delivers signed ``workflow_job`` webhooks to the operator's receiver as its
jobs are queued, taken and completed (``testworld.fakegithub.webhooks``); a test may sign
them with the wrong secret or lose them, and the operator's poller is the repair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api
from tests.e2e.conftest import NODE_RUNNER_SYNC_SECONDS, StartOperator
from tests.e2e.runners import REPO, get_pool
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import conclusions, queue_jobs, registered_pods, wait_done
from tests.pools import create_pool
from testworld.envtest.controlplane import free_port
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.webhooks import WebhookSender
from testworld.node.node import Node

SECRET = b"a webhook secret for the node tests"
TIMEOUT = 90.0
#: Long enough that no poll happens during a test that must see the webhook alone.
NO_POLLING = "3600"
#: Long enough for the idle pods to be deregistered and go while the job runs.
BUSY_JOB_SECONDS = 25.0

StartDemand = Callable[..., WebhookSender]


@pytest.fixture
def demand_operator(
    start_operator: StartOperator, node: Node, fake_github: FakeGitHub, tmp_path: Path
) -> Iterator[StartDemand]:
    """Start the operator with its webhook receiver and the fake GitHub delivering to it."""
    senders: list[WebhookSender] = []

    def start(poll_interval: str = NO_POLLING) -> WebhookSender:
        secret_file = tmp_path / "webhook-secret"
        secret_file.write_bytes(SECRET + b"\n")
        port = free_port()
        start_operator(
            "--runner-image",
            node.runner_image.reference,
            "--runner-sync-interval",
            NODE_RUNNER_SYNC_SECONDS,
            "--webhook-port",
            str(port),
            "--webhook-secret-file",
            str(secret_file),
            "--demand-poll-interval",
            poll_interval,
        )
        sender = fake_github.send_webhooks(f"http://127.0.0.1:{port}/webhook", SECRET)
        senders.append(sender)
        return sender

    yield start
    for sender in senders:
        fake_github.stop_webhooks(sender)


def _auto_pool(
    name: str, *, min_replicas: int = 0, max_replicas: int = 4, delay: str = "3s"
) -> dict[str, Any]:
    autoscaling = {"minReplicas": min_replicas, "maxReplicas": max_replicas, "scaleDownDelay": delay}
    return node_pool(name, replicas=0, autoscaling=autoscaling)


def _status(api_client: client.ApiClient, namespace: str, pool: str) -> dict[str, Any]:
    return dict((get_pool(api_client, namespace, pool) or {}).get("status") or {})


def _pods(api_client: client.ApiClient, namespace: str, pool: str) -> list[str]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"{api.POOL_LABEL}={pool}"
    )
    return sorted(p.metadata.name for p in pods.items if not p.metadata.deletion_timestamp)


def _settled_at_zero(api_client: client.ApiClient, namespace: str, pool: str) -> None:
    """The pool decided 0 and has no pod: where a pool at minimum 0 rests."""
    wait_for(
        lambda: (
            _status(api_client, namespace, pool).get("desiredReplicas") == 0
            and not _pods(api_client, namespace, pool)
        ),
        TIMEOUT,
        0.2,
        f"pool {pool} at 0 runners",
    )


def _wait_jobs(fake: FakeGitHub, job_ids: list[int], status: str) -> list[dict[str, Any]]:
    def reached() -> list[dict[str, Any]]:
        found = [fake.job(i) for i in job_ids]
        return found if all(j["status"] == status for j in found) else []

    jobs: list[dict[str, Any]] = wait_for(reached, TIMEOUT, 0.2, f"jobs {job_ids} {status}")
    return jobs


def test_jobs_queued_at_zero_start_pods_that_run_them_then_the_pool_returns_to_zero(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    demand_operator: StartDemand,
) -> None:
    hook = demand_operator()
    create_pool(api_client, namespace, _auto_pool("burst"))
    _settled_at_zero(api_client, namespace, "burst")

    label = api.pool_runner_label(namespace, "burst")
    job_ids = [fake_github.queue_job(REPO, ["self-hosted", label], 2.0) for _ in range(3)]

    done = _wait_jobs(fake_github, job_ids, "completed")
    assert [j["conclusion"] for j in done] == ["success"] * 3
    # Each ran on a runner pod of the pool (runners register under their pod's name).
    assert all(j["runner_name"].startswith("burst-") for j in done)
    assert len({j["runner_name"] for j in done}) == 3, "one ephemeral runner per job"
    _settled_at_zero(api_client, namespace, "burst")
    assert {d.status for d in hook.deliveries} == {200}


def test_a_delivery_with_a_bad_signature_changes_nothing(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    demand_operator: StartDemand,
) -> None:
    hook = demand_operator()
    create_pool(api_client, namespace, _auto_pool("signed"))
    _settled_at_zero(api_client, namespace, "signed")

    hook.sign_with = b"not the webhook secret"
    fake_github.queue_job(REPO, ["self-hosted", api.pool_runner_label(namespace, "signed")], 1.0)
    assert hook.wait_idle()

    assert [d.status for d in hook.deliveries] == [401]
    after = get_pool(api_client, namespace, "signed") or {}
    assert "demand" not in after.get("status", {}), "an unverified delivery recorded nothing"
    assert after["status"]["desiredReplicas"] == 0
    assert _pods(api_client, namespace, "signed") == []


def test_a_lost_delivery_is_repaired_by_polling(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    demand_operator: StartDemand,
) -> None:
    hook = demand_operator(poll_interval="2")
    hook.drop = lambda action, job: action == "queued"
    create_pool(api_client, namespace, _auto_pool("lost"))
    _settled_at_zero(api_client, namespace, "lost")

    job_id = fake_github.queue_job(REPO, ["self-hosted", api.pool_runner_label(namespace, "lost")], 1.0)

    [done] = _wait_jobs(fake_github, [job_id], "completed")
    assert done["conclusion"] == "success" and done["runner_name"].startswith("lost-")
    assert [d.dropped for d in hook.deliveries if d.action == "queued"] == [True]
    _settled_at_zero(api_client, namespace, "lost")


def test_a_job_whose_labels_no_pool_has_scales_nothing(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    demand_operator: StartDemand,
) -> None:
    hook = demand_operator(poll_interval="1")
    create_pool(api_client, namespace, _auto_pool("picky"))
    _settled_at_zero(api_client, namespace, "picky")

    foreign = fake_github.queue_job(
        REPO, ["self-hosted", api.pool_runner_label(namespace, "picky"), "gpu"], 1.0
    )
    assert hook.wait_idle()
    assert [d.status for d in hook.deliveries] == [200]
    # A matching job queued after it, and run: by then the poller has seen both several times.
    label = api.pool_runner_label(namespace, "picky")
    [done] = _wait_jobs(fake_github, [fake_github.queue_job(REPO, ["self-hosted", label], 0.5)], "completed")
    assert done["conclusion"] == "success"

    status = _status(api_client, namespace, "picky")
    assert str(foreign) not in (status.get("demand") or {}).get("jobs", {})
    assert fake_github.job(foreign)["status"] == "queued", "no runner of the pool was made for it"
    _settled_at_zero(api_client, namespace, "picky")


def test_scaling_down_never_kills_a_busy_runner(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    demand_operator: StartDemand,
) -> None:
    """The demand falls below the pods while one runs a job: only idle runners go.

    The minimum drops the moment GitHub shows the job in progress, before the operator's
    runner listing has marked the pod busy: the deregistration GitHub refuses for a busy
    runner is what keeps it.
    """
    demand_operator()
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, _auto_pool("shrink", min_replicas=3))
    first = registered_pods(core, fake_github, namespace, "shrink", 3)
    jobs = queue_jobs(fake_github, namespace, "shrink", 1, BUSY_JOB_SECONDS)
    [busy] = [j["runner_name"] for j in _wait_jobs(fake_github, jobs, "in_progress")]

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "shrink", {"spec": {"autoscaling": {"minReplicas": 0}}}
    )
    wait_for(
        lambda: _pods(api_client, namespace, "shrink") == [busy],
        TIMEOUT,
        0.2,
        f"the idle pods {sorted(set(first) - {busy})} to go and the busy {busy} to stay",
    )
    assert fake_github.job(jobs[0])["status"] == "in_progress"
    assert _status(api_client, namespace, "shrink").get("desiredReplicas") == 1, "busy 1 + queued 0"

    [done] = wait_done(fake_github, jobs).values()
    assert (done["conclusion"], done["runner_name"]) == ("success", busy)
    _settled_at_zero(api_client, namespace, "shrink")
    assert conclusions(fake_github) == ["success"]
