"""No busy runner is killed on a real node: not by a rollout, a scale-down, a drain or a crashed
operator.

Jobs really run in the operator's pods: the fake GitHub queues them, the runner stand-ins in
the pods take them, run them and report them. A runner that gets SIGTERM while busy cancels
its job, so "every job's conclusion is success" is what proves no busy pod was deleted or
evicted; the tests also check the busy pods themselves and that GitHub and the pods agree
at the end (no runner without its pod, no pod without its runner).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch

from runnerpool import api, naming
from tests.e2e.conftest import NODE_RUNNER_SYNC_SECONDS, StartOperator
from tests.e2e.runners import REPO, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import (
    START_TIMEOUT,
    assert_alive,
    conclusions,
    evict,
    pool_pods,
    pool_status,
    queue_jobs,
    refused_eviction,
    registered_pods,
    running_pods,
    wait_budget_counts,
    wait_busy,
    wait_done,
)
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.node.node import Node
from testworld.simulator import OperatorProcess

#: Long enough for a replacement pod to start and register while the job runs.
JOB_SECONDS = 25.0
#: Short, so a pod that never registers would be replaced within the test.
REGISTRATION_TIMEOUT = "30"
SIGKILL = pytest.mark.parametrize("sigkill", [False, True], ids=["", "operator-sigkilled"])


@pytest.fixture
def operator(start_operator: StartOperator, node: Node, credentials: str) -> OperatorProcess:
    return start_operator(*_node_args(node))


def _node_args(node: Node) -> tuple[str, ...]:
    return (
        "--runner-image",
        node.runner_image.reference,
        "--runner-sync-interval",
        NODE_RUNNER_SYNC_SECONDS,
        "--registration-timeout",
        REGISTRATION_TIMEOUT,
    )


def _restart(operator: OperatorProcess) -> None:
    operator.kill()
    operator.start().wait_ready()


def _runner_env(pod: Any) -> dict[str, str]:
    runner = next(c for c in pod.spec.containers if c.name == naming.RUNNER_CONTAINER)
    return {e.name: e.value for e in runner.env or []}


def _pool_with_busy(
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    fake: FakeGitHub,
    pool: str,
    replicas: int,
    busy: int,
) -> tuple[list[str], list[int], list[str]]:
    """A pool whose ``replicas`` pods are online, ``busy`` of them running a job and marked busy:
    all its pods, the jobs, and the busy pods in job order."""
    create_pool(api_client, namespace, node_pool(pool, replicas=replicas))
    first = registered_pods(core, fake, namespace, pool, replicas)
    jobs = queue_jobs(fake, namespace, pool, busy, JOB_SECONDS)
    return first, jobs, wait_busy(core, fake, namespace, jobs)


def _assert_agree(
    core: client.CoreV1Api, fake: FakeGitHub, namespace: str, pool: str, count: int
) -> list[str]:
    """The pool has ``count`` pods, each running with an online runner, and no other runner."""
    pods = registered_pods(core, fake, namespace, pool, count)
    wait_for(
        lambda: sorted(pool_pods(core, namespace, pool)) == pods,
        START_TIMEOUT,
        0.2,
        f"pool {pool} to have only its {count} running pod(s)",
    )
    wait_for(
        lambda: sorted(r["name"] for r in pool_runners(fake, REPO, namespace, pool)) == pods,
        START_TIMEOUT,
        0.2,
        f"pool {pool}'s runners on GitHub to be exactly its pods {pods}",
    )
    return pods


@SIGKILL
def test_a_rollout_updates_idle_pods_at_once_and_busy_ones_after_their_job(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    sigkill: bool,
) -> None:
    core = client.CoreV1Api(api_client)
    first, jobs, [busy] = _pool_with_busy(core, api_client, namespace, fake_github, "roll", 2, 1)
    [idle] = set(first) - {busy}

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP,
        api.VERSION,
        namespace,
        api.PLURAL,
        "roll",
        {"spec": {"env": [{"name": "ROLL", "value": "2"}]}},
    )
    if sigkill:
        wait_for(
            lambda: any(
                _runner_env(p).get("ROLL") == "2" for p in pool_pods(core, namespace, "roll").values()
            ),
            START_TIMEOUT,
            0.2,
            "the rollout's first new pod",
        )
        _restart(operator)

    wait_for(
        lambda: pool_status(api_client, namespace, "roll").get("updatedReplicas") == 2,
        START_TIMEOUT,
        0.2,
        "status to count 2 pods with the new template",
    )
    wait_for(
        lambda: idle not in pool_pods(core, namespace, "roll"), START_TIMEOUT, 0.2, "the idle old pod to go"
    )
    # Idle pods were replaced while the job still ran; the busy one was left alone.
    assert fake_github.job(jobs[0])["status"] == "in_progress", "the rollout should not wait for the job"
    assert_alive(core, namespace, "roll", [busy])

    [done] = wait_done(fake_github, jobs).values()
    assert (done["conclusion"], done["runner_name"]) == ("success", busy)
    pods = _assert_agree(core, fake_github, namespace, "roll", 2)
    assert busy not in pods and idle not in pods
    assert all(_runner_env(p).get("ROLL") == "2" for p in pool_pods(core, namespace, "roll").values())
    assert pool_status(api_client, namespace, "roll").get("updatedReplicas") == 2
    assert conclusions(fake_github) == ["success"]


@SIGKILL
def test_scaling_3_to_1_with_2_busy_keeps_them_and_reaches_1_after_their_jobs(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    sigkill: bool,
) -> None:
    core = client.CoreV1Api(api_client)
    first, jobs, busy = _pool_with_busy(core, api_client, namespace, fake_github, "down", 3, 2)
    [idle] = set(first) - set(busy)

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_scale(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "down", {"spec": {"replicas": 1}}
    )
    if sigkill:  # right after GitHub confirmed the idle runner's deregistration
        wait_for(
            lambda: fake_github.count("actions/delete-self-hosted-runner-from-repo", status=204) >= 1,
            START_TIMEOUT,
            0.1,
            "the idle runner's deregistration",
        )
        _restart(operator)

    wait_for(lambda: idle not in pool_pods(core, namespace, "down"), START_TIMEOUT, 0.2, "the idle pod to go")
    assert idle not in {r["name"] for r in pool_runners(fake_github, REPO, namespace, "down")}
    assert [fake_github.job(j)["status"] for j in jobs] == ["in_progress"] * 2
    assert_alive(core, namespace, "down", busy)
    # Two busy pods, spec.replicas 1: kubectl drain may take neither (a budget counting the
    # pool's scale, not the busy pods, allowed one eviction here).
    wait_budget_counts(api_client, namespace, naming.BUSY_DISRUPTION_BUDGET, len(busy))
    assert [refused_eviction(core, namespace, name).status for name in busy] == [429, 429]

    done = wait_done(fake_github, jobs)
    assert [(d["conclusion"], d["runner_name"]) for d in done.values()] == [("success", n) for n in busy]
    pods = _assert_agree(core, fake_github, namespace, "down", 1)
    assert not set(pods) & set(first), "the used-up busy pods are replaced by one fresh pod"
    wait_for(
        lambda: pool_status(api_client, namespace, "down").get("replicas") == 1,
        START_TIMEOUT,
        0.2,
        "status to show 1 replica",
    )
    assert conclusions(fake_github) == ["success", "success"]


def test_eviction_of_a_busy_pod_is_refused_and_of_an_idle_one_allowed(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    """What ``kubectl drain`` (and the cluster autoscaler, Karpenter) meet: the eviction API."""
    core = client.CoreV1Api(api_client)
    first, jobs, [busy] = _pool_with_busy(core, api_client, namespace, fake_github, "drain", 2, 1)
    [idle] = set(first) - {busy}
    annotations = core.read_namespaced_pod(busy, namespace).metadata.annotations or {}
    assert naming.BUSY_ANNOTATIONS.items() <= annotations.items()

    err = refused_eviction(core, namespace, busy)
    assert err.status == 429 and "disruption budget" in str(err.body), err.body

    evict(core, namespace, idle)  # allowed: no budget covers an idle pod
    wait_for(
        lambda: idle not in pool_pods(core, namespace, "drain"), 20.0, 0.2, f"evicted pod {idle} to stop"
    )
    wait_for(
        lambda: idle not in {r["name"] for r in pool_runners(fake_github, REPO, namespace, "drain")},
        START_TIMEOUT,
        0.2,
        f"evicted runner {idle} to be deregistered",
    )
    # Still refused later in the same job, while the evicted pod's replacement starts.
    assert fake_github.job(jobs[0])["status"] == "in_progress"
    assert refused_eviction(core, namespace, busy).status == 429
    assert_alive(core, namespace, "drain", [busy])

    wait_done(fake_github, jobs)
    _assert_agree(core, fake_github, namespace, "drain", 2)
    assert conclusions(fake_github) == ["success"]


def _exit_codes_until_gone(core: client.CoreV1Api, namespace: str, name: str, timeout: int) -> list[int]:
    """Delete pod ``name`` and watch it until it is gone; the runner container's exit codes seen."""
    codes: list[int] = []
    stream = watch.Watch()
    start = core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}")
    core.delete_namespaced_pod(name, namespace)
    for event in stream.stream(
        core.list_namespaced_pod,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=start.metadata.resource_version,
        timeout_seconds=timeout,
    ):
        pod = event["object"]
        for status in pod.status.container_statuses or []:
            if status.name == naming.RUNNER_CONTAINER and status.state.terminated is not None:
                codes.append(status.state.terminated.exit_code)
        if event["type"] == "DELETED":
            stream.stop()
            return codes
    pytest.fail(f"pod {name} still there {timeout}s after its deletion")


def test_sigterm_to_an_idle_runner_exits_cleanly_well_within_the_pools_grace_period(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    core = client.CoreV1Api(api_client)
    create_pool(
        api_client,
        namespace,
        node_pool("grace", replicas=1, busyGracePeriod="4m", terminationGracePeriodSeconds=300),
    )
    [pod] = registered_pods(core, fake_github, namespace, "grace", 1)
    assert core.read_namespaced_pod(pod, namespace).spec.termination_grace_period_seconds == 300

    # Gone in 30 s of a 300 s grace period: the runner stopped on SIGTERM, nobody killed it.
    codes = _exit_codes_until_gone(core, namespace, pod, timeout=30)
    assert codes and set(codes) == {0}, f"runner container exit codes {codes}"
    wait_for(
        lambda: pod not in {r["name"] for r in pool_runners(fake_github, REPO, namespace, "grace")},
        START_TIMEOUT,
        0.2,
        f"runner {pod} to be deregistered",
    )
    [replacement] = _assert_agree(core, fake_github, namespace, "grace", 1)
    assert replacement != pod
    assert running_pods(core, namespace, "grace") == [replacement]
