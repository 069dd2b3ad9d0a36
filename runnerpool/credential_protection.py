"""Keep a pool's credential Secret until the pool no longer needs it.

A pool's finalizer deregisters its runners with the pool's credentials.  When a whole
namespace is deleted, the namespace controller deletes the credential Secret at the same
time as the pools; without protection the Secret is often gone before the finalizers
run, they cannot deregister, and nothing can recreate the Secret in a Terminating
namespace: the namespace hangs and its runners stay registered.

So, as ARC's scale-set controller does with its GitHub config Secret, the operator puts
its own finalizer (:data:`naming.CREDENTIAL_FINALIZER`) on every credential Secret that a pool which is not
yet finalized references, and with it the label of the same name (:data:`naming.CREDENTIAL_LABEL`),
the one the operator's Secret cache selects by (``runnerpool.watches``): a Secret no pool names
is never cached. A deleted Secret then stays readable (with a ``deletionTimestamp``) until the
protection goes, finalizer and label in one patch, which happens as soon as no pool needs it
any more:

* the last pool using it is finalized (its runners are deregistered),
* a pool moves to another Secret and no other pool uses the old one,
* a pool disappears without finalizing (its finalizer removed by hand),
* a pool disappears (the Secrets of its namespace that carry the protection are asked about
  too: this leader may never have seen the pool use one, when another leader removed its
  finalizer or the pool moved off it while no leader ran),
* at the start of each leadership term, every protected Secret that no pool needs is
  released (covers pools that went away while no operator was running; only cached Secrets
  are asked about, so one protected by a version before the label, whose pools all went
  while no operator ran, keeps its finalizer: the one-liner in docs/operating.md lets it go).

Before the label is on, the Secret is read by name (``runnerpool.secret_reads``): a new
pool's first pass, a Secret created after its pool, a Secret whose label someone removed. A
Secret that leaves the cache (deleted, or unlabelled by hand) brings the pools naming it back
(``runnerpool.watches``), and their pass labels it again. Only what is missing is patched: the
label alone needs no resourceVersion, the finalizer list is written compare-and-swap. A
release that races a new pool starting to name the Secret is mended the same way: the Secret
leaving the cache (or the new pool's own first pass) brings that pool back to label it again.

Uninstalling: delete the RunnerPools first while the operator still runs (their
finalizers deregister runners and release the Secrets).  Should the operator be gone
already, ``kubectl patch secret NAME --type=json -p
'[{"op":"remove","path":"/metadata/finalizers/N"}]'`` (N: the index of
``runnerpool.dev/credential-in-use``) lets a Secret go; docs/operating.md has the one-liner.

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
from runnerpool.runtime.kube import SECRETS, Kube, retry_on_conflict
from runnerpool.secret_reads import SecretReads

__all__ = ["CredentialProtection"]

log = logging.getLogger(__name__)

#: Reads and patches of a Secret not labelled yet, when each patch meets a conflict.
_ATTEMPTS = 3


def credential_secret_name(pool: Mapping[str, Any]) -> str:
    """The Secret a pool (wire form) reads its GitHub credentials from."""
    return str((pool.get("spec") or {}).get("credentialSecretName") or naming.DEFAULT_CREDENTIAL_SECRET)


def _labelled(meta: Mapping[str, Any]) -> bool:
    return (meta.get("labels") or {}).get(naming.CREDENTIAL_LABEL) == naming.CREDENTIAL_VALUE


def _protection_patch(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that adds what the Secret lacks of label and finalizer; ``None``: nothing.

    A Secret being deleted takes no new finalizer, but the label still: its cached copy is the
    one the pools' last good GitHub client falls back on.
    """
    patch: dict[str, Any] = {}
    if not _labelled(meta):
        patch["labels"] = {naming.CREDENTIAL_LABEL: naming.CREDENTIAL_VALUE}
    finalizers = list(meta.get("finalizers") or [])
    if naming.CREDENTIAL_FINALIZER not in finalizers and not meta.get("deletionTimestamp"):
        # The resourceVersion makes it a compare-and-swap: no other finalizer is lost.
        patch["finalizers"] = [*finalizers, naming.CREDENTIAL_FINALIZER]
        patch["resourceVersion"] = meta["resourceVersion"]
    return {"metadata": patch} if patch else None


