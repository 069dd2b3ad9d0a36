"""The one apply of a pool's children: create when absent, patch what drifted, delete what is unwanted.

Controller-runtime's ``CreateOrPatch`` as a table: each :class:`Child` says what the pool
wants (``desired``; ``None``: it should not exist), what the informer cache shows (``live``),
which kind it is and who controls it.  :func:`apply` compares them and makes at most one write:

* absent and wanted: create it (a 409 is a cache that lags or an object whose labels were
  removed, so no event would ever bring it: it is read by name and compared like a cached one);
* present, wanted, controlled by its owner: patch exactly the fields the operator sets
  (``Kind.fields``) when one of them drifted (``runnerpool.drift.contains``), nothing otherwise;
* present, unwanted, controlled by its owner: delete it;
* present and **not** controlled by its owner: never patched, never deleted; the answer says
  so (:data:`FOREIGN`) and the reconciler tells the user (``Reason.CHILD_NOT_OWNED``).

Pods are not children in this sense: the reconciler only creates them (counted, not listed)
and the runner managers delete them, busy-safe (``runnerpool.runners.retirement``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from runnerpool.drift import contains
from runnerpool.runtime.kube import MERGE_PATCH, Kube, Resource
from runnerpool.writes import Write, Writes

__all__ = ["FOREIGN", "Child", "Kind", "apply", "controlled_by"]


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """``obj`` names ``uid`` as its controller (``ownerReferences[].controller``)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


@dataclass(frozen=True)
class Kind:
    """How one kind of child is written and what its writes are called in the pass's log."""

    resource: Resource
    #: The fields the operator sets, and compares and repairs (never the data the
    #: token scheduler fills, never fields the API server owns).
    fields: tuple[str, ...]
    created: Write
    updated: Write
    deleted: Write | None = None
    #: Whether a create refused with 409 reads the object by name (``get``); without, the
    #: object's own event brings the pool back (the namespace's budget: no ``get`` is held).
    read_on_conflict: bool = True


@dataclass(frozen=True)
class Child:
    """One object a pool wants (or wants gone), as built and as cached."""

    kind: Kind
    namespace: str
    name: str
    desired: dict[str, Any] | None
    live: dict[str, Any] | None
    #: Whether an existing object is this pool's to change (its controller is the pool, or
    #: the pod a JIT Secret belongs to, or the managed-by label of the namespace's budget).
    ours: Callable[[Mapping[str, Any]], bool]
    #: ``False``: only an existing object is repaired (a JIT Secret of a pod that is going).
    create: bool = True

    @property
    def key(self) -> str:
        """Which object this is, in a log or a pool's memory: ``plural namespace/name``."""
        return f"{self.kind.resource.plural} {self.namespace}/{self.name}"


#: :func:`apply`'s answer for an object of the same name the pool does not control.
FOREIGN: dict[str, Any] = {}


def apply(kube: Kube, child: Child, writes: Writes) -> dict[str, Any] | None:
    """Make ``child`` as desired; returns the object as it now is (``None``: absent), or
    :data:`FOREIGN` (compare with ``is``) when a same-named object is not the pool's."""
    live = child.live
    if live is None and child.desired is not None and child.create:
        live = _create(kube, child, writes)
    if live is None:
        return None
    if not child.ours(live):
        return FOREIGN
    if child.desired is None:
        _delete(kube, child, writes)
        return None
    patch = {f: child.desired[f] for f in child.kind.fields if f in child.desired}
    if all(contains(live.get(f), value) for f, value in patch.items()):
        return live
    try:
        live = kube.patch(child.kind.resource, child.namespace, child.name, patch, patch_type=MERGE_PATCH)
    except ApiException as err:
        if err.status != 404:
            raise
        return None  # gone since (a JIT Secret with its pod): its own event brings the pool back
    writes.add(child.kind.updated)
    return live


def _create(kube: Kube, child: Child, writes: Writes) -> dict[str, Any] | None:
    assert child.desired is not None
    try:
        made = kube.create(child.kind.resource, child.namespace, child.desired)
    except ApiException as err:
        if err.status != 409:
            raise
        return _read(kube, child) if child.kind.read_on_conflict else None
    writes.add(child.kind.created)
    return made


def _read(kube: Kube, child: Child) -> dict[str, Any] | None:
    """By name: what the cache does not show (it lags, or the object lost the label it selects by)."""
    try:
        return kube.get(child.kind.resource, child.namespace, child.name)
    except ApiException as err:
        if err.status != 404:
            raise
        return None  # deleted since: its own event brings the pool back


def _delete(kube: Kube, child: Child, writes: Writes) -> None:
    if child.kind.deleted is None:
        return
    try:
        kube.delete(child.kind.resource, child.namespace, child.name)
    except ApiException as err:
        if err.status != 404:
            raise
        return
    writes.add(child.kind.deleted)
