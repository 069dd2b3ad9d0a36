"""Keep the RoleBinding that enables the operator in a namespace until the namespace's pools are gone.

Everything the operator writes in a runner namespace it may write only through a RoleBinding
there (``runnerpool.namespace_access``, docs/rbac.md). Deleting the namespace deletes that
binding together with the pools, their pods and Secrets; once it is gone the operator can no
longer release the credential Secret it protects (``runnerpool.credential_protection``) nor
write anything else there, the pools' finalizers fail with 403 on every retry and the namespace
hangs in Terminating, its runners possibly still registered. So, as with credential Secrets,
the operator puts its own finalizer (:data:`naming.BINDING_FINALIZER`) on every RoleBinding in
the namespace that grants its ServiceAccount a ClusterRole, for as long as a pool there carries
the pool finalizer. The API server's RBAC keeps honouring a binding that is being deleted until
its finalizers are gone, so the pools deregister and let go; the binding is released once the
namespace has no pool left at all, after the operator's last writes there (the credential
Secret's release, the busy budget's deletion), whichever leader saw the last pool go.

A leader that stops between the last pool's finalizer and the release (killed, its Lease
lost) leaves the finalizer on, and no pool is left whose pass would come for it: the
namespace's deletion, or the binding's, would hang for good. So, as credential Secrets are, the
bindings that carry the finalizer in namespaces without a pool are released at the start of
each leadership term, before the workers start, after the credential Secrets the cache cannot
show there (``runnerpool.observe.SecretChecks.release_unused``).

A namespace is let go once per teardown. Its last pools go together, and each gone pool's pass
asks: the first runs the operator's last writes there (``last_writes``: the busy budget's
deletion) and releases; the others, one at a time after it, find the namespace released
(:data:`_RELEASED_FOR`) and write nothing. Otherwise a pass that listed the binding, or whose
cache still showed the budget, before another released the binding would write to a
namespace where the operator may no longer write: that binding was its grant there, and the API
server answers 403, not 404 (RBAC decides before the object is looked up): a false "cannot
release" warning and a forbidden request in the audit log. A pool made there since holds the
binding again (:meth:`EnablingBindings.protect`) and starts the next teardown.

Which bindings: those whose subjects name the operator's own ServiceAccount (learnt by
``NamespaceAccess.account``) and whose ``roleRef`` is a ClusterRole: the documented one-liner,
the kustomize component and the chart's ``runnerNamespaces`` all make one of those, under
names of their own, and so do namespace-scoped mode's installs (deploy/overlays/namespaced, the
chart's ``watchNamespaces``: a RoleBinding to a ClusterRole in each watched namespace). A
binding to a Role is not held: the namespace's deletion deletes the Role itself at once. Where
several bindings grant the operator ClusterRoles, the namespace role's (``--namespace-role``,
which lets it patch RoleBindings) are released last.

Cost: one list of a namespace's RoleBindings the first time a pool of that namespace is
reconciled by this process (a patch only where the finalizer is missing), and one when its last
pool is gone; at each leadership start, one paged list of all RoleBindings (of each watched
namespace with ``--namespace``), and one list of a namespace's per release. A conflict is read
again and decided again at once (several passes may release at once; the namespace's deletion
marks the binding while its last pools go). Failing to hold never fails a pass: it is logged,
and the next pass tries again. Failing to release (other than 403/404: the binding or its grant
is gone) fails the gone pool's pass, so the work queue brings it back: no other pass would come
for a namespace without pools, and the namespace would hang in Terminating.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import TTLCache
from kubernetes.client.rest import ApiException

from runnerpool import naming
from runnerpool.api_errors import describe
from runnerpool.reads import Reads
from runnerpool.runtime.kube import ROLE_BINDINGS, Kube, retry_on_conflict

__all__ = ["EnablingBindings"]

log = logging.getLogger(__name__)

#: Reads and patches of one binding when each patch meets a conflict (client-go's DefaultRetry).
_ATTEMPTS = 5
#: How long a released namespace is remembered as released: the passes of pools that went
#: together come within moments; one much later (a pool whose finalizer was removed by hand)
#: lists the bindings again and finds nothing to release.
_RELEASED_FOR = 600.0
#: Namespaces remembered as released at most: more than go together on any cluster.
_RELEASED_MAX = 4096


def _grants(binding: Mapping[str, Any], account: str) -> bool:
    """Whether ``binding`` grants a ClusterRole to the ServiceAccount ``namespace:name``."""
    namespace, _, name = account.partition(":")
    if (binding.get("roleRef") or {}).get("kind") != "ClusterRole":
        return False
    return any(
        s.get("kind") == "ServiceAccount" and s.get("namespace") == namespace and s.get("name") == name
        for s in binding.get("subjects") or []
    )


def _finalizer_patch(binding: Mapping[str, Any], *, hold: bool) -> dict[str, Any] | None:
    """The compare-and-swap patch that adds or removes the finalizer; ``None``: nothing to do."""
    meta = binding.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if (naming.BINDING_FINALIZER in finalizers) == hold:
        return None
    wanted = (
        [*finalizers, naming.BINDING_FINALIZER]
        if hold
        else [f for f in finalizers if f != naming.BINDING_FINALIZER]
    )
    return {"metadata": {"finalizers": wanted or None, "resourceVersion": meta.get("resourceVersion")}}


class EnablingBindings:
    """Holds and releases the enabling RoleBindings of the namespaces that have pools."""

    def __init__(
        self, reads: Reads, kube: Kube, account: Callable[[], str], role: str = naming.NAMESPACE_CLUSTER_ROLE
    ) -> None:
        self._reads = reads
        self._kube = kube
        self._account = account
        #: The namespace role (``--namespace-role``): its bindings are released last.
        self._role = role
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._release_lock = threading.Lock()
        self._released: TTLCache[str, bool] = TTLCache(_RELEASED_MAX, _RELEASED_FOR)

    def protect(self, namespace: str) -> bool:
        """Hold the namespace's enabling bindings (once per namespace and process); whether it wrote."""
        with self._lock:
            if namespace in self._held:
                return False
            self._held.add(namespace)
            self._released.pop(namespace, None)
        return self._patch_all(namespace, hold=True) > 0

    def release_if_unused(self, namespace: str, last_writes: Callable[[], object] = lambda: None) -> bool:
        """Once the namespace has no pool left at all: ``last_writes``, the operator's last
        writes there, which the binding still has to allow (the pools' credential Secrets are
        released before this, by their own passes), then let the bindings go; whether it
        patched one. Once per teardown (see the module docstring)."""
        if self._reads.pools_in(namespace):
            return False
        with self._release_lock:
            with self._lock:
                if namespace in self._released:
                    return False
                self._held.discard(namespace)
            last_writes()
            released = self._patch_all(namespace, hold=False) > 0
            with self._lock:
                again = namespace in self._held
                if not again:
                    self._released[namespace] = True
            if again:  # a new pool's first pass held it meanwhile, maybe before this release
                self._patch_all(namespace, hold=True)
            return released

    def held_in(self, scope: str | None) -> set[str]:
        """The namespaces of ``scope`` (one namespace, or ``None``: all) where a RoleBinding
        carries the finalizer: one list of RoleBindings, paged (the operator's ClusterRole
        grants it cluster-wide, namespace-scoped mode's role in each watched namespace)."""
        return {
            b["metadata"]["namespace"]
            for b in self._kube.list_paged(ROLE_BINDINGS, scope)
            if naming.BINDING_FINALIZER in (b["metadata"].get("finalizers") or [])
        }

    def _patch_all(self, namespace: str, *, hold: bool) -> int:
        try:
            account = self._account()
            bindings = [b for b in self._kube.list_items(ROLE_BINDINGS, namespace) if _grants(b, account)]
            # The namespace role's bindings last: in a namespace being deleted a released binding
            # goes at once, and another role bound to the operator there (``view``, say) may not
            # let it patch the bindings still held, which would then hold the namespace for good.
            bindings.sort(key=lambda b: b["roleRef"].get("name") == self._role)
            return sum(self._patch_one(namespace, b, hold=hold) for b in bindings)
        except Exception as err:
            with self._lock:
                self._held.discard(namespace)  # try again with the next pool or pass
            # A connection error fails the pass as any other call's would (its retry holds
            # again); kept as held, the namespace was never held for the process's life.
            if not isinstance(err, ApiException) or (not hold and err.status not in (403, 404)):
                raise  # the work queue brings the gone pool's pass back: no other pass may come
            verb = "hold" if hold else "release"
            log.warning("cannot %s the enabling RoleBinding in %s: %s", verb, namespace, describe(err))
            return 0

    def _patch_one(self, namespace: str, binding: Mapping[str, Any], *, hold: bool) -> int:
        """Patch one binding's finalizers; whether it wrote (0 or 1).

        A conflict means the binding changed since it was read: the namespace's deletion marks
        it while the last pools go, or another pass released it. Read it again and decide
        again (``retry_on_conflict``); gone means there is nothing to hold.
        """
        name = binding["metadata"]["name"]

        def write(first: bool) -> int:
            try:
                current = binding if first else self._kube.get(ROLE_BINDINGS, namespace, name)
                patch = _finalizer_patch(current, hold=hold)
                if patch is None:
                    return 0
                self._kube.patch(ROLE_BINDINGS, namespace, name, patch)
            except ApiException as err:
                if err.status == 404:
                    return 0
                raise
            return 1

        return retry_on_conflict(write, _ATTEMPTS)
