"""Taking over the pods of a pool that earlier operator versions ran as a Deployment: pure rules.

Before 0.2 a pool's runners were the pods of Deployment ``runnerpool-<pool>``.  Deleting
that Deployment the usual way would delete its pods, busy runners included.  Instead the
reconciler (``runnerpool.pods.step``):

1. deletes the Deployment, then its ReplicaSets, with ``propagationPolicy: Orphan``: the
   garbage collector removes their owner references from the dependents and leaves the
   pods running (a ReplicaSet being deleted no longer manages pods, and a Deployment being
   deleted no longer makes ReplicaSets);
2. adopts every pod of the pool that another controller (a ReplicaSet) or nobody controls:
   its owner references become the pool's controller reference, written with the pod's
   resourceVersion as a precondition (:func:`adoption_patch`);
3. counts the adopted pods as outdated (they have no ``TEMPLATE_HASH_LABEL``), so the
   busy-safe rollout replaces the idle ones at once, with surge, and the busy ones after
   their job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerpool import api, children

__all__ = ["adoption_patch", "controlled_by"]


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def adoption_patch(pod: Mapping[str, Any], pool: api.RunnerPool) -> dict[str, Any] | None:
    """The merge patch that makes ``pool`` the controller of ``pod``; ``None`` if it already is,
    or if the pod is being deleted (nothing to take over)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or controlled_by(pod, pool.uid):
        return None
    others = [
        ref
        for ref in meta.get("ownerReferences") or []
        if not ref.get("controller") and ref.get("uid") != pool.uid
    ]
    return {
        "metadata": {
            "ownerReferences": [*others, children.owner_reference(pool)],
            # Compare-and-swap: a pod that changed since the cache saw it is looked at again.
            "resourceVersion": meta.get("resourceVersion"),
        }
    }
