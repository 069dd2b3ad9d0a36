"""The reconciler's pod step: take over a legacy Deployment, keep the disruption budget, create pods.

Reads come from the informer caches and every write is skipped when the cache already
shows the result, so a converged pool costs no write here.  Creates are the only pod
writes of the reconciler; scale-down, rollout replacement and finished pods are the runner
managers' (``runnerpool.runners.retirement``), which know from GitHub which runner is busy.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, children
from runnerpool.domain import pool_key
from runnerpool.drift import contains
from runnerpool.pods import adoption, scaling, template
from runnerpool.pods.expectations import Expectations
from runnerpool.runtime.kube import (
    DEPLOYMENTS,
    MERGE_PATCH,
    POD_DISRUPTION_BUDGETS,
    PODS,
    REPLICA_SETS,
    Kube,
)

__all__ = ["PodCache", "PodStep"]

log = logging.getLogger(__name__)

_ORPHAN = {"propagationPolicy": "Orphan"}


class PodCache(Protocol):
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_disruption_budget(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]: ...


def _controlled_by_replicaset(pod: dict[str, Any]) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("kind") == "ReplicaSet" for ref in refs)


def _ignore(err: ApiException, *codes: int) -> None:
    if err.status not in codes:
        raise err


class PodStep:
    def __init__(
        self,
        cache: PodCache,
        api_client: client.ApiClient,
        expectations: Expectations,
        *,
        default_image: str,
        default_api_url: str,
    ) -> None:
        self._cache = cache
        self._kube = Kube(api_client)
        self._expectations = expectations
        self._image = default_image
        self._api_url = default_api_url

    def wanted_hash(self, pool: api.RunnerPool) -> str:
        return template.wanted_hash(pool, self._image, self._api_url)

    # ------------------------------------------------------------------ converge

    def counts(
        self, pool: api.RunnerPool, replicas: int | None = None, pods: list[dict[str, Any]] | None = None
    ) -> scaling.PodCounts:
        """The pool's pods as they are, without any write (a pool waiting for its token).

        ``pods``: the pool's pods from the cache when the caller has them already.
        """
        return self._count(pool, self._pods_of(pool) if pods is None else pods, replicas)

    def _pods_of(self, pool: api.RunnerPool) -> list[dict[str, Any]]:
        return self._cache.list_pods(pool.namespace, pool.name)

    def _count(
        self, pool: api.RunnerPool, pods: list[dict[str, Any]], replicas: int | None
    ) -> scaling.PodCounts:
        names = [str(p["metadata"].get("name")) for p in pods]
        pending = self._expectations.pending(pool_key(pool.namespace, pool.name), names)
        desired = pool.spec.replicas if replicas is None else replicas
        return scaling.count(pods, desired, self.wanted_hash(pool), pending)

    def converge(
        self,
        pool: api.RunnerPool,
        writes: list[str],
        replicas: int | None = None,
        pods: list[dict[str, Any]] | None = None,
    ) -> scaling.PodCounts:
        """Take over, keep the budget, create what is missing; returns the counts after the creates.

        ``replicas``: the count decided for now (``spec.replicas`` unless the pool follows demand);
        ``pods``: as for ``counts``.
        """
        pods = self._pods_of(pool) if pods is None else pods
        self._take_over(pool, pods, writes)
        self._ensure_budget(pool, writes)
        key = pool_key(pool.namespace, pool.name)
        counts = self._count(pool, pods, replicas)
        wanted = scaling.creates(counts)
        created = 0
        for _ in range(wanted):
            self._create_pod(pool, key)
            created += 1
            writes.append("create pod")
        if not created:
            return counts
        return replace(counts, active=counts.active + created, updated=counts.updated + created)

    def _create_pod(self, pool: api.RunnerPool, key: str) -> None:
        body = template.runner_pod(pool, self._image, self._api_url)
        name = str(self._kube.create(PODS, pool.namespace, body)["metadata"]["name"])
        self._expectations.created(key, name)

    def _ensure_budget(self, pool: api.RunnerPool, writes: list[str]) -> None:
        self._drop_legacy_budget(pool, writes)
        desired = template.disruption_budget(pool.namespace)
        name = desired["metadata"]["name"]
        live = self._cache.get_disruption_budget(pool.namespace, name)
        if live is None:
            try:
                self._kube.create(POD_DISRUPTION_BUDGETS, pool.namespace, desired)
                writes.append("create poddisruptionbudget")
            except ApiException as err:
                _ignore(err, 409)  # the cache has not caught up with an earlier create
            return
        if contains(live, desired):
            return
        self._kube.patch(
            POD_DISRUPTION_BUDGETS,
            pool.namespace,
            name,
            {
                "metadata": {"labels": desired["metadata"]["labels"]},
                "spec": desired["spec"],
            },
            patch_type=MERGE_PATCH,
        )
        writes.append("update poddisruptionbudget")

    def _drop_legacy_budget(self, pool: api.RunnerPool, writes: list[str]) -> None:
        """Earlier versions kept a budget per pool. Left beside the namespace's, a busy pod
        would match two budgets, and the eviction API answers that with a 500, not the 429
        that makes ``kubectl drain`` wait."""
        legacy = self._cache.get_disruption_budget(pool.namespace, api.disruption_budget_name(pool.name))
        if legacy is None or not adoption.controlled_by(legacy, pool.uid):
            return
        try:
            self._kube.delete(POD_DISRUPTION_BUDGETS, pool.namespace, legacy["metadata"]["name"])
            writes.append("delete poddisruptionbudget (per pool, of an earlier version)")
        except ApiException as err:
            _ignore(err, 404)

    # ------------------------------------------------------------------ take-over

    def _take_over(self, pool: api.RunnerPool, pods: list[dict[str, Any]], writes: list[str]) -> None:
        """See ``runnerpool.pods.adoption``: orphan the legacy Deployment and ReplicaSets, adopt."""
        namespace = pool.namespace
        deployment = self._cache.get_deployment(namespace, api.deployment_name(pool.name))
        if deployment is not None or any(_controlled_by_replicaset(p) for p in pods):
            self._orphan_legacy(pool, deployment, writes)
        adopted = 0
        for pod in pods:
            patch = adoption.adoption_patch(pod, pool)
            if patch is None:
                continue
            try:
                # A JSON merge patch replaces the list: a strategic one would keep the
                # ReplicaSet's controller reference beside the pool's, which is invalid.
                self._kube.patch(PODS, namespace, pod["metadata"]["name"], patch, patch_type=MERGE_PATCH)
            except ApiException as err:
                _ignore(err, 404, 409)  # gone, or changed: its event brings the pool back
                continue
            adopted += 1
            writes.append("adopt pod")
        if adopted:
            log.info("adopted %d runner pod(s) of pool %s/%s", adopted, namespace, pool.name)

    def _orphan_legacy(
        self, pool: api.RunnerPool, deployment: dict[str, Any] | None, writes: list[str]
    ) -> None:
        namespace = pool.namespace
        if deployment is not None and not deployment["metadata"].get("deletionTimestamp"):
            try:
                self._kube.delete(DEPLOYMENTS, namespace, deployment["metadata"]["name"], _ORPHAN)
                writes.append("delete deployment (orphan its pods)")
            except ApiException as err:
                _ignore(err, 404)
        # After the Deployment: while it lives, its controller would make a new ReplicaSet.
        replicasets = self._kube.list_items(REPLICA_SETS, namespace, label_selector=children.selector(pool))
        for rs in replicasets:
            if rs["metadata"].get("deletionTimestamp"):
                continue
            try:
                self._kube.delete(REPLICA_SETS, namespace, rs["metadata"]["name"], _ORPHAN)
                writes.append("delete replicaset (orphan its pods)")
            except ApiException as err:
                _ignore(err, 404)

    # ------------------------------------------------------------------ deletion

    def delete_all(self, pool: api.RunnerPool, writes: list[str]) -> bool:
        """For a deleted pool whose runners are all deregistered: delete its pods (and a legacy
        Deployment); ``True`` while some remain."""
        namespace = pool.namespace
        deployment = self._cache.get_deployment(namespace, api.deployment_name(pool.name))
        if deployment is not None and not deployment["metadata"].get("deletionTimestamp"):
            try:
                self._kube.delete(
                    DEPLOYMENTS,
                    namespace,
                    deployment["metadata"]["name"],
                    {"propagationPolicy": "Background"},
                )
                writes.append("delete deployment")
            except ApiException as err:
                _ignore(err, 404)
        # The pod cache can only lag behind deletions, so "none left" is never early.
        pods = self._cache.list_pods(namespace, pool.name)
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            try:
                self._kube.delete(PODS, namespace, meta["name"], {"preconditions": {"uid": meta["uid"]}})
                writes.append("delete pod")
            except ApiException as err:
                _ignore(err, 404, 409)
        self._expectations.forget(f"{namespace}/{pool.name}")
        return bool(pods)
