"""What the RunnerPool controller watches, how each event maps to pool keys, and the reads.

The table (:func:`pool_watches`) is the controller's ``For``/``Owns``/``Watches``:

* **RunnerPools** (``For``): an event enqueues the pool itself, unless it is the echo of
  the reconciler's own write (``runnerpool.echoes``).  Each pool is parsed once
  per resourceVersion (``runnerpool.reads.ParsedPool``) and indexed by the scope it
  autoscales for (GitHub host + repository or organization, ``demand.matching``), by the
  credential Secret it names and by its own webhook Secret: a pool whose webhook key came,
  went or changed also enqueues the pools sharing that Secret's URL, whose keys tried there
  may have changed with it (``demand.verification.MAX_KEYS_PER_ROUTE``).
* **Secrets**, two informers per namespace, each filtered by a label on the API server, so a
  Secret that is not the operator's is never sent, let alone cached (20,000 Secrets of
  4 KiB cost an operator that cached them all 151 MiB: ``bench/foreign_secrets.py``).
  Only in namespaces where the operator may read Secrets: cluster-wide it may not
  (deploy/rbac/cluster_role.yaml holds no Secret verb, since listing Secrets everywhere is
  reading every Secret of the cluster), so in cluster mode they are ``per_namespace`` watches,
  started by ``runnerpool.namespace_access`` once the platform team enabled a namespace and
  stopped when it no longer is. Why one pair per enabled namespace rather than another design:
  each is a label-selected list and watch of that namespace alone, which is what a RoleBinding
  there can grant; the alternatives (reads by name on every pass, or a cluster-wide Secret
  list) cost an API call per pool and pass, or the very permission this takes away. Before a
  namespace is enabled a read of its Secrets finds nothing, and no pool there gets that far.
  The operator's own (``MANAGED_BY_SELECTOR``: token Secrets) enqueue their pool.  Credential
  Secrets are the user's and carry the operator's label (``naming.CREDENTIAL_SELECTOR``)
  only while a pool needs them: ``runnerpool.credential_protection`` puts it on with the
  finalizer, after a first read by name (``runnerpool.secret_reads``), and takes both off
  with the last pool.  One of them enqueues the pools whose ``spec.credentialSecretName``
  names it (the index), which is how a rotated credential reaches its pools; one that
  leaves the selection (deleted, or its label removed by hand) does the same, and their
  reconcile reads it by name and labels it again.  Two informers, because a label selector
  cannot say "this label or that one".
* **Pods** (``Owns``): only the operator's (``MANAGED_BY_SELECTOR``); an event enqueues the
  controlling pool (:func:`owner_key`), and on an update that changed the owner the
  previous one too.  Pods are indexed by ``namespace/pool`` label: the reconciler and the
  runner managers read one pool's pods on every pass, and a scan of every cached pod per
  pool would make each round cost O(pools x pods).  Every pod event is also reported to
  ``on_pod`` (the reconciler's create expectations).  Per enabled namespace, as Secrets are
  (``per_namespace``): a pod's spec holds whatever its authors put in its environment and
  arguments, often credentials, so listing pods everywhere is reading them, and the
  operator needs only its own, in the namespaces it runs pools in.  A pool's deletion asks
  for its namespace first too (``Gate.on_deletion``): a leader that starts with a pool
  already being deleted has no informer there until it asks, and a drain that read "no pod"
  from a namespace not watched would let the pool go with its runners still running.
* **PodDisruptionBudgets**: the namespace's shared budgets (busy runner pods, kubernetes-mode
  job pods) have no owner; a new spec (a hand edit) or a deletion brings the namespace's
  pools back, whose next reconcile repairs it.  A creation and a status (the disruption
  controller's counts) do not.
  A per-pool budget of an earlier version maps to its owner.
* **ServiceAccounts, RoleBindings** (``Owns``, only the operator's): the runner account of a
  ``containerMode: kubernetes`` pool and its binding to the shipped hooks ClusterRole
  (``runnerpool.hook_access``); an edit or a deletion brings the pool back, which repairs it.
* **Namespaces** (cluster-scoped; all, or each watched one by name): so the reconciler knows
  up front that a namespace is being deleted: nothing new can be created in it, and its
  pools go straight to deregistration.  A namespace that starts terminating enqueues its
  pools at once.

:class:`PoolCache` is the informer set built from this table, with the named reads of
``runnerpool.reads.Reads``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.informer import DELETED

from runnerpool import api
from runnerpool.credential_protection import credential_secret_name
from runnerpool.demand.matching import pool_scope_keys
from runnerpool.domain import DEFAULT_API_URL, pool_key
from runnerpool.naming import CREDENTIAL_SELECTOR, MANAGED_BY_SELECTOR, POOL_LABEL
from runnerpool.reads import ParsedPool, PodsNotCachedError, parse_pool
from runnerpool.runtime.informers import (
    Event,
    InformerSet,
    MapToKeys,
    NamespaceNotWatchedError,
    Watch,
    object_key,
)
from runnerpool.runtime.kube import (
    NAMESPACES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    ROLE_BINDINGS,
    RUNNER_POOLS,
    SECRETS,
    SERVICE_ACCOUNTS,
)
from runnerpool.runtime.store import NAMESPACE

__all__ = [
    "PoolCache",
    "owner_key",
    "pod_pool",
    "pool_watches",
]

# The table's entry names, which the reads ask for (and ``runnerpool_cache_objects`` shows).
POOLS, SECRETS_, CREDENTIALS, PODS_, BUDGETS, NAMESPACES_ = (
    "RunnerPools",
    "Secrets",
    "CredentialSecrets",
    "Pods",
    "PodDisruptionBudgets",
    "Namespaces",
)
ACCOUNTS, ROLE_BINDINGS_ = "ServiceAccounts", "RoleBindings"
# Index names: pods by ``namespace/pool``; pools by autoscaling scope (the pools that follow the
# demand deliveries and polling report: not scale sets) and by credential Secret.
BY_POOL, BY_SCOPE, BY_CREDENTIAL = "pool", "autoscaling-scope", "credential-secret"
BY_WEBHOOK_SECRET = "webhook-secret"
#: Pools with ``spec.scaleSet`` (being deleted too), all under ``ANY_SCOPE``.
BY_SCALE_SET = "scale-set"
#: Under ``BY_SCOPE``, every autoscaling pool is also found under this value.
ANY_SCOPE = "*"

Obj = dict[str, Any]


def owner_key(obj: Mapping[str, Any]) -> str | None:
    """The ``ns/name`` of the RunnerPool that controls ``obj``, if any.

    The controller ownerReference is authoritative (it is what garbage
    collection follows); the pool label is the fallback for objects created
    before their owner's uid was known or whose reference was stripped.
    """
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    for ref in meta.get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if (
            ref.get("controller")
            and ref.get("kind") == api.KIND
            and api_version.partition("/")[0] == api.GROUP
        ):
            return pool_key(namespace, ref["name"])
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return pool_key(namespace, pool) if pool else None


def pod_pool(obj: Mapping[str, Any]) -> str | None:
    """``namespace/pool`` by the pool label: the runner pods of one pool."""
    meta = obj.get("metadata") or {}
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return f"{meta.get('namespace') or ''}/{pool}" if pool else None


# -- event -> pool keys ----------------------------------------------------------------------


def _the_pool(echo: Callable[[Event], bool] | None) -> MapToKeys:
    def keys(event: Event, informers: InformerSet) -> list[str]:
        if echo is not None and echo(event):
            return []  # the reconciler's own write: the pass that made it saw all it holds
        key = object_key(event.obj)  # every other change means "look at this pool again"
        before = _webhook_secret(event.old)
        after = None if event.type == DELETED else _webhook_secret(event.obj)
        if before == after:
            return [key]
        # A key of a webhook Secret came or went: which keys its URL tries may have changed for
        # the pools sharing it (``demand.verification.MAX_KEYS_PER_ROUTE``), and so their condition.
        namespace = (event.obj.get("metadata") or {}).get("namespace") or ""
        names = {ref[0] for ref in (before, after) if ref is not None}
        return [
            key,
            *(
                k
                for name in sorted(names)
                for k in informers.keys_by(POOLS, namespace, BY_WEBHOOK_SECRET, name)
            ),
        ]

    return keys


def _webhook_secret(raw: Obj | None) -> tuple[str, str] | None:
    """The (Secret, key) a pool trusts for its webhook deliveries, read from the raw object."""
    scaling = ((raw or {}).get("spec") or {}).get("autoscaling")
    ref = scaling.get("webhookSecretRef") if isinstance(scaling, dict) else None
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    return str(ref["name"]), str(ref.get("key") or "")


def _owners(event: Event, informers: InformerSet) -> list[str]:
    """The pool that controls the object, and the one that did before this change."""
    return [key for key in (owner_key(event.old or {}), owner_key(event.obj)) if key is not None]


def _namespace_pools(informers: InformerSet, namespace: str) -> list[str]:
    return informers.keys_by(POOLS, namespace, NAMESPACE, namespace)


def _secret(event: Event, informers: InformerSet) -> list[str]:
    owners = _owners(event, informers)
    if owners:
        return owners
    meta = event.obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    try:
        return informers.keys_by(POOLS, namespace, BY_CREDENTIAL, str(meta.get("name") or ""))
    except NamespaceNotWatchedError:
        return []


def _budget(event: Event, informers: InformerSet) -> list[str]:
    if owner_key(event.obj) is not None:  # a per-pool budget of an earlier version
        return _owners(event, informers)
    meta = event.obj.get("metadata") or {}
    before = (event.old or {}).get("metadata") or {}
    changed = event.old is not None and before.get("generation") != meta.get("generation")
    if event.type == DELETED or changed:
        return _namespace_pools(informers, meta.get("namespace") or "")
    return []


def _namespace(event: Event, informers: InformerSet) -> list[str]:
    meta = event.obj.get("metadata") or {}
    if event.type == DELETED or not meta.get("deletionTimestamp"):
        return []
    return _namespace_pools(informers, meta.get("name") or "")


# -- the pools' indexes ----------------------------------------------------------------------


def _scope_index(default_api_url: str) -> Callable[[ParsedPool], list[str]]:
    def keys(parsed: ParsedPool) -> list[str]:
        pool = parsed.model
        if pool is None or pool.spec.autoscaling is None or pool.deleting:
            return []
        if pool.spec.scale_set is not None:
            return []  # its jobs come from its scale set's session, not deliveries or polling
        return [ANY_SCOPE, *pool_scope_keys(pool, default_api_url)]

    return keys


def _scale_set_index(parsed: ParsedPool) -> list[str]:
    pool = parsed.model
    return [ANY_SCOPE] if pool is not None and pool.spec.scale_set is not None else []


def _credential_index(parsed: ParsedPool) -> list[str]:
    return [credential_secret_name(parsed.raw)]


def _webhook_secret_index(parsed: ParsedPool) -> list[str]:
    ref = _webhook_secret(parsed.raw)
    return [ref[0]] if ref is not None else []


def _pod_index(obj: Obj) -> list[str]:
    pool = pod_pool(obj)
    return [pool] if pool is not None else []


def _observer(on_pod: Callable[[str, str], None] | None) -> Callable[[Event], None] | None:
    if on_pod is None:
        return None

    def observe(event: Event) -> None:
        pool = pod_pool(event.obj)
        if pool is not None:
            on_pod(pool, str((event.obj.get("metadata") or {}).get("name") or ""))

    return observe


def pool_watches(
    *,
    default_api_url: str = DEFAULT_API_URL,
    on_pod: Callable[[str, str], None] | None = None,
    echo: Callable[[Event], bool] | None = None,
) -> list[Watch]:
    """The RunnerPool controller's table of watches (the module docstring says why each);
    ``echo`` tells the events of the reconciler's own pool writes (``runnerpool.echoes``)."""
    return [
        Watch(
            POOLS,
            RUNNER_POOLS,
            _the_pool(echo),
            decode=parse_pool,
            indexes={
                BY_SCOPE: _scope_index(default_api_url),
                BY_CREDENTIAL: _credential_index,
                BY_SCALE_SET: _scale_set_index,
                BY_WEBHOOK_SECRET: _webhook_secret_index,
            },
        ),
        Watch(SECRETS_, SECRETS, _secret, label_selector=MANAGED_BY_SELECTOR, per_namespace=True),
        Watch(CREDENTIALS, SECRETS, _secret, label_selector=CREDENTIAL_SELECTOR, per_namespace=True),
        Watch(
            PODS_,
            PODS,
            _owners,
            label_selector=MANAGED_BY_SELECTOR,
            indexes={BY_POOL: _pod_index},
            observe=_observer(on_pod),
            per_namespace=True,
        ),
        Watch(BUDGETS, POD_DISRUPTION_BUDGETS, _budget, label_selector=MANAGED_BY_SELECTOR),
        Watch(ACCOUNTS, SERVICE_ACCOUNTS, _owners, label_selector=MANAGED_BY_SELECTOR),
        Watch(ROLE_BINDINGS_, ROLE_BINDINGS, _owners, label_selector=MANAGED_BY_SELECTOR),
        Watch(NAMESPACES_, NAMESPACES, _namespace, field_selector_in=lambda ns: f"metadata.name={ns}"),
    ]


