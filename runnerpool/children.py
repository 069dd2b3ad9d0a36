"""Every object a RunnerPool wants besides its runner pods, built in one place: pure functions.

The token Secret (token registration), each JIT pod's Secret (JIT registration), the
namespace's busy-runner PodDisruptionBudget, and in ``containerMode: kubernetes`` the
namespace's job-pod budget, the runner ServiceAccount and the RoleBinding that grants it
``hook_access.RUNNER_HOOKS_CLUSTER_ROLE``.
:func:`wanted` turns the pool and what the caches show (``runnerpool.observe.Observed``) into
rows for the one apply (``runnerpool.apply``); the runner pod itself is
``runnerpool.pods.template.runner_pod``.  README.md's "Who owns what" is the table of who
creates, patches and deletes each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runnerpool import api, naming
from runnerpool.apply import Child, Kind, controlled_by
from runnerpool.domain import resolve_api_url
from runnerpool.github.protocol import GitHubClient, GitHubClients
from runnerpool.hook_access import RBAC_GROUP, RUNNER_HOOKS_CLUSTER_ROLE
from runnerpool.pods import state
from runnerpool.runtime.kube import POD_DISRUPTION_BUDGETS, ROLE_BINDINGS, SECRETS, SERVICE_ACCOUNTS
from runnerpool.writes import Write

if TYPE_CHECKING:
    from runnerpool.observe import Observed

TOKEN_SECRET = Kind(SECRETS, ("metadata",), Write.SECRET_CREATED, Write.SECRET_METADATA)
#: ``data`` is compared only when the Secret is to be emptied (:func:`jit_secret`).
JIT_SECRET = Kind(SECRETS, ("data",), Write.JIT_SECRET_CREATED, Write.JIT_SECRET_EMPTIED)
ACCOUNT = Kind(
    SERVICE_ACCOUNTS, ("metadata",), Write.ACCOUNT_CREATED, Write.ACCOUNT_UPDATED, Write.ACCOUNT_DELETED
)
#: roleRef is immutable (and fixed): labels, owner and subjects are repaired.
BINDING = Kind(
    ROLE_BINDINGS,
    ("metadata", "subjects"),
    Write.ROLE_BINDING_CREATED,
    Write.ROLE_BINDING_UPDATED,
    Write.ROLE_BINDING_DELETED,
)
BUDGET = Kind(
    POD_DISRUPTION_BUDGETS,
    ("metadata", "spec"),
    Write.BUDGET_CREATED,
    Write.BUDGET_UPDATED,
    Write.BUDGET_DELETED,
    read_on_conflict=False,
)
#: The per-pool budget of an earlier version: only ever deleted.
LEGACY_BUDGET = Kind(
    POD_DISRUPTION_BUDGETS, (), Write.BUDGET_CREATED, Write.BUDGET_UPDATED, Write.LEGACY_BUDGET_DELETED
)

#: The merge patch that empties a used JIT Secret (the key stays, with no value: the kubelet
#: keeps refreshing the pod's Secret volume and would report a missing key as a failed mount).
EMPTIED: dict[str, Any] = {"data": {naming.JIT_SECRET_KEY: ""}}


def selector_labels(pool: api.RunnerPool) -> dict[str, str]:
    """The labels every child of the pool carries, and what the pool selects its pods by."""
    return {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool.name}


def selector(pool: api.RunnerPool) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(pool).items()))


def owner_reference(pool: api.RunnerPool) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": pool.name,
        "uid": pool.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(pool: api.RunnerPool, name: str) -> dict[str, Any]:
    """What every object the pool owns carries: its labels and its controller reference."""
    return {
        "name": name,
        "namespace": pool.namespace,
        "labels": selector_labels(pool),
        "ownerReferences": [owner_reference(pool)],
    }


def token_secret(pool: api.RunnerPool) -> dict[str, Any]:
    """An empty Secret: the token updater fills it, the reconciler never writes a token."""
    name = naming.token_secret_name(pool.name)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata(pool, name)}


def service_account(pool: api.RunnerPool) -> dict[str, Any]:
    name = naming.runner_account_name(pool.name)
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(pool, name)}


def role_binding(pool: api.RunnerPool) -> dict[str, Any]:
    """The pool's runner account bound, in the pool's namespace only, to the shipped hooks role."""
    name = naming.runner_account_name(pool.name)
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(pool, name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": RUNNER_HOOKS_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": pool.namespace}],
    }


#: The busy pods' budget asks for more healthy pods than any namespace has, so no eviction of a
#: busy pod is ever allowed (see :func:`disruption_budget`).
BUSY_MIN_AVAILABLE = 2**31 - 1


def disruption_budget(namespace: str) -> dict[str, Any]:
    """Voluntary evictions of busy runner pods are refused; idle pods are not covered.

    ``minAvailable`` as a number, not ``maxUnavailable: 0``: for ``maxUnavailable`` the
    disruption controller takes the expected count from the pods' controller's scale, the
    RunnerPool's ``spec.replicas``, not from the pods it selects, so a pool with more busy pods
    than ``spec.replicas`` (a scale-down while jobs run, a rollout's surge, any pool following
    demand) let ``kubectl drain`` evict the surplus busy pods. A number counts the selected pods
    themselves (the Kubernetes docs' way for pods of "an operator"); one larger than any
    namespace's pods allows no disruption. Its status then shows fewer healthy pods than
    desired, which an alert such as kube-prometheus' ``KubePdbNotEnoughHealthyPods`` reports
    (docs/busy-runners.md says how to leave this budget out of it).

    One budget per namespace for every pool: a budget per pool refuses nothing more, and a
    shared one costs a new pool no write. It has no owner (no pool may take it along); it goes
    when the namespace's last pool goes (``Reconciler``). ``maxUnavailable: None`` removes the
    field from a budget an earlier version made (a budget may not have both).
    """
    selector = {"matchLabels": {**_MANAGED, naming.BUSY_LABEL: naming.BUSY_VALUE}}
    return _refusing_budget(namespace, naming.BUSY_DISRUPTION_BUDGET, selector)


def job_pods_budget(namespace: str) -> dict[str, Any]:
    """Voluntary evictions of the pods the container hooks make for ``containerMode: kubernetes``
    jobs are refused, as :func:`disruption_budget` refuses them for busy runner pods.

    The job runs in those pods, not in the runner pod: a drain that evicted the job pod failed
    the job while the runner pod's busy mark held. The hooks make such a pod only for a job and
    delete it at the job's end, and label it ``HOOKS_JOB_POD_LABEL`` (its runner pod's name);
    their pod template cannot be given a label of ours without taking the user's own hook
    template (``ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE``) away, so the budget selects every pod
    with that label in the namespace. A job pod left behind by a runner that died mid-job is
    covered too, and holds a drain until it is deleted (docs/kubernetes-mode.md). Made by the
    namespace's kubernetes-mode pools; it goes with the namespace's last pool, as the busy one.
    """
    selector = {"matchExpressions": [{"key": naming.HOOKS_JOB_POD_LABEL, "operator": "Exists"}]}
    return _refusing_budget(namespace, naming.JOB_PODS_DISRUPTION_BUDGET, selector)


_MANAGED = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE}
#: The namespace's budgets, each built by name (the one apply makes and deletes them alike).
_NAMESPACE_BUDGETS = {
    naming.BUSY_DISRUPTION_BUDGET: disruption_budget,
    naming.JOB_PODS_DISRUPTION_BUDGET: job_pods_budget,
}


def _refusing_budget(namespace: str, name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(_MANAGED)},
        "spec": {"minAvailable": BUSY_MIN_AVAILABLE, "maxUnavailable": None, "selector": selector},
    }


def managed(obj: Mapping[str, Any]) -> bool:
    """A namespace's budget is the operator's when it carries the managed-by label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(naming.MANAGED_BY_LABEL) == naming.MANAGED_BY_VALUE)


