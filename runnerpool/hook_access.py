"""The ServiceAccount, Role and RoleBinding a ``containerMode: kubernetes`` pool's runners use.

The runner container hooks create each job's pod through the Kubernetes API as the runner
pod's ServiceAccount, so a pool in that mode gets one of its own, with a Role that grants
exactly what the hooks check they hold before every command (their ``requiredPermissions``,
verified by a SelfSubjectAccessReview each: less and the hooks refuse to start) and nothing
else, bound to it in the pool's namespace.  All three are named
``naming.runner_account_name(pool)``, carry the pool's labels and are controlled by the pool,
so they go with it (garbage collection); a pool that leaves the mode has them deleted at once,
so a Role that can read the namespace's Secrets never outlives its need.  docs/kubernetes-mode.md
says what that Role lets a runner do.

Kubernetes lets a controller create a Role only with permissions it holds itself (or
``escalate``, which would let it grant anything); the operator's own RBAC therefore holds
``HOOK_RULES`` too (deploy/rbac/cluster_role.yaml says so beside them).

Reads come from the informer caches (``Reads.get_service_account`` ...); a converged pool writes
nothing: each object is created when missing and patched only when what the operator set drifted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.drift import contains
from runnerpool.pods import adoption
from runnerpool.reads import Reads
from runnerpool.runtime.kube import ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS, Kube, Resource
from runnerpool.writes import Write, Writes

__all__ = ["HOOK_RULES", "HookAccessStep", "role", "role_binding", "service_account", "wanted"]

RBAC_GROUP = "rbac.authorization.k8s.io"

#: What actions/runner-container-hooks (k8s and k8s-novolume) check they hold, resource by
#: resource: the job pod (create, read its phase and node, delete), exec into it for each step,
#: its logs, and Secrets for a job container's registry credentials and a step's environment.
HOOK_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "create", "delete"]},
)


def service_account(pool: api.RunnerPool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": children.metadata(pool, naming.runner_account_name(pool.name)),
    }


def role(pool: api.RunnerPool) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": children.metadata(pool, naming.runner_account_name(pool.name)),
        "rules": [dict(rule) for rule in HOOK_RULES],
    }


def role_binding(pool: api.RunnerPool) -> dict[str, Any]:
    name = naming.runner_account_name(pool.name)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": children.metadata(pool, name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": pool.namespace}],
    }


def wanted(pool: api.RunnerPool) -> bool:
    return pool.spec.container_mode == api.KUBERNETES_MODE


@dataclass(frozen=True)
class _Kind:
    """One of the three objects: how it is built, read from the cache, written, and recorded."""

    resource: Resource
    build: Callable[[api.RunnerPool], dict[str, Any]]
    read: Callable[[Reads, str, str], dict[str, Any] | None]
    #: The top-level fields besides metadata that the operator sets (and repairs).
    body: tuple[str, ...]
    created: Write
    updated: Write
    deleted: Write


_KINDS = (
    _Kind(
        SERVICE_ACCOUNTS,
        service_account,
        lambda r, ns, n: r.get_service_account(ns, n),
        (),
        Write.ACCOUNT_CREATED,
        Write.ACCOUNT_UPDATED,
        Write.ACCOUNT_DELETED,
    ),
    _Kind(
        ROLES,
        role,
        lambda r, ns, n: r.get_role(ns, n),
        ("rules",),
        Write.ROLE_CREATED,
        Write.ROLE_UPDATED,
        Write.ROLE_DELETED,
    ),
    _Kind(
        ROLE_BINDINGS,
        role_binding,
        lambda r, ns, n: r.get_role_binding(ns, n),
        ("subjects",),  # roleRef is immutable, and the operator's is fixed by the name
        Write.ROLE_BINDING_CREATED,
        Write.ROLE_BINDING_UPDATED,
        Write.ROLE_BINDING_DELETED,
    ),
)


class HookAccessStep:
    """The reconcile step that keeps a pool's three hook-access objects as the mode wants them."""

    def __init__(self, cache: Reads, kube: Kube) -> None:
        self._cache = cache
        self._kube = kube

    def converge(self, pool: api.RunnerPool, writes: Writes) -> None:
        """Create or repair them for a kubernetes-mode pool; delete the pool's own otherwise."""
        name = naming.runner_account_name(pool.name)
        for kind in _KINDS:
            live = kind.read(self._cache, pool.namespace, name)
            if wanted(pool):
                self._keep(pool, kind, live, writes)
            elif live is not None and adoption.controlled_by(live, pool.uid):
                self._delete(pool, kind, name, writes)

    def _keep(self, pool: api.RunnerPool, kind: _Kind, live: dict[str, Any] | None, writes: Writes) -> None:
        desired = kind.build(pool)
        if live is None:
            try:
                self._kube.create(kind.resource, pool.namespace, desired)
                writes.add(kind.created)
            except ApiException as err:
                if err.status != 409:  # the cache has not caught up with an earlier create
                    raise
            return
        fields = ("metadata", *kind.body)
        if all(contains(live.get(f), desired[f]) for f in fields):
            return
        name = desired["metadata"]["name"]
        self._kube.patch(kind.resource, pool.namespace, name, {f: desired[f] for f in fields})
        writes.add(kind.updated)

    def _delete(self, pool: api.RunnerPool, kind: _Kind, name: str, writes: Writes) -> None:
        try:
            self._kube.delete(kind.resource, pool.namespace, name)
            writes.add(kind.deleted)
        except ApiException as err:
            if err.status != 404:
                raise
