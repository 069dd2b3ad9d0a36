"""Three pools in one operator run: each reconcile reports what it did, and all converge."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.e2e.runners import ORG, OTHER_REPO, REPO, wait_condition
from tests.pools import create_pool, pool_manifest
from testworld.simulator import OperatorProcess, RunnerSimulator

pytestmark = pytest.mark.usefixtures("credentials")


def test_three_pools_each_log_their_actions_and_converge(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, simulator: RunnerSimulator
) -> None:
    pools = {"alpha": {"repo": REPO}, "beta": {"repo": OTHER_REPO}, "gamma": {"org": ORG}}
    for name, scope in pools.items():
        create_pool(api_client, namespace, pool_manifest(name, **scope))
    for name in pools:
        wait_condition(api_client, namespace, name, "Ready", "True", reason="RunnersReady")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        "runnerpool.dev", "v1alpha1", namespace, "runnerpools", "beta", {"spec": {"replicas": 2}}
    )
    wait_condition(api_client, namespace, "beta", "Ready", "True", reason="RunnersReady")

    actions: dict[str, set[str]] = {name: set() for name in pools}
    for line in operator.log_text().splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("msg") == "reconciled pool" and record.get("namespace") == namespace:
            # ``pool`` is the key (namespace/name), as on every line of the pool's work.
            actions[record["pool"].removeprefix(f"{namespace}/")].add(record["action"])
    for name, seen in actions.items():
        # Each pool waits for its token first (requeue), then gets its pods (create).
        assert {"requeue", "create"} <= seen, (name, seen)
    assert "update" in actions["beta"], "scaling a pool is an update"
