"""What node tests look at: a pool's pods on the node, its runners on the fake GitHub, its jobs.

Shared by the node tests so that each one asserts what a user would see (pods running,
runners online, jobs' conclusions) the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import children, naming
from tests.e2e.runners import REPO, get_pool, pool_runners
from tests.helpers import wait_for
from testworld.fakegithub import FakeGitHub
from testworld.wait import poll_until

START_TIMEOUT = 90.0


def pool_pods(core: client.CoreV1Api, namespace: str, pool: str) -> dict[str, Any]:
    items = core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}={pool}").items
    return {p.metadata.name: p for p in items}


def live_pods(core: client.CoreV1Api, namespace: str, pool: str) -> list[str]:
    """The pool's pods that are not being deleted, by name."""
    return sorted(
        name for name, p in pool_pods(core, namespace, pool).items() if not p.metadata.deletion_timestamp
    )


def running_pods(core: client.CoreV1Api, namespace: str, pool: str) -> list[str]:
    return sorted(
        name
        for name, p in pool_pods(core, namespace, pool).items()
        if p.status.phase == "Running" and not p.metadata.deletion_timestamp and p.spec.node_name
    )


def online(fake: FakeGitHub, namespace: str, pool: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in pool_runners(fake, REPO, namespace, pool) if r["status"] == "online"}


def registered_pods(
    core: client.CoreV1Api, fake: FakeGitHub, namespace: str, pool: str, count: int
) -> list[str]:
    """Wait until ``count`` running pods each have an online runner of the same name."""

    def matched() -> list[str] | None:
        pods = running_pods(core, namespace, pool)
        runners = online(fake, namespace, pool)
        return pods if len(pods) == count and set(pods) <= runners.keys() else None

    found: list[str] = wait_for(matched, START_TIMEOUT, 0.2, f"{count} pod(s) of {pool} running and online")
    return found


def queue_jobs(fake: FakeGitHub, namespace: str, pool: str, count: int, seconds: float) -> list[int]:
    return [fake.queue_job(REPO, [naming.pool_runner_label(namespace, pool)], seconds) for _ in range(count)]


def wait_busy(core: client.CoreV1Api, fake: FakeGitHub, namespace: str, jobs: list[int]) -> list[str]:
    """Wait until every job runs and its pod carries the busy mark; the pods' names, in job order.

    The mark comes from the operator's runner listing (one ``--runner-sync-interval`` late).
    """

    def started() -> list[str] | None:
        states = [fake.job(j) for j in jobs]
        return (
            [j["runner_name"] for j in states] if all(j["status"] == "in_progress" for j in states) else None
        )

    names: list[str] = wait_for(started, START_TIMEOUT, 0.2, f"jobs {jobs} to start")

    def marked() -> bool:
        pods = [core.read_namespaced_pod(n, namespace) for n in names]
        return all((p.metadata.labels or {}).get(naming.BUSY_LABEL) == naming.BUSY_VALUE for p in pods)

    wait_for(marked, START_TIMEOUT, 0.2, f"pods {names} to be marked busy")
    return names


def wait_done(fake: FakeGitHub, jobs: list[int], timeout: float = START_TIMEOUT) -> dict[int, dict[str, Any]]:
    """Wait until every job is completed; on timeout the failure shows each job's state."""
    states: dict[int, dict[str, Any]] = {}

    def done() -> bool:
        states.update({j: fake.job(j) for j in jobs})
        return all(s["status"] == "completed" for s in states.values())

    if not poll_until(done, timeout, 0.2):
        seen = {j: (s["status"], s["conclusion"], s["runner_name"]) for j, s in states.items()}
        pytest.fail(f"jobs not completed after {timeout}s: {seen}")
    return states


def conclusions(fake: FakeGitHub) -> list[str | None]:
    """Every job's conclusion: what a user reads on the Actions tab (a killed runner: cancelled)."""
    return [j["conclusion"] for j in fake.jobs(REPO)]


def assert_alive(core: client.CoreV1Api, namespace: str, pool: str, names: list[str]) -> None:
    pods = pool_pods(core, namespace, pool)
    for name in names:
        assert name in pods and pods[name].metadata.deletion_timestamp is None, f"busy pod {name} was deleted"


def pool_status(api_client: client.ApiClient, namespace: str, pool: str) -> dict[str, Any]:
    return dict(((get_pool(api_client, namespace, pool) or {}).get("status")) or {})


def replacement_pod(core: client.CoreV1Api, fake: FakeGitHub, namespace: str, pool: str, old: str) -> str:
    """Wait until the pool's one registered pod is another than ``old`` (one job per pod)."""
    [new] = wait_for(
        lambda: (pods := registered_pods(core, fake, namespace, pool, 1)) != [old] and pods,
        START_TIMEOUT,
        0.2,
        f"a new pod of {pool} to replace {old}",
    )
    return new


def wait_budget_counts(api_client: client.ApiClient, namespace: str, budget: str, healthy: int) -> None:
    """Until the disruption controller has judged the namespace's ``budget`` on ``healthy`` pods
    (its verdict, not a sync failure, which refuses everything on its own)."""
    policy = client.PolicyV1Api(api_client)

    def counted() -> bool:
        found = policy.read_namespaced_pod_disruption_budget(budget, namespace)
        status = found.status
        return bool(
            status is not None
            and status.observed_generation == found.metadata.generation
            and status.current_healthy == healthy
            and status.desired_healthy == children.BUSY_MIN_AVAILABLE
            and status.disruptions_allowed == 0
        )

    wait_for(counted, START_TIMEOUT, 0.5, f"budget {budget} to count {healthy} pod(s)")


def evict(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """What ``kubectl drain`` (and the cluster autoscaler, Karpenter) ask: the eviction API."""
    core.create_namespaced_pod_eviction(
        name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    )


def refused_eviction(core: client.CoreV1Api, namespace: str, name: str) -> ApiException:
    with pytest.raises(ApiException) as refused:
        evict(core, namespace, name)
    return refused.value
