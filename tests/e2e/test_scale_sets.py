"""A pool as a runner scale set, with the operator as a process on deploy/'s RBAC (issue 34).

What a platform team sees: the scale set appears on GitHub under the pool's name, jobs GitHub
assigns it bring runners (JIT configs from the scale set, no REST generate-jitconfig), runners
with a job are marked busy, finished ones go and the pool falls back to its minimum, and deleting
the pool deletes the scale set and leaves no runner. The runner stand-in plays the pods
(``testworld.simulator``: it runs each pod's JIT config, the runner takes its scale set's jobs).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import REPO, get_pool, wait_condition, wait_gone
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.simulator import RunnerSimulator

#: Runner rounds every second, so used-up pods are noticed at once.
FAST = ("--runner-sync-interval", "1")
TIMEOUT = 60.0


def _scale_set_pool(name: str, scale_set: str, **autoscaling: Any) -> dict[str, Any]:
    scaling = {"minReplicas": 0, "maxReplicas": 3, "scaleDownDelay": "1s", **autoscaling}
    return pool_manifest(name, repo=REPO, replicas=0, scaleSet={"name": scale_set}, autoscaling=scaling)


def _status(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return (get_pool(api_client, namespace, name) or {}).get("status") or {}


def _pods(api_client: client.ApiClient, namespace: str, name: str) -> list[Any]:
    selector = f"{naming.POOL_LABEL}={name}"
    return list(client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items)


def _rest_jit_calls(fake: FakeGitHub) -> int:
    return sum(1 for r in fake.requests if r.path.rstrip("/").endswith("generate-jitconfig"))


@pytest.mark.usefixtures("credentials")
def test_a_scale_set_pool_runs_the_jobs_github_assigns_it_and_leaves_nothing_when_deleted(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    start_operator(*FAST)
    create_pool(api_client, namespace, _scale_set_pool("arc", "arc-linux"))

    pool = wait_condition(
        api_client, namespace, "arc", "DemandVisible", "True", reason="ScaleSetListening", timeout=TIMEOUT
    )
    made = service.scale_set("arc-linux")
    assert made is not None, "the scale set exists on GitHub"
    assert pool["status"]["scaleSet"]["id"] == made["id"]
    labels = [label["name"] for label in made.get("labels") or []]
    assert naming.pool_runner_label(namespace, "arc") in labels
    assert wait_for(lambda: len(service.sessions("arc-linux")) == 1, TIMEOUT, message="one message session")

    jobs = [service.offer_job("arc-linux") for _ in range(2)]
    wait_for(
        lambda: _status(api_client, namespace, "arc").get("desiredReplicas") == 2,
        TIMEOUT,
        message="two runners for the two jobs GitHub assigned",
    )
    wait_for(
        lambda: sum(1 for j in service.jobs("arc-linux") if j["state"] == "running") == 2,
        TIMEOUT,
        message="both jobs running on the pool's runners",
    )
    assert _rest_jit_calls(fake_github) == 0, "JIT configs come from the scale set, not REST"
    wait_for(
        lambda: (
            sum(
                1
                for p in _pods(api_client, namespace, "arc")
                if naming.BUSY_LABEL in (p.metadata.labels or {})
            )
            == 2
        ),
        TIMEOUT,
        message="both runners with a job marked busy",
    )

    for job in jobs:
        service.complete_job(job)
    wait_for(
        lambda: (
            _status(api_client, namespace, "arc").get("desiredReplicas") == 0
            and not _pods(api_client, namespace, "arc")
        ),
        TIMEOUT,
        message="the pool back to its minimum of 0, its used-up pods gone",
    )

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "arc"
    )
    wait_gone(api_client, namespace, "arc", timeout=TIMEOUT)
    assert service.scale_set("arc-linux") is None, "the scale set is deleted with the pool"
    assert not [r for r in fake_github.runners(REPO) if "arc-linux" in str(r)], "no runner left"