class PoolCache(InformerSet):
    """The informers of :func:`pool_watches` with the reads of ``runnerpool.reads.Reads``.

    ``get_*``/``list_*`` answer copies; ``pool``, ``pools_in`` and ``autoscaling_pools``
    the shared parsed pools.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        enqueue: Callable[[str], None],
        namespaces: Sequence[str] | None = None,
        *,
        default_api_url: str = DEFAULT_API_URL,
        on_pod: Callable[[str, str], None] | None = None,
        echo: Callable[[Event], bool] | None = None,
        resync_period: float = 0,
        cluster_scoped: bool = True,
        defer_per_namespace: bool = False,
    ) -> None:
        table = pool_watches(default_api_url=default_api_url, on_pod=on_pod, echo=echo)
        super().__init__(
            api_client,
            enqueue,
            table,
            namespaces,
            resync_period=resync_period,
            cluster_scoped=cluster_scoped,
            defer_per_namespace=defer_per_namespace,
        )

    def unwatch_namespace(self, namespace: str) -> bool:
        """Stop the namespace's informers and, if it had any, bring its pools back: their pods
        and Secrets left the cache without an event, and each pool's next pass finds the
        namespace refused and stops its jobs, before a runner manager takes "no pod" for the
        truth there."""
        stopped = super().unwatch_namespace(namespace)
        for key in _namespace_pools(self, namespace) if stopped else ():
            self._enqueue(key)
        return stopped

    def get_pool(self, namespace: str, name: str) -> Obj | None:
        return self.get(POOLS, namespace, name)

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        """An owned or a labelled credential Secret; ``None`` for any other (never cached)."""
        found = self.get(SECRETS_, namespace, name)
        return found if found is not None else self.get(CREDENTIALS, namespace, name)

    def get_disruption_budget(self, namespace: str, name: str) -> Obj | None:
        return self.get(BUDGETS, namespace, name)

    def get_service_account(self, namespace: str, name: str) -> Obj | None:
        return self.get(ACCOUNTS, namespace, name)

    def get_role_binding(self, namespace: str, name: str) -> Obj | None:
        return self.get(ROLE_BINDINGS_, namespace, name)

    def list_pools(self, namespace: str | None = None) -> list[Obj]:
        return self.objects(POOLS, namespace)

    def list_secrets(self, namespace: str | None = None) -> list[Obj]:
        """The cached Secrets (owned and labelled credential ones), each once, by ``namespace/name``."""
        found = {
            object_key(s): s for watch in (CREDENTIALS, SECRETS_) for s in self.objects(watch, namespace)
        }
        return [found[key] for key in sorted(found)]

    def list_pods(self, namespace: str, pool: str) -> list[Obj]:
        """The runner pods of one pool, by their pool label, from the index (shared: see Reads);
        ``PodsNotCachedError`` where the namespace's pods are not cached."""
        pods = self.listed_by_index(PODS_, namespace, BY_POOL, f"{namespace}/{pool}")
        if pods is None:
            raise PodsNotCachedError(f"the pods of namespace {namespace} are not cached (not enabled yet?)")
        return pods

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        found: ParsedPool | None = self.view(POOLS, namespace, name)
        return found

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        return list(self.views(POOLS, namespace, NAMESPACE, namespace))

    def autoscaling_pools(self, scopes: Iterable[str] | None = None) -> list[api.RunnerPool]:
        found: dict[str, api.RunnerPool] = {}
        for scope in [ANY_SCOPE] if scopes is None else scopes:
            for parsed in self.views(POOLS, None, BY_SCOPE, scope):
                if parsed.model is not None:
                    found.setdefault(parsed.model.key, parsed.model)
        return [found[key] for key in sorted(found)]

    def scale_set_pools(self) -> list[api.RunnerPool]:
        """Valid pools with ``spec.scaleSet``, being deleted or not (the scale-set listeners')."""
        found = (parsed.model for parsed in self.views(POOLS, None, BY_SCALE_SET, ANY_SCOPE))
        return sorted((pool for pool in found if pool is not None), key=lambda pool: pool.key)

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether the namespace is being deleted (or already gone) as far as the cache knows.

        Without the Namespace watch (``cluster_scoped=False``) the cache cannot know: the
        API server's refusal to create in a terminating namespace says it then.
        """
        if not self.watches(NAMESPACES_):
            return False
        found = self.peek(NAMESPACES_, namespace, namespace)
        if found is None:
            # Not listed yet, or deleted: only "gone" counts, and only after the first list.
            return self.has_synced
        return bool((found.get("metadata") or {}).get("deletionTimestamp"))