def budget_child(namespace: str, name: str, live: dict[str, Any] | None, *, wanted: bool) -> Child:
    """One of ``naming.NAMESPACE_BUDGETS``, made (``wanted``) or deleted."""
    desired = _NAMESPACE_BUDGETS[name](namespace) if wanted else None
    return Child(BUDGET, namespace, name, desired, live, managed)


def jit_secret(pod: Mapping[str, Any], name: str, pool: str) -> dict[str, Any]:
    """An empty Secret owned by ``pod`` (it goes with the pod), cached (managed-by) and marked
    with its pool."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool},
            "ownerReferences": [owner],
        },
    }


def registered(pod: Mapping[str, Any]) -> bool:
    """The pod's register init container has ended with success: it has copied its config."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    register: Mapping[str, Any] = next(
        (c for c in statuses if c.get("name") == naming.REGISTER_CONTAINER), {}
    )
    terminated = (register.get("state") or {}).get("terminated") or {}
    return bool(terminated) and terminated.get("exitCode") == 0


def jit_filled(secret: Mapping[str, Any]) -> bool:
    return bool((secret.get("data") or {}).get(naming.JIT_SECRET_KEY))


def jit_done(pod: Mapping[str, Any]) -> bool:
    """Used, or going: no runner may be made for the pod, and a config left is one too many."""
    return registered(pod) or not state.active(pod)


