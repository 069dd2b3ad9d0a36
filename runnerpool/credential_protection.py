"""Keep a pool's credential Secret until the pool no longer needs it.

A pool's finalizer deregisters its runners with the pool's credentials.  When a whole
namespace is deleted, the namespace controller deletes the credential Secret at the same
time as the pools; without protection the Secret is often gone before the finalizers
run, they cannot deregister, and nothing can recreate the Secret in a Terminating
namespace: the namespace hangs and its runners stay registered.

So, as ARC's scale-set controller does with its GitHub config Secret, the operator puts
its own finalizer (:data:`naming.CREDENTIAL_FINALIZER`) on every credential Secret that a pool which is not
yet finalized references.  A deleted Secret then stays readable (with a
``deletionTimestamp``) until the protection goes, which happens as soon as no pool needs
it any more:

* the last pool using it is finalized (its runners are deregistered),
* a pool moves to another Secret and no other pool uses the old one,
* a pool disappears without finalizing (its finalizer removed by hand),
* a pool disappears whose finalizer another leader removed (the Secrets of its namespace that
  carry the protection are asked about, since this leader never saw which one it used),
* at the start of each leadership term, every protected Secret that no pool needs is
  released (covers pools that went away while no operator was running).

Uninstalling: delete the RunnerPools first while the operator still runs (their
finalizers deregister runners and release the Secrets).  Should the operator be gone
already, ``kubectl patch secret NAME --type=json -p
'[{"op":"remove","path":"/metadata/finalizers/N"}]'`` (N: the index of
``runnerpool.dev/credential-in-use``) lets a Secret go; the README has the one-liner.

A pool "needs" a Secret when it names it (``spec.credentialSecretName``) and is either
not being deleted or still carries the pool finalizer.  The answer comes from the
informer caches; a decision made on a cache that lags is corrected by the next event
(every pool's disappearance asks the question again), never by a timer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from runnerpool import naming
from runnerpool.api_errors import describe
from runnerpool.reads import Reads
from runnerpool.runtime.kube import SECRETS, Kube

__all__ = ["CredentialProtection"]

log = logging.getLogger(__name__)


def credential_secret_name(pool: Mapping[str, Any]) -> str:
    """The Secret a pool (wire form) reads its GitHub credentials from."""
    return str((pool.get("spec") or {}).get("credentialSecretName") or naming.DEFAULT_CREDENTIAL_SECRET)


def _needs(pool: Mapping[str, Any], secret_name: str) -> bool:
    meta = pool.get("metadata") or {}
    if credential_secret_name(pool) != secret_name:
        return False
    return not meta.get("deletionTimestamp") or naming.POOL_FINALIZER in (meta.get("finalizers") or [])


class CredentialProtection:
    """Adds and removes :data:`naming.CREDENTIAL_FINALIZER` on credential Secrets (see the module docstring).

    Called by the reconciler from its worker threads; the memory of which Secret each pool
    used last is what lets a pool's move or disappearance release the old Secret.
    """

    def __init__(self, cache: Reads, kube: Kube) -> None:
        self._cache = cache
        self._kube = kube
        self._lock = threading.Lock()
        self._used: dict[tuple[str, str], str] = {}
        # Releases one at a time, remembering what this process released and the Secret's
        # resourceVersion it released from: pools that go together are reconciled by several
        # workers at once, and a cache that has not yet seen the first release must not make
        # the second fail on a stale finalizer index. Only that very version is skipped: a
        # Secret protected again since (by this replica or another leader) is released again.
        self._release_lock = threading.Lock()
        self._released: dict[tuple[str, str], str] = {}

    # -- the reconciler's calls -----------------------------------------------------------

    def protect(self, namespace: str, pool: str, secret_name: str) -> bool:
        """Make sure the pool's credential Secret carries the finalizer; ``True`` if written.

        A Secret that does not exist yet is left alone (the pool reports it missing), and
        one already being deleted cannot take a new finalizer: the last good GitHub client
        kept for the pool is the fallback then.
        """
        with self._lock:
            previous = self._used.get((namespace, pool))
            self._used[(namespace, pool)] = secret_name
        if previous is not None and previous != secret_name:
            self.release_if_unused(namespace, previous)
        secret = self._cache.get_secret(namespace, secret_name)
        if secret is None:
            return False
        meta = secret.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if naming.CREDENTIAL_FINALIZER in finalizers or meta.get("deletionTimestamp"):
            return False
        try:
            # The resourceVersion makes it a compare-and-swap: no other finalizer is lost.
            self._kube.patch(
                SECRETS,
                namespace,
                secret_name,
                {
                    "metadata": {
                        "finalizers": [*finalizers, naming.CREDENTIAL_FINALIZER],
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            # Changed or deleted meanwhile: its own event brings the pool back here.
            log.debug("credential Secret %s/%s not protected yet: %s", namespace, secret_name, describe(err))
            return False
        with self._release_lock:
            self._released.pop((namespace, secret_name), None)
        log.info("protecting credential Secret %s/%s while pool %s uses it", namespace, secret_name, pool)
        return True

    def finalized(self, namespace: str, pool: str, secret_name: str) -> None:
        """The pool's finalizer is gone: release its Secret unless another pool needs it.

        The memory of the pool's Secret stays until the pool is gone from the cache
        (:meth:`forget`): pools finalized at the same moment may each still see the others
        as needing the Secret, and the last disappearance is what decides.
        """
        self.release_if_unused(namespace, secret_name, finalized=pool)

    def forget(self, namespace: str, pool: str) -> None:
        """The pool is gone from the cache: ask again about the Secret it used last.

        Forgotten only once answered, so a release that failed is asked again on the retry.
        """
        with self._lock:
            previous = self._used.get((namespace, pool))
        if previous is None:
            # Finalized under another leader: this one never saw which Secret the pool used.
            # Ask about every Secret of the namespace that carries the protection instead of
            # leaving it to the next leadership start.
            self._release_unused_in(namespace, finalized=pool)
            return
        self.release_if_unused(namespace, previous, finalized=pool)
        with self._lock:
            if self._used.get((namespace, pool)) == previous:
                del self._used[(namespace, pool)]

    def release_unused(self) -> int:
        """Release every protected Secret that no pool needs; returns how many.

        Run at the start of each leadership: pools that went away while no operator ran
        leave protected Secrets. A failure is logged, never raised: the next pool deletion
        asks again, and leading must go on.
        """
        released = 0
        try:
            released = self._release_unused_in(None)
        except Exception as err:
            log.warning("could not release unused credential Secrets: %s", describe(err))
        if released:
            log.info("released %d credential Secret(s) that no pool needs", released)
        return released

    def _release_unused_in(self, namespace: str | None, *, finalized: str | None = None) -> int:
        released = 0
        for secret in self._cache.list_secrets(namespace):
            meta = secret.get("metadata") or {}
            if naming.CREDENTIAL_FINALIZER in (meta.get("finalizers") or []):
                released += self.release_if_unused(meta["namespace"], meta["name"], finalized=finalized)
        return released

    # -- the decision -----------------------------------------------------------------------

    def release_if_unused(self, namespace: str, secret_name: str, *, finalized: str | None = None) -> bool:
        """Remove the finalizer when no pool other than ``finalized`` needs the Secret."""
        with self._release_lock:
            return self._release_if_unused(namespace, secret_name, finalized)

    def _release_if_unused(self, namespace: str, secret_name: str, finalized: str | None) -> bool:
        secret = self._cache.get_secret(namespace, secret_name)
        if secret is None:
            return False
        meta = secret.get("metadata") or {}
        if self._released.get((namespace, secret_name)) == meta.get("resourceVersion"):
            return False  # released by this process from this version; the cache lags
        finalizers = list(meta.get("finalizers") or [])
        if naming.CREDENTIAL_FINALIZER not in finalizers:
            return False
        for pool in self._cache.pools_in(namespace):
            if (pool.raw.get("metadata") or {}).get("name") != finalized and _needs(pool.raw, secret_name):
                return False
        index = finalizers.index(naming.CREDENTIAL_FINALIZER)
        try:
            # test + remove: removes exactly ours, whatever else changed on the Secret.
            self._kube.patch(
                SECRETS,
                namespace,
                secret_name,
                [
                    {
                        "op": "test",
                        "path": f"/metadata/finalizers/{index}",
                        "value": naming.CREDENTIAL_FINALIZER,
                    },
                    {"op": "remove", "path": f"/metadata/finalizers/{index}"},
                ],
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise  # 422: the list changed under a stale cache; the retry reads a fresher one
        self._released[(namespace, secret_name)] = str(meta.get("resourceVersion"))
        log.info("released credential Secret %s/%s: no pool needs it any more", namespace, secret_name)
        return True
