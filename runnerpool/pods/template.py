"""The runner pod and the disruption budget a pool wants: pure functions of the pool.

Every pod carries the hash of the template it was made from (``TEMPLATE_HASH_LABEL``), the
way a Deployment's ReplicaSets carry ``pod-template-hash``: a pod whose label differs from
the pool's current hash is outdated and is replaced by the rollout rules
(``runnerpool.pods.scaling``, ``runnerpool.runners.retirement``).  The hash covers the whole
pod template (labels and spec, the operator's own defaults included), so an operator
upgrade that changes the pod rolls the pools too, and it is computed from canonical JSON
so that the same pool always gives the same hash, in every process.

Busy pods are marked by the runner managers (``BUSY_LABEL`` plus the cluster autoscaler's
and Karpenter's do-not-disrupt annotations) and the pool's PodDisruptionBudget selects
exactly the marked pods with ``maxUnavailable: 0``: the eviction API (``kubectl drain``,
the cluster autoscaler, Karpenter) refuses to evict a busy runner and lets an idle one go.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from runnerpool import api, children

__all__ = [
    "BUSY_ANNOTATIONS",
    "BUSY_LABEL",
    "TEMPLATE_HASH_LABEL",
    "busy_marked",
    "disruption_budget",
    "pod_template",
    "runner_pod",
    "template_hash",
]

TEMPLATE_HASH_LABEL = "runnerpool.dev/template-hash"
#: Set while GitHub lists the pod's runner as busy; the PodDisruptionBudget selects on it.
BUSY_LABEL = "runnerpool.dev/busy"
BUSY_VALUE = "true"
#: What the cluster autoscaler and Karpenter read before they drain a node, set while busy.
BUSY_ANNOTATIONS = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}
_HASH_LENGTH = 10


def pod_template(pool: api.RunnerPool, default_image: str, default_api_url: str) -> dict[str, Any]:
    """Labels and spec of the pool's runner pods, without the hash that names this template."""
    return {
        "metadata": {"labels": children.pool_labels(pool)},
        "spec": children.pod_spec(pool, default_image, children.api_url(pool, default_api_url)),
    }


def template_hash(template: dict[str, Any]) -> str:
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:_HASH_LENGTH]


def wanted_hash(pool: api.RunnerPool, default_image: str, default_api_url: str) -> str:
    return template_hash(pod_template(pool, default_image, default_api_url))


def runner_pod(pool: api.RunnerPool, default_image: str, default_api_url: str) -> dict[str, Any]:
    """A new runner pod of the pool: ``<pool>-<5 random>``, controlled by the pool."""
    template = pod_template(pool, default_image, default_api_url)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{pool.name}-",
            "namespace": pool.namespace,
            "labels": {**template["metadata"]["labels"], TEMPLATE_HASH_LABEL: template_hash(template)},
            "ownerReferences": [children.owner_reference(pool)],
        },
        "spec": template["spec"],
    }


def busy_marked(pod: Mapping[str, Any]) -> bool:
    """The pod carries the operator's busy mark (the disruption budget selects it)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(BUSY_LABEL) == BUSY_VALUE


def disruption_budget(namespace: str) -> dict[str, Any]:
    """Voluntary evictions of busy runner pods are refused; idle pods are not covered.

    One budget per namespace for every pool: with ``maxUnavailable: 0`` a budget per pool
    refuses nothing more, and a shared one costs a new pool no write.  It has no owner
    (no pool may take it along when deleted); the namespace's deletion removes it.
    """
    labels = {api.MANAGED_BY_LABEL: api.MANAGED_BY_VALUE}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": api.BUSY_DISRUPTION_BUDGET, "namespace": namespace, "labels": labels},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {**labels, BUSY_LABEL: BUSY_VALUE}}},
    }
