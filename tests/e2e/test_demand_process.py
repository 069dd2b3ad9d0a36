"""A pool that follows demand, with the operator process logged in as deploy/'s ServiceAccount
and the webhook receiver apart, logged in as its own (``runnerpool-operator-webhook``).

What a new user does after ``kubectl apply -k deploy/``: an autoscaling pool at minimum 0, a
job queued on GitHub, and either a webhook delivery (to the receiver) or the operator's poller
must bring up a runner. Both record the job in ``status.demand`` (a GET of the pool, then a
guarded status patch), so both need every verb of that path in deploy/rbac; the runner
simulator plays the pods. The operator itself listens on no webhook port.
"""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import naming
from tests.demand_payloads import delivery, job_object
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import REPO, get_pool
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.envtest.serviceaccount import OPERATOR_NAMESPACE
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.webhooks import signature
from testworld.ports import free_port
from testworld.simulator import RunnerSimulator

SECRET = b"a webhook secret for the e2e tests"
#: deploy/rbac/webhook_secret_mirror.yaml
MIRROR = "runnerpool-operator-webhook-pool-secrets"
#: The job outlasts the test: demand stays one runner while it is asserted.
JOB_SECONDS = 600.0
TIMEOUT = 60.0


def _autoscaling_pool(api_client: client.ApiClient, namespace: str, name: str, **more: Any) -> str:
    """A pool at 0 that follows demand (``more``: further autoscaling fields); its runner label."""
    autoscaling = {"minReplicas": 0, "maxReplicas": 3, "scaleDownDelay": "5m", **more}
    create_pool(api_client, namespace, pool_manifest(name, repo=REPO, replicas=0, autoscaling=autoscaling))
    return naming.pool_runner_label(namespace, name)


def _settled_at_zero(api_client: client.ApiClient, namespace: str, name: str) -> None:
    wait_for(
        lambda: _status(api_client, namespace, name).get("desiredReplicas") == 0,
        TIMEOUT,
        0.1,
        "the pool to settle at 0",
    )