def _release_patch(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """test + remove of our finalizer and our label, whichever the Secret carries: exactly ours
    go, whatever else changed on the Secret."""
    ops: list[dict[str, Any]] = []
    finalizers = list(meta.get("finalizers") or [])
    if naming.CREDENTIAL_FINALIZER in finalizers:
        path = f"/metadata/finalizers/{finalizers.index(naming.CREDENTIAL_FINALIZER)}"
        ops += [
            {"op": "test", "path": path, "value": naming.CREDENTIAL_FINALIZER},
            {"op": "remove", "path": path},
        ]
    if _labelled(meta):
        path = "/metadata/labels/" + naming.CREDENTIAL_LABEL.replace("~", "~0").replace("/", "~1")
        ops += [
            {"op": "test", "path": path, "value": naming.CREDENTIAL_VALUE},
            {"op": "remove", "path": path},
        ]
    return ops


def _needs(pool: Mapping[str, Any], secret_name: str) -> bool:
    meta = pool.get("metadata") or {}
    if credential_secret_name(pool) != secret_name:
        return False
    return not meta.get("deletionTimestamp") or naming.POOL_FINALIZER in (meta.get("finalizers") or [])


class CredentialProtection:
    """Adds and removes :data:`naming.CREDENTIAL_FINALIZER` and :data:`naming.CREDENTIAL_LABEL` on
    credential Secrets (see the module docstring).

    Called by the reconciler from its worker threads; the memory of which Secret each pool
    used last is what lets a pool's move or disappearance release the old Secret. ``secrets``
    (shared with the GitHub clients' reader) is how a Secret not cached yet is read.
    """

    def __init__(self, cache: Reads, kube: Kube, secrets: SecretReads | None = None) -> None:
        self._cache = cache
        self._kube = kube
        self.secrets = secrets if secrets is not None else SecretReads(cache, kube)
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
        """Make sure the pool's credential Secret carries label and finalizer; ``True`` if written.

        A Secret that does not exist yet is left alone (the pool reports it missing, and
        ``secrets.retry_in`` says when to look again), and one already being deleted cannot
        take a new finalizer: the last good GitHub client kept for the pool is the fallback then.
        """
        with self._lock:
            previous = self._used.get((namespace, pool))
        if previous is not None and previous != secret_name:
            # The new Secret is noted only once the old one is answered: a release that fails
            # fails the pass, and its retry asks about the old Secret again.
            self.release_if_unused(namespace, previous)
        with self._lock:
            self._used[(namespace, pool)] = secret_name
        return retry_on_conflict(lambda first: self._mark(namespace, pool, secret_name), _ATTEMPTS)

    def _mark(self, namespace: str, pool: str, secret_name: str) -> bool:
        """One read and, if something is missing, one patch.

        A Secret without our label is one no event of ours reports: a conflict on it (pools
        created together, each first pass patching it from the same read) is raised to be read
        again at once (``retry_on_conflict``); the last attempt's goes to the work queue's retry.
        """
        secret = self.secrets.read(namespace, secret_name)
        if secret is None:
            return False
        meta = secret.get("metadata") or {}
        body = _protection_patch(meta)
        if body is None:
            return False
        try:
            answer = self._kube.patch(SECRETS, namespace, secret_name, body)
        except ApiException as err:
            if err.status not in (404, 409):
                raise
            self.secrets.forget(namespace, secret_name)
            if _labelled(meta):
                # Changed or deleted meanwhile: its own event brings the pool back here.
                log.debug(
                    "credential Secret %s/%s not protected yet: %s", namespace, secret_name, describe(err)
                )
                return False
            if err.status == 409:
                raise
            return False  # deleted: nothing to protect
        self.secrets.remember(namespace, secret_name, answer)
        with self._release_lock:
            self._released.pop((namespace, secret_name), None)
        if "finalizers" in body["metadata"]:
            log.info("protecting credential Secret %s/%s while pool %s uses it", namespace, secret_name, pool)
        else:
            log.info("labelled credential Secret %s/%s again: pool %s uses it", namespace, secret_name, pool)
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
        if previous is not None:
            self.release_if_unused(namespace, previous, finalized=pool)
        # And every cached Secret of the namespace that carries the protection: this process
        # may never have seen the pool use it (finalized under another leader, or moved off it
        # while no leader ran), and a Secret left protected would hold its namespace's deletion.
        self._release_unused_in(namespace, finalized=pool)
        if previous is not None:
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

    def release_listed_in(self, namespace: str) -> int:
        """Release the protected Secrets of a namespace without pools, listed through the API
        (by the label): the cache reads Secrets only in namespaces where a pool has passed since
        this process started (``runnerpool.watches``), so at a leadership start
        (:meth:`release_unused`) it shows none where the last pool went under another leader.
        Raises what the API answers."""
        listed = self._kube.list_items(SECRETS, namespace, label_selector=naming.CREDENTIAL_SELECTOR)
        return sum(self.release_if_unused(namespace, s["metadata"]["name"]) for s in listed)

    def _release_unused_in(self, namespace: str | None, *, finalized: str | None = None) -> int:
        """Over the cached Secrets: a protected one carries the label the cache selects by."""
        released = 0
        for secret in self._cache.list_secrets(namespace):
            meta = secret.get("metadata") or {}
            if _release_patch(meta):
                released += self.release_if_unused(meta["namespace"], meta["name"], finalized=finalized)
        return released

    # -- the decision -----------------------------------------------------------------------

    def release_if_unused(self, namespace: str, secret_name: str, *, finalized: str | None = None) -> bool:
        """Remove the finalizer when no pool other than ``finalized`` needs the Secret."""
        with self._release_lock:
            return self._release_if_unused(namespace, secret_name, finalized)

    def _release_if_unused(self, namespace: str, secret_name: str, finalized: str | None) -> bool:
        for pool in self._cache.pools_in(namespace):
            if (pool.raw.get("metadata") or {}).get("name") != finalized and _needs(pool.raw, secret_name):
                return False
        key = (namespace, secret_name)
        if key in self._released and self._cache.get_secret(namespace, secret_name) is None:
            return False  # released by this process and not protected since: no read by name
        # Not cached: read by name, so a Secret whose label was removed still loses the finalizer.
        secret = self.secrets.read(namespace, secret_name)
        if secret is None:
            return False
        meta = secret.get("metadata") or {}
        if self._released.get(key) == meta.get("resourceVersion"):
            return False  # released by this process from this version; the cache lags
        ops = _release_patch(meta)
        if not ops:
            return False
        try:
            self._kube.patch(SECRETS, namespace, secret_name, ops)
        except ApiException as err:
            if err.status == 404:
                return False
            self.secrets.forget(namespace, secret_name)
            raise  # 422: the Secret changed under a stale read; the retry reads a fresher one
        self.secrets.forget(namespace, secret_name)
        self._released[key] = str(meta.get("resourceVersion"))
        log.info("released credential Secret %s/%s: no pool needs it any more", namespace, secret_name)
        return True
