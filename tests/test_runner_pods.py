"""Runner pods on a real API server: replacement after a job, recreateDeadline, offline-runner GC,
scale-down and rollout that never take a busy runner's pod, busy marks.

Pods are created as the reconciler creates them (``runnerpool.pods.template.runner_pod``);
nothing runs them, so the tests play kubelet by patching pod status (Running, Succeeded, a
restarted container). GitHub is ``responses``. Each test runs one runner-manager round with
``sync``.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client
from prometheus_client import REGISTRY

from runnerpool import api, naming
from runnerpool.domain import PoolRef, Scope
from runnerpool.github.credentials import NamedClientCache
from runnerpool.pods import template
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.kube import Kube
from tests.admission import refusing
from tests.github_mocks import API, RunnerEndpoint, github, live_clients
from tests.helpers import wait_for
from tests.pools import (
    LiveReader,
    create_pool,
    pat_secret,
    play_kubelet,
    pool_manifest,
)
from tests.reconcilers import make_reconciler

__all__ = ["github"]  # the shared fixture

ORG = Scope(organization="octo-org")


def _sync(managers: RunnerManagers) -> None:
    """One round of each of the organization's runner managers (one per credential Secret)."""
    for key in managers.scopes():
        if key.scope_key == ORG.key:
            managers.sync(key)


class LivePools(LiveReader):
    """``LiveReader`` plus the pod list the runner managers read, straight from the API server."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self._client = api_client
        self._pods = client.CoreV1Api(api_client)

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        selector = f"{naming.POOL_LABEL}={pool},{naming.MANAGED_BY_LABEL}={naming.MANAGED_BY_VALUE}"
        items = self._pods.list_namespaced_pod(namespace, label_selector=selector).items
        return [self._client.sanitize_for_serialization(pod) for pod in items]


def pods_reconciler(api_client: client.ApiClient) -> Reconciler:
    return make_reconciler(api_client)


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Cluster:
    api_client: client.ApiClient
    namespace: str
    managers: RunnerManagers
    clock: Clock

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def pool(self, name: str, replicas: int, **spec: Any) -> list[str]:
        """A pool and its pods as the reconciler makes them; returns the pods' names (sorted)."""
        created = create_pool(
            self.api_client, self.namespace, pool_manifest(name, org="octo-org", replicas=replicas, **spec)
        )
        pool = api.RunnerPool.model_validate(created)
        for _ in range(replicas):
            self.add_pod(pool)
        self.managers.start(PoolRef(self.namespace, name, ORG, pool.spec.credential_secret_name, api_url=API))
        return self.wait_pods(name, replicas)

    def add_pod(self, pool: api.RunnerPool) -> str:
        body = template.runner_pod(pool, api.DEFAULT_RUNNER_IMAGE, API)
        return str(self.core.create_namespaced_pod(self.namespace, body).metadata.name)

    def scale(self, name: str, replicas: int, **spec: Any) -> api.RunnerPool:
        patched = client.CustomObjectsApi(self.api_client).patch_namespaced_custom_object(
            api.GROUP, api.VERSION, self.namespace, api.PLURAL, name, {"spec": {"replicas": replicas, **spec}}
        )
        return api.RunnerPool.model_validate(patched)

    def pods(self, pool: str) -> dict[str, Any]:
        items = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{naming.POOL_LABEL}={pool}"
        ).items
        return {pod.metadata.name: pod for pod in items if pod.metadata.deletion_timestamp is None}

    def wait_pods(self, pool: str, count: int, without: AbstractSet[str] = frozenset()) -> list[str]:
        def ready() -> tuple[list[str]] | None:
            names = sorted(self.pods(pool))
            return (names,) if len(names) == count and not without & set(names) else None

        return wait_for(ready, message=f"{count} pods of {pool} without {sorted(without)}")[0]

    def kubelet(self, pod: str, *, phase: str = "Running", state: str = "running", restarts: int = 0) -> None:
        play_kubelet(self.api_client, self.namespace, pod, phase=phase, state=state, restarts=restarts)