def _status(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return (get_pool(api_client, namespace, name) or {}).get("status") or {}


def _scaled_to_one(
    api_client: client.ApiClient, simulator: RunnerSimulator, namespace: str, name: str
) -> None:
    wait_for(
        lambda: _status(api_client, namespace, name).get("desiredReplicas") == 1,
        TIMEOUT,
        0.1,
        f"pool {name} to want one runner for the queued job",
    )
    assert simulator.wait(lambda sim: len(sim.registrations(namespace, name)) == 1, TIMEOUT), (
        f"no runner of {name} registered: {simulator.rejections}"
    )


@pytest.mark.parametrize("apart", [True, False], ids=["receiver-apart", "all-in-one-process"])
def test_a_webhook_delivery_scales_a_pool_up(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
    tmp_path: Path,
    apart: bool,
) -> None:
    """Through the receiver on its own account (as deploy/ runs it), or, for single-process dev
    setups, ``--component all``."""
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_bytes(SECRET + b"\n")
    port = free_port()
    hook = ("--webhook-secret-file", str(secret_file))
    # No poll during the test: the delivery alone must do it.
    if apart:
        start_operator("--demand-poll-interval", "3600")
        start_operator(*hook, webhook_port=port, component="webhook-receiver")
    else:
        start_operator("--demand-poll-interval", "3600", *hook, webhook_port=port, component="all")
    sender = fake_github.send_webhooks(f"http://127.0.0.1:{port}/webhook", SECRET)
    try:
        label = _autoscaling_pool(api_client, namespace, "hooked")
        _settled_at_zero(api_client, namespace, "hooked")
        fake_github.queue_job(REPO, ["self-hosted", label], JOB_SECONDS)
        wait_for(
            lambda: sender.deliveries and sender.deliveries[0].status is not None,
            TIMEOUT,
            0.05,
            "the delivery of the queued job to be answered",
        )
        assert sender.deliveries[0].status == 200, "the receiver could not record the job"
        _scaled_to_one(api_client, simulator, namespace, "hooked")
    finally:
        fake_github.stop_webhooks(sender)


def test_polling_alone_scales_a_pool_up(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    start_operator("--demand-poll-interval", "1")
    label = _autoscaling_pool(api_client, namespace, "polled")
    fake_github.queue_job(REPO, ["self-hosted", label], JOB_SECONDS)
    _scaled_to_one(api_client, simulator, namespace, "polled")


def _mirror(api_client: client.ApiClient) -> Any:
    return client.CoreV1Api(api_client).read_namespaced_secret(MIRROR, OPERATOR_NAMESPACE)


def test_the_operator_listens_on_no_webhook_port(start_operator: StartOperator, tmp_path: Path) -> None:
    """``--component operator`` (the default) ignores ``--webhook-port``: only probes and metrics."""
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_bytes(SECRET + b"\n")
    port = free_port()
    operator = start_operator("--webhook-secret-file", str(secret_file), webhook_port=port)
    assert operator.probe("/readyz") == 200
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_pool_secret_reaches_the_receiver_through_the_mirror(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    """A pool that trusts only its own webhook secret (a Secret in its namespace, which the
    receiver's account may not read) still scales on a delivery signed with it: the operator
    copies it into the mirror Secret the receiver reads by name."""
    own = f"team secret {uuid.uuid4().hex}".encode()
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": "team-hook"}, "stringData": {"secret": own.decode()}}
    )
    port = free_port()
    start_operator("--demand-poll-interval", "3600", "--webhook-secret-mirror-interval", "1")
    start_operator(webhook_port=port, component="webhook-receiver")
    label = _autoscaling_pool(
        api_client, namespace, "own", webhookSecretRef={"name": "team-hook", "key": "secret"}
    )
    _settled_at_zero(api_client, namespace, "own")
    wait_for(
        lambda: f"{namespace}_team-hook_secret" in (_mirror(api_client).data or {}),
        TIMEOUT,
        0.1,
        "the operator to copy the pool's webhook secret into the mirror",
    )
    # The pool's own secret is tried at its URL only: /webhook/<namespace>/<secret>.
    sender = fake_github.send_webhooks(f"http://127.0.0.1:{port}/webhook/{namespace}/team-hook", own)
    try:
        fake_github.queue_job(REPO, ["self-hosted", label], JOB_SECONDS)
        wait_for(
            lambda: any(d.status == 200 for d in sender.deliveries),
            TIMEOUT,
            0.05,
            "a delivery signed with the pool's own secret to be accepted",
        )
        _scaled_to_one(api_client, simulator, namespace, "own")
    finally:
        fake_github.stop_webhooks(sender)


def _post(url: str, body: bytes, delivery: str) -> int:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature(SECRET, body),
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(answer.status)


def test_two_receivers_given_the_same_deliveries_count_each_job_once(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    tmp_path: Path,
) -> None:
    """The receiver scales by replicas: GitHub's redelivery, or a retry through another replica,
    lands the same job on two of them at once; each records it on the pool (guarded by
    ``resourceVersion``), and the pool counts it once."""
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_bytes(SECRET + b"\n")
    ports = [free_port(), free_port()]
    for port in ports:
        start_operator(
            "--webhook-secret-file", str(secret_file), webhook_port=port, component="webhook-receiver"
        )
    label = _autoscaling_pool(api_client, namespace, "twice")
    jobs = range(4101, 4106)
    bodies = {
        job: json.dumps(
            delivery(
                job_object(job, "queued", ["self-hosted", label], repository=REPO, api=fake_github.url),
                repository=REPO,
                api=fake_github.url,
            )
        ).encode()
        for job in jobs
    }
    with ThreadPoolExecutor(max_workers=len(bodies) * len(ports)) as pool:
        answers = list(
            pool.map(
                lambda sent: _post(f"http://127.0.0.1:{sent[0]}/webhook", bodies[sent[1]], f"d-{sent[1]}"),
                [(port, job) for job in jobs for port in ports],
            )
        )
    assert answers == [200] * len(answers)
    demand = _status(api_client, namespace, "twice").get("demand") or {}
    assert sorted(demand.get("jobs") or {}) == [str(job) for job in jobs]
    assert demand.get("queued") == len(jobs)
