"""The reconciler's pod step: take over a legacy Deployment, keep the disruption budget, create pods.

Reads come from the informer caches and every write is skipped when the cache already
shows the result, so a converged pool costs no write here.  Creates are the only pod
writes of the reconciler; scale-down, rollout replacement and finished pods are the runner
managers' (``runnerpool.runners.retirement``), which know from GitHub which runner is busy.

A create the API server refuses is not an error of the reconcile: it is counted in the
pool's create backoff (``runnerpool.pods.create_backoff``), which also holds the refusal the
pool reports until a create goes through.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.api_errors import describe, is_namespace_terminating
from runnerpool.domain import pool_key
from runnerpool.drift import contains
from runnerpool.pods import adoption, scaling, template
from runnerpool.pods.create_backoff import CreateBackoff, CreateFailure
from runnerpool.pods.expectations import Expectations, still_pending
from runnerpool.reads import Reads
from runnerpool.runtime.kube import (
    DEPLOYMENTS,
    MERGE_PATCH,
    POD_DISRUPTION_BUDGETS,
    PODS,
    REPLICA_SETS,
    Kube,
)
from runnerpool.writes import Write, Writes

__all__ = ["Converged", "PodStep"]

log = logging.getLogger(__name__)

_ORPHAN = {"propagationPolicy": "Orphan"}


@dataclass(frozen=True)
class LivePods:
    """A pool's pods as one read of the cache showed them, and the creates expected as of
    just before that read (``runnerpool.pods.expectations``)."""

    pods: list[dict[str, Any]]
    expected: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Converged:
    """What :meth:`PodStep.converge` left: the counts after its creates, and a refusal."""

    counts: scaling.PodCounts
    #: This pass's create was refused (``None``: no create was refused in this pass).
    refused: CreateFailure | None = None
    #: Seconds until the next create may be tried (the pool is backing off).
    retry_in: float | None = None


#: The suffix the API server appends to a ``generateName`` (five of its consonants and digits).
_GENERATED_SUFFIX = "[a-z0-9]{5}"


def refusal(err: ApiException, pool: str) -> str:
    """What the API server said of a refused runner pod, without the name it drew for it.

    The name is generated before admission, so each refusal names another pod
    (``pods "p-x7k2q" is forbidden: ...``); with ``p-*`` instead, the same cause reads the same
    every time: one Event counting the attempts, one condition message, no status write.
    """
    prefix = naming.runner_pod_prefix(pool)
    return re.sub(rf'"{re.escape(prefix)}{_GENERATED_SUFFIX}"', f'"{prefix}*"', describe(err))


def _controlled_by_replicaset(pod: dict[str, Any]) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("kind") == "ReplicaSet" for ref in refs)


def _ignore(err: ApiException, *codes: int) -> None:
    if err.status not in codes:
        raise err


class PodStep:
    def __init__(
        self,
        cache: Reads,
        api_client: client.ApiClient,
        expectations: Expectations,
        *,
        default_image: str,
        default_api_url: str,
        backoff: CreateBackoff | None = None,
    ) -> None:
        self._cache = cache
        self._kube = Kube(api_client)
        self._expectations = expectations
        self._backoff = backoff or CreateBackoff()
        self._image = default_image
        self._api_url = default_api_url

    def wanted_hash(self, pool: api.RunnerPool) -> str:
        return template.wanted_hash(pool, self._image, self._api_url)

    # ------------------------------------------------------------------ converge

    def read(self, pool: api.RunnerPool) -> LivePods:
        """The pool's pods from the cache, once per pass: the creates still expected first."""
        expected = self._expectations.expected(pool_key(pool.namespace, pool.name))
        return LivePods(self._cache.list_pods(pool.namespace, pool.name), expected)

    def counts(
        self, pool: api.RunnerPool, replicas: int, live: LivePods, *, with_creates: bool = False
    ) -> scaling.PodCounts:
        """The pool's pods as they are (``live``: this pass's :meth:`read`), without any write;
        ``with_creates``: as they will be once :meth:`converge` made the missing ones (none
        while the pool backs off from a refused create)."""
        counts = self._count(pool, live, replicas)
        if not with_creates or self._backing_off(pool) is not None:
            return counts
        return _after(counts, scaling.creates(counts))

    def create_failure(self, pool: api.RunnerPool) -> CreateFailure | None:
        """The refusal the pool reports: its current template's last create was refused."""
        return self._backoff.failure(pool_key(pool.namespace, pool.name), self.wanted_hash(pool))

    def _count(self, pool: api.RunnerPool, live: LivePods, replicas: int) -> scaling.PodCounts:
        names = [str(p["metadata"].get("name")) for p in live.pods]
        return scaling.count(live.pods, replicas, self.wanted_hash(pool), still_pending(live.expected, names))

    def converge(self, pool: api.RunnerPool, writes: Writes, replicas: int, live: LivePods) -> Converged:
        """Take over, keep the budget, create what is missing (unless backing off from a refusal).

        ``replicas``: the count decided for now (``spec.replicas`` unless the pool follows demand);
        ``live``: this pass's :meth:`read`.
        """
        self._take_over(pool, live.pods, writes)
        self._ensure_budget(pool, writes)
        key = pool_key(pool.namespace, pool.name)
        counts = self._count(pool, live, replicas)
        wanted = scaling.creates(counts)
        if not wanted:
            self._backoff.forget(key)  # nothing to create: no refusal left to report
            return Converged(counts)
        wait = self._backing_off(pool)
        if wait is not None:
            return Converged(counts, retry_in=wait)
        for made in range(wanted):
            try:
                self._create_pod(pool, key)
            except ApiException as err:
                if is_namespace_terminating(err):
                    raise  # the reconcile ends quietly: the pool is being finalized
                return self._refused(pool, counts, made, err)
            writes.add(Write.POD_CREATED)
        self._backoff.succeeded(key)
        return Converged(_after(counts, wanted))

    def _backing_off(self, pool: api.RunnerPool) -> float | None:
        return self._backoff.wait(pool_key(pool.namespace, pool.name), self.wanted_hash(pool))

    def _refused(
        self, pool: api.RunnerPool, counts: scaling.PodCounts, made: int, err: ApiException
    ) -> Converged:
        key = pool_key(pool.namespace, pool.name)
        if made:
            self._backoff.succeeded(key)  # the backoff counts refusals in a row
        failure = self._backoff.failed(key, self.wanted_hash(pool), refusal(err, pool.name))
        log.warning(
            "pool %s: creating a runner pod failed (%d in a row, next attempt in %.0f s): %s",
            key,
            failure.failures,
            failure.delay,
            failure.cause,
        )
        return Converged(_after(counts, made), refused=failure, retry_in=failure.delay)

    def forget(self, namespace: str, name: str) -> None:
        """A finalized or gone pool's create expectations and backoff go with it."""
        key = pool_key(namespace, name)
        self._expectations.forget(key)
        self._backoff.forget(key)

    def _create_pod(self, pool: api.RunnerPool, key: str) -> None:
        body = template.runner_pod(pool, self._image, self._api_url)
        name = str(self._kube.create(PODS, pool.namespace, body)["metadata"]["name"])
        self._expectations.created(key, name)

    def _ensure_budget(self, pool: api.RunnerPool, writes: Writes) -> None:
        self._drop_legacy_budget(pool, writes)
        desired = template.disruption_budget(pool.namespace)
        name = desired["metadata"]["name"]
        live = self._cache.get_disruption_budget(pool.namespace, name)
        if live is None:
            try:
                self._kube.create(POD_DISRUPTION_BUDGETS, pool.namespace, desired)
                writes.add(Write.BUDGET_CREATED)
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
        writes.add(Write.BUDGET_UPDATED)

    def release_unused_budget(self, namespace: str, writes: Writes) -> None:
        """Delete the namespace's busy budget once no pool of the namespace is left.

        It has no owner (no one pool may take it along), so without this an uninstall that
        deleted every pool would leave one budget behind in each of their namespaces. Asked
        when a pool is gone from the cache, so the last pool to go sees none left; a pool
        made meanwhile creates it again on its first pass.
        """
        if self._cache.pools_in(namespace):
            return
        if self._cache.get_disruption_budget(namespace, naming.BUSY_DISRUPTION_BUDGET) is None:
            return
        try:
            self._kube.delete(POD_DISRUPTION_BUDGETS, namespace, naming.BUSY_DISRUPTION_BUDGET)
            writes.add(Write.BUDGET_DELETED)
        except ApiException as err:
            _ignore(err, 404)

    def _drop_legacy_budget(self, pool: api.RunnerPool, writes: Writes) -> None:
        """Earlier versions kept a budget per pool. Left beside the namespace's, a busy pod
        would match two budgets, and the eviction API answers that with a 500, not the 429
        that makes ``kubectl drain`` wait."""
        legacy = self._cache.get_disruption_budget(pool.namespace, naming.disruption_budget_name(pool.name))
        if legacy is None or not adoption.controlled_by(legacy, pool.uid):
            return
        try:
            self._kube.delete(POD_DISRUPTION_BUDGETS, pool.namespace, legacy["metadata"]["name"])
            writes.add(Write.LEGACY_BUDGET_DELETED)
        except ApiException as err:
            _ignore(err, 404)

    # ------------------------------------------------------------------ take-over

    def _take_over(self, pool: api.RunnerPool, pods: list[dict[str, Any]], writes: Writes) -> None:
        """See ``runnerpool.pods.adoption``: orphan the legacy Deployment and ReplicaSets, adopt."""
        namespace = pool.namespace
        deployment = self._cache.get_deployment(namespace, naming.deployment_name(pool.name))
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
            writes.add(Write.POD_ADOPTED)
        if adopted:
            log.info("adopted %d runner pod(s) of pool %s/%s", adopted, namespace, pool.name)

    def _orphan_legacy(self, pool: api.RunnerPool, deployment: dict[str, Any] | None, writes: Writes) -> None:
        namespace = pool.namespace
        if deployment is not None and not deployment["metadata"].get("deletionTimestamp"):
            try:
                self._kube.delete(DEPLOYMENTS, namespace, deployment["metadata"]["name"], _ORPHAN)
                writes.add(Write.DEPLOYMENT_ORPHANED)
            except ApiException as err:
                _ignore(err, 404)
        # After the Deployment: while it lives, its controller would make a new ReplicaSet.
        replicasets = self._kube.list_items(REPLICA_SETS, namespace, label_selector=children.selector(pool))
        for rs in replicasets:
            if rs["metadata"].get("deletionTimestamp"):
                continue
            try:
                self._kube.delete(REPLICA_SETS, namespace, rs["metadata"]["name"], _ORPHAN)
                writes.add(Write.REPLICASET_ORPHANED)
            except ApiException as err:
                _ignore(err, 404)

    # ------------------------------------------------------------------ deletion

    def delete_legacy_deployment(self, pool: api.RunnerPool, writes: Writes) -> None:
        """For a deleted pool: the Deployment an earlier version ran it as (its pods go with
        it, by garbage collection; the runner managers delete the pool's own pods)."""
        deployment = self._cache.get_deployment(pool.namespace, naming.deployment_name(pool.name))
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return
        try:
            self._kube.delete(
                DEPLOYMENTS,
                pool.namespace,
                deployment["metadata"]["name"],
                {"propagationPolicy": "Background"},
            )
            writes.add(Write.DEPLOYMENT_DELETED)
        except ApiException as err:
            _ignore(err, 404)


def _after(counts: scaling.PodCounts, created: int) -> scaling.PodCounts:
    """``counts`` once ``created`` pods with the current template exist."""
    if not created:
        return counts
    return replace(counts, active=counts.active + created, updated=counts.updated + created)