def jit_child(pool: str, pod: Mapping[str, Any], name: str, live: dict[str, Any] | None) -> Child | None:
    """A JIT pod's Secret: created while the pod waits for its config, emptied once it is done
    with it (``None``: nothing to do)."""
    desired = jit_secret(pod, name, pool)
    uid = str(pod["metadata"]["uid"])

    def ours(obj: Mapping[str, Any]) -> bool:
        return controlled_by(obj, uid)

    if not jit_done(pod):
        return Child(JIT_SECRET, desired["metadata"]["namespace"], name, desired, live, ours)
    if live is None or not jit_filled(live):
        return None
    return Child(
        JIT_SECRET, live["metadata"]["namespace"], name, {**desired, **EMPTIED}, live, ours, create=False
    )


def runner_access(
    pool: api.RunnerPool,
    account: dict[str, Any] | None,
    binding: dict[str, Any] | None,
    account_in_use: bool = False,
) -> list[Child]:
    """The runner ServiceAccount and its RoleBinding (as cached: ``account``, ``binding``):
    wanted in ``containerMode: kubernetes``, and after the pool leaves that mode for as long as
    a pod of the pool that has not finished runs as the account (``account_in_use``: a busy
    one's job hooks use it, and without the binding the job fails mid-run); deleted (if the
    pool's) otherwise."""

    def ours(obj: Mapping[str, Any]) -> bool:
        return controlled_by(obj, pool.uid)

    name = naming.runner_account_name(pool.name)
    hooks = _uses_hooks(pool, account_in_use)
    return [
        Child(ACCOUNT, pool.namespace, name, service_account(pool) if hooks else None, account, ours),
        Child(BINDING, pool.namespace, name, role_binding(pool) if hooks else None, binding, ours),
    ]


def _uses_hooks(pool: api.RunnerPool, account_in_use: bool) -> bool:
    """In ``containerMode: kubernetes``, or a pod of it still runs (a job's hooks need the
    account, and its job pods the budget, to its end)."""
    return pool.spec.container_mode == api.KUBERNETES_MODE or account_in_use


def wanted(pool: api.RunnerPool, seen: Observed) -> list[Child]:
    """The pool's own children before any pod, in the order they are applied: the runner access
    (a pod naming a ServiceAccount that does not exist yet is refused), then the token Secret."""
    rows = runner_access(pool, seen.account, seen.binding, seen.account_in_use)
    if not pool.spec.registers_jit:
        name, secret = naming.token_secret_name(pool.name), token_secret(pool)
        rows.append(Child(TOKEN_SECRET, pool.namespace, name, secret, seen.token_secret, rows[0].ours))
    return rows


def budgets(pool: api.RunnerPool, seen: Observed) -> list[Child]:
    """With the pool's pods: the namespace's busy budget (and its job pods' one, while the pool's
    jobs run in pods of their own), and the per-pool one of an earlier version deleted (two
    budgets over one busy pod make the eviction API answer 500). A pool that leaves
    ``containerMode: kubernetes`` leaves the job pods' budget to the namespace's other pools."""
    legacy = naming.disruption_budget_name(pool.name)
    jobs = [naming.JOB_PODS_DISRUPTION_BUDGET] if _uses_hooks(pool, seen.account_in_use) else []
    return [
        *(
            budget_child(pool.namespace, name, seen.budgets.get(name), wanted=True)
            for name in [naming.BUSY_DISRUPTION_BUDGET, *jobs]
        ),
        Child(
            LEGACY_BUDGET,
            pool.namespace,
            legacy,
            None,
            seen.legacy_budget,
            lambda o: controlled_by(o, pool.uid),
        ),
    ]


def api_url(pool: api.RunnerPool, default: str) -> str:
    return resolve_api_url(pool.spec.github_api_url, default)


def github_client(clients: GitHubClients, pool: api.RunnerPool, default_api_url: str) -> GitHubClient:
    """The GitHub client of the pool's credential Secret and API server."""
    return clients.get(
        pool.namespace, pool.spec.credential_secret_name, api_url(pool, default_api_url), pool.spec.connection
    )
