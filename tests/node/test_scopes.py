"""Enterprise pools and runner groups on a real node: the real operator, pod spec, entrypoint
and config.sh stand-in register the runner at the enterprise, in the pool's runner group."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from runnerpool import naming
from tests.e2e.runners import get_pool
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, running_pods
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

ENTERPRISE = "big-corp"
SCOPE = f"enterprises/{ENTERPRISE}"


def _enterprise_pool(name: str, group: str) -> dict[str, Any]:
    manifest = node_pool(name)
    del manifest["spec"]["repository"]
    manifest["spec"].update(enterprise=ENTERPRISE, runnerGroup=group)
    return manifest


def _condition(pool: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    found = ((pool or {}).get("status") or {}).get("conditions") or []
    return next((c for c in found if c["type"] == type_), None)


def test_an_enterprise_pool_registers_its_runner_in_its_runner_group(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    fake_github.add_scope(enterprise=ENTERPRISE)
    group_id = fake_github.add_runner_group(SCOPE, "GPU runners")
    create_pool(api_client, namespace, _enterprise_pool("ent", "GPU runners"))
    label = naming.pool_runner_label(namespace, "ent")

    runner = wait_for(
        lambda: next(
            (
                r
                for r in fake_github.runners(SCOPE)
                if r["status"] == "online" and label in {x["name"] for x in r["labels"]}
            ),
            None,
        ),
        START_TIMEOUT,
        message="the enterprise pool's runner online",
    )
    assert runner["runner_group_id"] == group_id
    core = client.CoreV1Api(api_client)
    assert [runner["name"]] == running_pods(core, namespace, "ent")
    ready = wait_for(
        lambda: _condition(get_pool(api_client, namespace, "ent"), "RunnerGroupReady"),
        START_TIMEOUT,
        message="the pool's RunnerGroupReady condition",
    )
    assert (ready["status"], ready["reason"]) == ("True", "RunnerGroupFound")


def test_a_pool_whose_runner_group_is_missing_gets_no_pod(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    fake_github.add_scope(enterprise=ENTERPRISE)
    create_pool(api_client, namespace, _enterprise_pool("nogroup", "ARM"))

    refused = wait_for(
        lambda: _condition(get_pool(api_client, namespace, "nogroup"), "RunnerGroupReady"),
        START_TIMEOUT,
        message="the pool's RunnerGroupReady condition",
    )
    assert (refused["status"], refused["reason"]) == ("False", "RunnerGroupNotFound")
    assert client.CoreV1Api(api_client).list_namespaced_pod(namespace).items == []
    assert not fake_github.tokens_issued(SCOPE)
