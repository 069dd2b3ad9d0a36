"""Busy runners survive a scale-down, a rollout and a SIGKILLed operator (operator process + simulator).

Jobs are played through the fake GitHub: ``set_runner(busy=True)`` is a job starting,
``complete_job`` its end (the ephemeral runner disappears, as on GitHub) and the test then
reports the pod Succeeded, as a kubelet would once the runner exited.  Every busy pod is
checked to be alive (not even terminating) until its job has ended.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from runnerpool import api, naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import REPO, get_pool, wait_condition
from tests.helpers import wait_for
from tests.pools import create_pool, play_kubelet, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.simulator import RunnerSimulator

FAST = ("--runner-sync-interval", "1")


def _pods(api_client: client.ApiClient, namespace: str, pool: str) -> dict[str, Any]:
    items = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"{naming.POOL_LABEL}={pool}"
    )
    return {p.metadata.name: p for p in items.items}


def _alive(api_client: client.ApiClient, namespace: str, pool: str, names: set[str]) -> None:
    pods = _pods(api_client, namespace, pool)
    for name in names:
        assert name in pods and pods[name].metadata.deletion_timestamp is None, f"busy pod {name} was deleted"


def _start_jobs(
    api_client: client.ApiClient, namespace: str, pool: str, fake: FakeGitHub, names: list[str]
) -> None:
    for name in names:
        fake.set_runner(REPO, name, busy=True)

    def marked() -> bool:
        pods = _pods(api_client, namespace, pool)
        return all((pods[n].metadata.labels or {}).get(naming.BUSY_LABEL) == "true" for n in names)

    wait_for(marked, message="the busy pods to be marked for the disruption budget")


def _end_job(api_client: client.ApiClient, namespace: str, fake: FakeGitHub, name: str) -> None:
    fake.complete_job(REPO, name)
    play_kubelet(api_client, namespace, name, phase="Succeeded", state="terminated")


def _ready_pool(
    api_client: client.ApiClient, namespace: str, simulator: RunnerSimulator, name: str, replicas: int
) -> list[str]:
    create_pool(api_client, namespace, pool_manifest(name, repo=REPO, replicas=replicas))
    assert simulator.wait(lambda s: len(s.registrations(namespace, name)) == replicas), simulator.rejections
    wait_condition(api_client, namespace, name, "Ready", "True", reason="RunnersReady")
    return sorted(_pods(api_client, namespace, name))


def test_scale_down_below_the_busy_count_survives_a_sigkill_and_ends_with_the_jobs(
    *,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    credentials: str,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    operator = start_operator(*FAST)
    busy_1, busy_2, idle = _ready_pool(api_client, namespace, simulator, "down", 3)
    _start_jobs(api_client, namespace, "down", fake_github, [busy_1, busy_2])

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_scale(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "down", {"spec": {"replicas": 1}}
    )
    # SIGKILL right after GitHub confirmed the idle runner's deregistration: mid scale-down.
    wait_for(
        lambda: fake_github.count("actions/delete-self-hosted-runner-from-repo", status=204) >= 1,
        message="the idle runner's deregistration",
    )
    operator.kill()
    operator.start().wait_ready()

    wait_for(lambda: idle not in _pods(api_client, namespace, "down"), message="the idle pod to go")
    assert idle not in {r["name"] for r in fake_github.runners(REPO)}, "deregistered, not left behind"
    _alive(api_client, namespace, "down", {busy_1, busy_2})
    wait_condition(api_client, namespace, "down", "Ready", "True", reason="ScalingDown")
    wait_for(
        lambda: ((get_pool(api_client, namespace, "down") or {}).get("status") or {}).get("replicas") == 2,
        message="status to count the two busy pods",
    )

    _end_job(api_client, namespace, fake_github, busy_1)
    wait_for(lambda: set(_pods(api_client, namespace, "down")) == {busy_2}, message="the pool to reach 1")
    _alive(api_client, namespace, "down", {busy_2})
    wait_condition(api_client, namespace, "down", "Ready", "True", reason="RunnersReady")


def test_a_rollout_replaces_idle_pods_at_once_and_busy_ones_after_their_job(
    *,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    credentials: str,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    operator = start_operator(*FAST)
    busy, idle = _ready_pool(api_client, namespace, simulator, "roll", 2)
    _start_jobs(api_client, namespace, "roll", fake_github, [busy])

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "roll", {"spec": {"runnerImage": "runner:2"}}
    )
    wait_for(
        lambda: idle not in _pods(api_client, namespace, "roll"), message="the idle old pod to be replaced"
    )
    operator.kill()  # mid rollout
    operator.start().wait_ready()

    def updated() -> bool:
        pool = get_pool(api_client, namespace, "roll") or {}
        return (pool.get("status") or {}).get("updatedReplicas") == 2

    wait_for(updated, message="two pods with the new template")
    _alive(api_client, namespace, "roll", {busy})
    assert condition_reason(api_client, namespace, "roll") == "RollingOut"

    _end_job(api_client, namespace, fake_github, busy)
    wait_condition(api_client, namespace, "roll", "Ready", "True", reason="RunnersReady")
    wait_for(lambda: busy not in _pods(api_client, namespace, "roll"), message="the used-up pod to go")
    pods = _pods(api_client, namespace, "roll")
    assert len(pods) == 2
    assert all(p.spec.containers[0].image == "runner:2" for p in pods.values())
    registered = {r["name"] for r in fake_github.runners(REPO)}
    assert registered == set(pods), "no runner left registered without its pod"


def condition_reason(api_client: client.ApiClient, namespace: str, name: str) -> str | None:
    pool = get_pool(api_client, namespace, name) or {}
    for cond in (pool.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return str(cond.get("reason"))
    return None