@pytest.fixture
def cluster(api_client: client.ApiClient, namespace: str, runnerpool_crd: Any) -> Iterator[Cluster]:
    pat_secret(api_client, namespace)
    clock = Clock(datetime.now(UTC))
    managers = RunnerManagers(
        LivePools(api_client),
        live_clients(api_client, NamedClientCache),
        KubePods(Kube(api_client)),
        lambda key: None,
        clock=clock,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started: rounds run by sync()
        wanted_hash=lambda pool: template.wanted_hash(pool, api.DEFAULT_RUNNER_IMAGE, API),
    )
    yield Cluster(api_client, namespace, managers, clock)
    managers.stop_all()


def test_finished_pods_are_replaced_and_a_busy_runners_pod_survives(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    ns = cluster.namespace
    done, restarted, busy = cluster.pool("alpha", 3)
    cluster.kubelet(done, phase="Succeeded", state="terminated")  # its runner is gone from GitHub
    cluster.kubelet(restarted, restarts=1)  # ran its job, came back and registered again
    cluster.kubelet(busy, restarts=1)  # ... and already took another job
    endpoint = RunnerEndpoint(github)
    endpoint.add(101, restarted, [f"{ns}/alpha"])
    endpoint.add(102, busy, [f"{ns}/alpha"], busy=True)

    _sync(cluster.managers)

    assert endpoint.deleted == [(101, 204)], "deregistered first; the busy runner is not even asked"
    assert cluster.wait_pods("alpha", 1, without={done, restarted}) == [busy]
    kept = cluster.pods("alpha")[busy]
    assert kept.metadata.labels[naming.BUSY_LABEL] == "true", "covered by the disruption budget"
    assert naming.BUSY_ANNOTATIONS.items() <= kept.metadata.annotations.items()

    endpoint.runners[102]["busy"] = False  # the second job ended
    _sync(cluster.managers)

    assert endpoint.deleted[-1] == (102, 204)
    cluster.wait_pods("alpha", 0)


def test_recreate_deadline_replaces_idle_pods_never_busy_ones(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    ns = cluster.namespace
    idle, busy, took_a_job = cluster.pool("beta", 3, recreateDeadline="1h")
    for pod in (idle, busy, took_a_job):
        cluster.kubelet(pod)
    endpoint = RunnerEndpoint(github)
    endpoint.add(201, idle, [f"{ns}/beta"])
    endpoint.add(202, busy, [f"{ns}/beta"], busy=True)
    endpoint.add(203, took_a_job, [f"{ns}/beta"])
    endpoint.busy_on_delete.add(203)  # listed idle, busy by the time of the DELETE

    _sync(cluster.managers)
    assert endpoint.deleted == [], "young pods stay"

    cluster.clock.now += timedelta(hours=2)
    _sync(cluster.managers)

    assert endpoint.deleted == [(201, 204), (203, 422)]
    assert cluster.wait_pods("beta", 2, without={idle}) == sorted([busy, took_a_job])
    # The 422 proves the job before any listing does: marked at once, not a listing later.
    marked = cluster.pods("beta")[took_a_job].metadata.labels or {}
    assert marked.get(naming.BUSY_LABEL) == "true", "evictable until the next listing"


def test_offline_runners_without_a_pod_are_deleted_never_busy_ones(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    ns = cluster.namespace
    (pod,) = cluster.pool("gamma", 1)
    cluster.kubelet(pod)
    endpoint = RunnerEndpoint(github)
    endpoint.add(301, pod, [f"{ns}/gamma"], status="offline")  # has its pod: kept
    endpoint.add(302, "runnerpool-gamma-old-1", [f"{ns}/gamma"], status="offline")
    endpoint.add(303, "runnerpool-gamma-old-2", [f"{ns}/gamma"], status="offline", busy=True)
    endpoint.add(304, "runnerpool-gamma-old-3", [f"{ns}/gamma"])  # online: not gone yet
    endpoint.add(305, "runnerpool-delta-old", [f"{ns}/delta"], status="offline")  # not this pool's
    collected = REGISTRY.get_sample_value(
        "runnerpool_runners_collected_total", {"namespace": ns, "pool": "gamma"}
    )

    _sync(cluster.managers)

    assert endpoint.deleted == [(302, 204)]
    assert sorted(endpoint.runners) == [301, 303, 304, 305]
    after = REGISTRY.get_sample_value(
        "runnerpool_runners_collected_total", {"namespace": ns, "pool": "gamma"}
    )
    assert (after or 0) - (collected or 0) == 1
    assert pod in cluster.pods("gamma")


def test_a_pod_changed_since_the_decision_is_not_deleted(cluster: Cluster) -> None:
    """The resourceVersion precondition: a container restarted after the decision wins."""
    (pod,) = cluster.pool("delta", 1)
    seen = cluster.core.read_namespaced_pod(pod, cluster.namespace)
    cluster.kubelet(pod, restarts=1)
    pods = KubePods(Kube(cluster.api_client))

    assert not pods.delete_pod(cluster.namespace, pod, seen.metadata.uid, seen.metadata.resource_version)
    assert pod in cluster.pods("delta")
    current = cluster.core.read_namespaced_pod(pod, cluster.namespace)
    assert pods.delete_pod(cluster.namespace, pod, current.metadata.uid, current.metadata.resource_version)


def test_a_busy_runner_is_unmarked_when_idle_again(cluster: Cluster, github: responses.RequestsMock) -> None:
    (pod,) = cluster.pool("zeta", 1)
    cluster.kubelet(pod)
    endpoint = RunnerEndpoint(github)
    endpoint.add(601, pod, [f"{cluster.namespace}/zeta"], busy=True)
    _sync(cluster.managers)
    assert cluster.pods("zeta")[pod].metadata.labels.get(naming.BUSY_LABEL) == "true"

    endpoint.runners[601]["busy"] = False  # a non-ephemeral runner, say, back to idle
    _sync(cluster.managers)

    meta = cluster.pods("zeta")[pod].metadata
    assert naming.BUSY_LABEL not in meta.labels
    assert not naming.BUSY_ANNOTATIONS.keys() & (meta.annotations or {}).keys()


def test_a_pod_deletion_the_cluster_refuses_holds_up_neither_other_pods_nor_the_busy_marks(
    cluster: Cluster, github: responses.RequestsMock, caplog: pytest.LogCaptureFixture
) -> None:
    """An admission policy that refuses deleting finished pods (to keep them for an audit, say)
    must not leave a runner that took a job unmarked, and evictable, round after round."""
    ns = cluster.namespace
    kept, done, busy = cluster.pool("iota", 3)
    for pod in (kept, done):
        cluster.kubelet(pod, phase="Succeeded", state="terminated")
    cluster.kubelet(busy)
    endpoint = RunnerEndpoint(github)
    endpoint.add(801, busy, [f"{ns}/iota"], busy=True)
    message = "finished pods are kept for the audit"

    def dry_run() -> object:
        return cluster.core.delete_namespaced_pod(kept, ns, dry_run="All")

    refuse_kept = f"oldObject.metadata.name != '{kept}'"
    with refusing(
        cluster.api_client,
        ns,
        operation="DELETE",
        resource=("", "v1", "pods"),
        allowed=refuse_kept,
        message=message,
        probe=dry_run,
    ):
        _sync(cluster.managers)

        assert cluster.wait_pods("iota", 2, without={done}) == sorted([kept, busy]), "the others go"
        assert cluster.pods("iota")[busy].metadata.labels.get(naming.BUSY_LABEL) == "true"
        assert f"cannot delete runner pod {ns}/{kept}" in caplog.text and message in caplog.text


def test_a_busy_mark_the_cluster_refuses_is_a_warning_event_on_the_pool_while_it_lasts(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    """An admission policy that keeps runner pods' labels as they were made: the pod of a runner
    with a job is not covered by the busy budget, and a drain may evict it mid-job. Before,
    only the runner manager's log said so."""
    ns = cluster.namespace
    busy, later = cluster.pool("kappa", 2)
    endpoint = RunnerEndpoint(github)
    for runner_id, pod in enumerate((busy, later), start=901):
        cluster.kubelet(pod)
        endpoint.add(runner_id, pod, [f"{ns}/kappa"], busy=pod == busy)
    reconciler = make_reconciler(cluster.api_client, runners=cluster.managers)
    message = "runner pods keep the labels they were made with"
    marked = {"metadata": {"labels": {naming.BUSY_LABEL: naming.BUSY_VALUE}}}

    def dry_run() -> object:
        return cluster.core.patch_namespaced_pod(busy, ns, marked, dry_run="All")

    def refusals() -> list[client.CoreV1Event]:
        items = cluster.core.list_namespaced_event(ns).items
        return [e for e in items if e.reason == "BusyMarkRefused" and e.involved_object.name == "kappa"]

    with refusing(
        cluster.api_client,
        ns,
        operation="UPDATE",
        resource=("", "v1", "pods"),
        allowed=f"!has(object.metadata.labels) || !('{naming.BUSY_LABEL}' in object.metadata.labels)",
        message=message,
        probe=dry_run,
    ):
        _sync(cluster.managers)
        reconciler(f"{ns}/kappa")
        endpoint.runners[902]["busy"] = True  # another job starts: the same cause, not news
        _sync(cluster.managers)
        reconciler(f"{ns}/kappa")

        [event] = refusals()
        assert event.type == "Warning" and event.count == 1, "told once while it lasts"
        assert "marking busy runner pods was refused" in event.message and message in event.message
        assert 'pods "kappa-*"' in event.message, "the drawn names masked"
        assert naming.BUSY_LABEL not in (cluster.pods("kappa")[busy].metadata.labels or {})

    def marked_now() -> bool:
        _sync(cluster.managers)
        return cluster.pods("kappa")[busy].metadata.labels.get(naming.BUSY_LABEL) == naming.BUSY_VALUE

    wait_for(marked_now, message="the busy mark once the policy is gone")
    assert cluster.managers.mark_refused(ns, "kappa") is None, "the refusal is over"
    reconciler(f"{ns}/kappa")
    assert [e.count for e in refusals()] == [1], "nothing more is told"


def test_scale_down_below_the_busy_count_takes_only_idle_pods_and_ends_with_the_jobs(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    ns = cluster.namespace
    pods = cluster.pool("eta", 3)
    for pod in pods:
        cluster.kubelet(pod)
    busy_1, busy_2, idle = pods
    endpoint = RunnerEndpoint(github)
    endpoint.add(701, busy_1, [f"{ns}/eta"], busy=True)
    endpoint.add(702, busy_2, [f"{ns}/eta"], busy=True)
    endpoint.add(703, idle, [f"{ns}/eta"])
    cluster.scale("eta", 1)

    _sync(cluster.managers)

    assert endpoint.deleted == [(703, 204)], "the idle runner is deregistered first, the busy ones not asked"
    assert cluster.wait_pods("eta", 2) == sorted([busy_1, busy_2])
    _sync(cluster.managers)
    assert sorted(cluster.pods("eta")) == sorted([busy_1, busy_2]), "still busy: still there"

    del endpoint.runners[701]  # the job ended: GitHub drops the ephemeral runner, its pod exits
    cluster.kubelet(busy_1, phase="Succeeded", state="terminated")
    _sync(cluster.managers)

    assert cluster.wait_pods("eta", 1) == [busy_2], "the pool is at 1"


def test_a_rollout_replaces_idle_pods_once_their_replacement_registered_and_busy_ones_after_the_job(
    cluster: Cluster, github: responses.RequestsMock
) -> None:
    ns = cluster.namespace
    busy, idle = cluster.pool("theta", 2)
    for pod in (busy, idle):
        cluster.kubelet(pod)
    endpoint = RunnerEndpoint(github)
    endpoint.add(801, busy, [f"{ns}/theta"], busy=True)
    endpoint.add(802, idle, [f"{ns}/theta"])
    pool = cluster.scale("theta", 2, runnerImage="runner:2")
    surge = cluster.add_pod(pool)  # what the reconciler creates: maxSurge 1 for 2 replicas
    cluster.kubelet(surge)

    _sync(cluster.managers)
    assert endpoint.deleted == [], "the surge pod's runner has not registered yet: nothing goes"

    endpoint.add(803, surge, [f"{ns}/theta"])
    _sync(cluster.managers)
    assert endpoint.deleted == [(802, 204)], "the idle outdated pod goes, the busy one stays"
    assert cluster.wait_pods("theta", 2) == sorted([busy, surge])

    del endpoint.runners[801]  # its job ended
    cluster.kubelet(busy, phase="Succeeded", state="terminated")
    _sync(cluster.managers)
    assert cluster.wait_pods("theta", 1) == [surge]
