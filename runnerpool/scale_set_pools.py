"""Scale-set pools (``spec.scaleSet``) meet the scale set protocol (``runnerpool.scaleset``).

``runnerpool.scaleset`` knows GitHub's protocol and nothing of RunnerPools; the reconciler and
the secret updater know pools and nothing of the protocol. This module is where they meet, as
the operator's assembly wires them (issue 34, docs/scale-sets.md):

* :func:`listened_pools` — which pools the leader's listeners serve, from the cache: every
  valid pool with ``spec.scaleSet`` in a namespace the platform team enabled and that the
  allow-list lets register at its scope; a pool being deleted is listed ``deleting`` (its
  listener stops before the finalizer deletes the scale set).
* :class:`StatusSink` — the one writer of ``status.scaleSet``: a merge patch of the status
  subresource with the listener's view, nothing else (the reconciler leaves that key alone).
* :func:`resumed_view` — a new leader's listener starts from the view the pool's status holds
  (its scale set, statistics, busy runners and problem); its session still starts at message 0.
* :class:`ScaleSetJitConfigs` — a scale-set pool's pod's JIT config, from its scale set.

The scale set id in ``status.scaleSet`` is the listener's record, but not the listener's alone
to write: the webhook receiver may patch the status subresource too (for ``status.demand``;
RBAC cannot tell the fields apart). So nothing the operator does with that id trusts it
unasked: a JIT config is made from it, and a finalizer deletes it, only once GitHub says it is
the scale set of the pool's ``spec.scaleSet.name`` in the pool's runner group (``_is_named``).
A receiver taken over could otherwise have the operator delete another team's scale set, or
run its jobs, with their secrets, on this pool's pods.
* :class:`ScaleSetRunnerRemoval` — a scale-set pool's runners are deleted through the Actions
  service, not REST (``runnerpool.runners.removal``), by the runner managers as ever.
* :class:`PoolScaleSets` — what the reconciler asks: a listener for a pool it saw, and, as the
  finalizer's last GitHub act, the pool's listener stopped (so nothing creates the scale set
  again) and its scale set deleted: the one the status recorded and the one of its name in its
  runner group (the status may lag), each gone already being done, unless another live pool
  names it (:class:`ScaleSetClaims`).
* :class:`ScaleSetClaims` — which of several live pools naming one scale set has it: a user
  renames a pool, or moves it to another namespace, keeping ``spec.scaleSet.name`` (the
  workflows' ``runs-on``), so for a while two pools name one scale set.

Labels: the scale set carries ``<namespace>/<pool>`` besides ``spec.labels``: GitHub lists a
scale set's runners, with its labels, in the scope's runner listing, where the runner managers
tell a pool's runners apart by that label (``runnerpool.runners.listing``), so scale-down,
busy marks and deregistration work as for any pool.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from runnerpool import api, naming
from runnerpool.domain import PoolRef, api_url_key
from runnerpool.github.credentials import CredentialError
from runnerpool.github.types import DeleteOutcome, JitConfig, JitRequest
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason
from runnerpool.runtime.kube import RUNNER_POOLS, Kube
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.clients import RestClients, ScaleSetClients
from runnerpool.scaleset.errors import (
    JobStillRunning,
    ListenerStillRunning,
    RunnerGroupNotFound,
    RunnerNotFound,
    ScaleSetNotFound,
    ScaleSetNotThePools,
    ScaleSetStillUsed,
)
from runnerpool.scaleset.listener import Problem, ScaleSetSettings, ScaleSetView
from runnerpool.scaleset.runnable import PoolKey, ScaleSetListeners, listener_factory
from runnerpool.scaleset.types import DEFAULT_RUNNER_GROUP
from runnerpool.scaleset.wire import Policy, Wire
from runnerpool.settings import GitHubSettings, Settings

__all__ = [
    "LISTENER_CREDENTIALS",
    "PoolScaleSets",
    "ScaleSetClaims",
    "ScaleSetJitConfigs",
    "ScaleSetParts",
    "ScaleSetRunnerRemoval",
    "StatusSink",
    "assemble",
    "listened_pools",
    "resumed_view",
    "scale_set_labels",
    "scale_set_policy",
    "status_of",
]

log = logging.getLogger(__name__)

#: The listeners' PoolRef carries no credential version: a changed Secret is picked up by the
#: clients (``ScaleSetClients`` rebuilds when the REST client changes) without a new session.
LISTENER_CREDENTIALS = "listener"
#: Seconds the finalizer waits for a pool's listener to end (it deletes its session at once).
STOP_WAIT = 30.0
#: Seconds until a finalizer whose pool's listener had not ended looks again.
STOP_RETRY = 5.0


class NamespaceRefusals(Protocol):
    def refused(self, namespace: str) -> bool:
        """The namespace is known not to be enabled (``runnerpool.namespace_access``)."""
        ...


class ScaleSetPoolReads(Protocol):
    def scale_set_pools(self) -> list[api.RunnerPool]:
        """Valid pools with ``spec.scaleSet``, being deleted or not."""
        ...

    def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        """The cache's parse of the pool: asked "is it a scale-set pool" as everywhere else
        (``spec.scale_set``), and not parsed again per call."""
        ...

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether the namespace is being deleted: its pools are finalized as deleted ones."""
        ...


def scale_set_labels(pool: api.RunnerPool) -> tuple[str, ...]:
    """The scale set's extra labels (its name is always the first): the pool's own runner
    label, then ``spec.labels``."""
    own = naming.pool_runner_label(pool.namespace, pool.name)
    return (own, *(label for label in pool.spec.labels if label != own))


class JustFinalized:
    """The pools the reconciler put its finalizer on moments ago, before the cache shows it.

    Why: the reconciler asks for a listener (``PoolScaleSets.listen``) in the pass that wrote
    the finalizer, and the listeners' sync read a cache without it and started none; the
    finalizer's own watch event wakes no pass (an echo of the operator's write), so the pool
    waited for the next sync, 10 s. Kept for ``keep`` seconds: the cache lags by far less."""

    def __init__(self, keep: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._since: dict[PoolKey, float] = {}

    def add(self, key: PoolKey) -> None:
        with self._lock:
            now = self._clock()
            self._since = {k: at for k, at in self._since.items() if now - at < self._keep}
            self._since[key] = now

    def discard(self, key: PoolKey) -> None:
        """The pool is being let go: one made again under its name has no finalizer yet."""
        with self._lock:
            self._since.pop(key, None)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            at = self._since.get(key)  # type: ignore[call-overload]  # any key may be asked
        return at is not None and self._clock() - at < self._keep


def listened_pools(
    reads: ScaleSetPoolReads,
    pool_ref: Callable[[api.RunnerPool, str], PoolRef],
    allowed: Callable[[api.RunnerPool], bool],
    finalized: Container[PoolKey] = frozenset(),
) -> Callable[[], Iterable[tuple[PoolKey, ScaleSetSettings]]]:
    """``pools()`` for ``ScaleSetListeners``: ``allowed`` says whether the namespace is enabled
    and the allow-list lets the pool register at its scope (a refused pool gets no listener and
    makes no GitHub call, as it gets no token).

    Only pools that carry the operator's finalizer: it is what deletes the scale set a listener
    makes. A pool without it (its first pass not done yet, or refused by a gate before it got
    one) went at once when deleted, and the scale set its listener had made stayed on GitHub
    for good; nor may it keep another pool's scale set (``ScaleSetClaims``). ``finalized``:
    those the reconciler has just put it on (``JustFinalized``)."""

    def pools() -> Iterable[tuple[PoolKey, ScaleSetSettings]]:
        for pool in reads.scale_set_pools():
            scale_set, scaling = pool.spec.scale_set, pool.spec.autoscaling
            carries = naming.POOL_FINALIZER in pool.finalizers or (pool.namespace, pool.name) in finalized
            if scale_set is None or scaling is None or not carries or not allowed(pool):
                continue
            settings = ScaleSetSettings(
                pool=pool_ref(pool, LISTENER_CREDENTIALS),
                name=scale_set.name,
                max_runners=scaling.max_replicas,
                runner_group=pool.spec.runner_group,
                labels=scale_set_labels(pool),
                # As the reconciler finalizes it: a pool of a namespace being deleted is drained
                # and its scale set deleted before the namespace's sweep marks the pool itself.
                # Listened to meanwhile, its listener made the scale set again, for good.
                deleting=pool.deleting or reads.namespace_terminating(pool.namespace),
            )
            yield (pool.namespace, pool.name), settings

    return pools


def status_of(view: ScaleSetView) -> dict[str, Any]:
    """``status.scaleSet`` as the listener's view says (0 ids: not known yet)."""
    problem = None if view.problem is None else {"reason": str(view.problem[0]), "message": view.problem[1]}
    return {
        "id": view.scale_set_id or None,
        "runnerGroupId": view.runner_group_id if view.scale_set_id else None,
        "lastMessageId": view.last_message_id,
        "assignedJobs": view.assigned_jobs,
        "runningJobs": view.running_jobs,
        "busyRunners": sorted(view.busy_runners),
        "droppedLabels": list(view.dropped_labels) or None,
        "problem": problem,
    }


class StatusSink:
    """Writes each view to ``status.scaleSet`` (``ViewSink``); raises when the API server does
    not take it, so the listener does not acknowledge the message (it comes again)."""

    def __init__(self, kube: Kube, reads: ScaleSetPoolReads) -> None:
        self._kube = kube
        self._reads = reads

    def publish(self, namespace: str, name: str, view: ScaleSetView) -> None:
        wanted = status_of(view)
        raw = self._reads.get_pool(namespace, name) or {}
        shown = (raw.get("status") or {}).get("scaleSet") or {}
        if {key: value for key, value in wanted.items() if value is not None} == shown:
            return  # the cache shows it already: a converged pool is written nothing
        body = {"status": {"scaleSet": wanted}}
        self._kube.patch(RUNNER_POOLS, namespace, name, body, subresource="status")


def _resumed_problem(seen: api.ScaleSetStatus) -> Problem | None:
    """The problem the status shows, resumed so the new listener clears it once its session opens.

    Why: left out, a new leader's listener that got in at its first try (users restart the
    operator once they fixed the Secret) with the statistics the status held had nothing to write,
    and the last leader's problem stayed until the scale set's next message, hours for a quiet
    pool. A reason this version does not know (a newer operator wrote it) is ``ScaleSetPending``,
    as the DemandVisible condition reads it: kept as some problem, it is cleared all the same."""
    if seen.problem is None:
        return None
    try:
        reason = Reason(seen.problem.reason)
    except ValueError:
        reason = Reason.SCALE_SET_PENDING
    return reason, seen.problem.message


def resumed_view(reads: ScaleSetPoolReads) -> Callable[[PoolKey], ScaleSetView | None]:
    """The view a pool's status holds (``None``: none recorded), for a new leader's listener: all
    of it, so a healthy pool's opened session writes nothing and a problem shown is cleared."""

    def resume(key: PoolKey) -> ScaleSetView | None:
        parsed = reads.pool(*key)
        seen = None if parsed is None or parsed.model is None else parsed.model.status.scale_set
        if seen is None or seen.id is None:
            return None
        return ScaleSetView(
            scale_set_id=seen.id,
            runner_group_id=seen.runner_group_id or 0,
            last_message_id=seen.last_message_id,
            assigned_jobs=seen.assigned_jobs,
            running_jobs=seen.running_jobs,
            busy_runners=tuple(seen.busy_runners),
            dropped_labels=tuple(seen.dropped_labels),
            problem=_resumed_problem(seen),
        )

    return resume


class ScaleSetJitConfigs:
    """``SecretWrites.scale_set_jit``: a runner and its JIT config, made by the pod's scale set,
    once GitHub said the id the status holds is the pool's scale set (asked once per pool and
    id: the module docstring says why)."""

    def __init__(self, clients: ScaleSetClients, reads: ScaleSetPoolReads) -> None:
        self._clients = clients
        self._reads = reads
        self._confirmed: dict[PoolKey, int] = {}
        self._lock = threading.Lock()

    def __call__(self, pool: PoolRef, request: JitRequest) -> JitConfig:
        assert request.scale_set_id is not None, "only scale-set pools' requests come here"
        client = self._clients.get(pool)
        self._confirm(client, pool, request.scale_set_id)
        made = client.generate_jit_config(request.scale_set_id, request.name, request.work_folder)
        return JitConfig(runner_id=made.runner.id, encoded=made.encoded_jit_config)

    def _confirm(self, client: ScaleSetClient, pool: PoolRef, scale_set_id: int) -> None:
        key: PoolKey = (pool.namespace, pool.name)
        with self._lock:
            if self._confirmed.get(key) == scale_set_id:
                return
        named = _scale_set_named(self._reads, pool)
        if named is None or not _is_named(client, scale_set_id, *named):
            raise ScaleSetNotThePools(
                f"scale set {scale_set_id} in the pool's status is not its scale set on GitHub; "
                "no runner is made in it until the listener records the pool's own"
            )
        with self._lock:
            self._confirmed[key] = scale_set_id


class ScaleSetRunnerRemoval:
    """``RunnerManagers.removal``: a scale-set pool's runner is removed by the Actions service
    with the pool's scale set client; other pools (and a pool gone from the cache) are None,
    so they keep REST."""

    def __init__(self, reads: ScaleSetPoolReads, clients: ScaleSetClients) -> None:
        self._reads = reads
        self._clients = clients

    def remover(self, pool: PoolRef) -> Callable[[int], DeleteOutcome] | None:
        """None also when the pool's credential Secret, or the CA bundle or proxy login it names,
        cannot be read: the runner managers then delete by REST with the last client that worked
        for it (a Secret deleted before it was protected, a namespace's deletion taking its
        ConfigMaps and Secrets), which beats leaving the runners registered."""
        parsed = self._reads.pool(pool.namespace, pool.name)
        if parsed is None or parsed.model is None or parsed.model.spec.scale_set is None:
            return None
        try:
            client = self._clients.get(pool)
        except CredentialError:
            return None
        return functools.partial(_remove_runner, client)


def _remove_runner(client: ScaleSetClient, runner_id: int) -> DeleteOutcome:
    """The service's answers as REST's: refused while it runs a job, gone when not found."""
    try:
        client.remove_runner(runner_id)
    except JobStillRunning:
        return DeleteOutcome.BUSY
    except RunnerNotFound:
        return DeleteOutcome.ALREADY_GONE
    return DeleteOutcome.DELETED


#: What tells one scale set from another: the GitHub API, the scope, the runner group and the
#: name (unique within a group), names case-folded (GitHub compares them so).
_ScaleSetIdentity = tuple[str, str, str, str]


def _identity(pool: PoolRef, runner_group: str | None, name: str) -> _ScaleSetIdentity:
    group = runner_group or DEFAULT_RUNNER_GROUP
    return api_url_key(pool.api_url), pool.scope.key, group.casefold(), name.casefold()


class ScaleSetClaims:
    """Which live pool has a scale set that several name.

    Why: a user renames a pool, or moves it to another namespace, keeping ``spec.scaleSet.name``
    (the workflows' ``runs-on`` names it): the new pool adopts the scale set, and the old pool's
    finalizer deleted it, with the new pool's runners and their jobs. And two live pools sharing
    one would take the session from each other and rewrite its labels in turn. So:

    * ``others``: a pool's deletion leaves its scale set on GitHub while another live pool
      names it (``PoolScaleSets.delete``); that pool has it next.
    * ``deleted_too``: of several deleted pools naming it, the last in key order deletes it,
      once the others are gone (their busy runners may still be in it).
    * ``holder``: of the live pools naming one scale set, the one made first (creation time,
      then ``namespace/name``) has it; the others' listeners ask GitHub nothing and show
      ``ScaleSetHeldByAnotherPool`` until it is being deleted, then adopt the scale set.

    Live: listed by the listeners' ``pools()`` (``listened_pools``: a namespace the operator may
    write in, a scope the allow-list admits) and not being deleted; a pool the operator never
    listens for takes nothing from another. Told from this operator's cache alone, not from the
    scale set's labels on GitHub: a GHES without custom scale-set labels keeps none to tell by,
    and they name the old pool until the new pool's listener has run, so deleting by them would
    delete in that window and, once the new pool had relabelled it and was deleted before its
    listener ran again, leave a scale set no pool names on GitHub for good. Another installation
    listening on the same scale set is not seen (it shows as ``ScaleSetSessionHeld``).

    A pool of another namespace counts only once its own credential found or made the scale
    set (its ``status.scaleSet.id``, :meth:`_found_it`): otherwise any tenant could make a pool
    naming another team's scale set, with no credential at all, and hold it (made first, its
    listener would have it; live, a deletion would leave it to it; being deleted, with a
    finalizer of its own, it would keep the other team's deletion waiting for good). A pool of
    the same namespace counts as soon as it is listed: one tenant's own pools. So a pool moved
    to another namespace adopts the scale set only if its listener finds it (once the old pool
    is being deleted) before the old pool's finalizer looks; otherwise the old pool's deletion
    deletes it and the new pool makes it again.

    ``every``: the pools ``deleted_too`` looks at, the listed ones by default; the operator
    passes every pool carrying its finalizer, whether the allow-list refuses its scope now (such
    a pool is drained all the same, busy runners in the scale set too) or its namespace is known
    refused. The last keeps a deletion waiting for as long as that pool's own waits for its
    namespace to be enabled again (named in the waiting pool's condition); leaving it out
    depended on an answer each leader learns anew and one 403 forgets, and one wrong answer
    deleted the scale set under that pool's busy runners.
    """

    def __init__(
        self,
        pools: Callable[[], Iterable[tuple[PoolKey, ScaleSetSettings]]],
        reads: ScaleSetPoolReads,
        every: Callable[[], Iterable[tuple[PoolKey, ScaleSetSettings]]] | None = None,
    ) -> None:
        self._pools = pools
        self._every = every or pools
        self._reads = reads

    def others(self, pool: PoolRef, runner_group: str | None, name: str) -> list[str]:
        """``namespace/name`` of the live pools besides ``pool`` that name the same scale set."""
        return [
            naming.pool_runner_label(*key)
            for key in self._rivals((pool.namespace, pool.name), _identity(pool, runner_group, name))
        ]

    def holder(self, settings: ScaleSetSettings) -> str | None:
        """``ScaleSetListener``'s ``holder``: the pool that has the scale set ``settings`` name,
        when it is another one (``namespace/name``); None when this pool may have it."""
        mine: PoolKey = (settings.pool.namespace, settings.pool.name)
        rivals = self._rivals(mine, _identity(settings.pool, settings.runner_group, settings.name))
        first = min([mine, *rivals], key=self._made)
        return None if first == mine else naming.pool_runner_label(*first)

    def deleted_too(self, pool: PoolRef, runner_group: str | None, name: str) -> tuple[list[str], list[str]]:
        """The other pools being deleted that name the same scale set (``namespace/name``):
        those after ``pool`` in key order, then those before it.

        Why: each such pool may still wait for its busy runners in the scale set, and deleting
        the scale set takes them with it. Exactly one deletes it, the last in key order, once
        the pools before it are gone (they finish their own drains first); the others leave it
        to that one. Key order, not "whoever looks last", so two finalizers looking at the same
        moment never both leave it."""
        mine: PoolKey = (pool.namespace, pool.name)
        identity = _identity(pool, runner_group, name)
        deleting = [key for key, gone in self._namers(mine, identity, self._every()) if gone]
        return (
            [naming.pool_runner_label(*key) for key in deleting if key > mine],
            [naming.pool_runner_label(*key) for key in deleting if key < mine],
        )

    def _rivals(self, mine: PoolKey, identity: _ScaleSetIdentity) -> list[PoolKey]:
        return [key for key, deleting in self._namers(mine, identity, self._pools()) if not deleting]

    def _namers(
        self, mine: PoolKey, identity: _ScaleSetIdentity, pools: Iterable[tuple[PoolKey, ScaleSetSettings]]
    ) -> list[tuple[PoolKey, bool]]:
        """The other pools of ``pools`` that name the scale set ``identity`` and count (same
        namespace, or vouched for by their own scale set id), each with whether it is being
        deleted."""
        return [
            (key, settings.deleting)
            for key, settings in pools
            if key != mine
            and _identity(settings.pool, settings.runner_group, settings.name) == identity
            and (key[0] == mine[0] or self._found_it(key))
        ]

    def _found_it(self, key: PoolKey) -> bool:
        """The pool's own listener found or made its scale set (``status.scaleSet.id``: tenants
        may only read the status, and the webhook receiver's account may write only
        ``status.demand`` there, by deploy/'s and the chart's admission policy)."""
        parsed = self._reads.pool(*key)
        known = None if parsed is None or parsed.model is None else parsed.model.status.scale_set
        return known is not None and bool(known.id)

    def _made(self, key: PoolKey) -> tuple[str, PoolKey]:
        """The order pools were made in: creation time (RFC 3339 in UTC sorts as text), then key."""
        parsed = self._reads.pool(*key)
        meta = {} if parsed is None else parsed.raw.get("metadata") or {}
        return str(meta.get("creationTimestamp") or ""), key


class PoolScaleSets:
    """``PoolJobs.scale_sets``: the reconciler's two asks of the scale-set side. ``listen``: a
    scale-set pool it saw should have a listener (the listeners sync at once when it has none,
    not at their next interval); ``delete``: stop the pool's listener, so nothing creates the
    scale set again, then delete the pool's scale set."""

    def __init__(
        self,
        clients: ScaleSetClients,
        listeners: ScaleSetListeners,
        reads: ScaleSetPoolReads,
        claims: ScaleSetClaims,
        finalized: JustFinalized | None = None,
    ) -> None:
        self._clients = clients
        self._listeners = listeners
        self._reads = reads
        self._claims = claims
        self._finalized = finalized

    def listen(self, namespace: str, name: str) -> None:
        """Asked in the pass that put the finalizer on, or a later one: the pool carries it."""
        if self._listeners.listener((namespace, name)) is None:
            if self._finalized is not None:
                self._finalized.add((namespace, name))
            self._listeners.poke()

    def delete(self, pool: PoolRef, scale_set_id: int | None) -> None:
        """Delete the scale set the status recorded (``scale_set_id``) and the one of the pool's
        name in its runner group, each gone already being done; none while another live pool
        names that scale set (``ScaleSetClaims``: it is that pool's now, with its runners).

        Why by name too: the status may not have the id yet (the pool deleted before the
        listener's write of it), or an old one (the scale set deleted on GitHub and made again
        under a new id), and a 404 on that id would let the pool go with its live scale set
        left registered. The listener stops first (and is not started again, ``stop_pool``):
        otherwise it could make the scale set again just after it was deleted."""
        if self._finalized is not None:
            self._finalized.discard((pool.namespace, pool.name))
        if not self._listeners.stop_pool((pool.namespace, pool.name), STOP_WAIT):
            # Still in a call that may make the scale set after the look-up below found none.
            raise ListenerStillRunning(
                f"the scale set listener of {pool.key} has not ended {STOP_WAIT:g} s after it was "
                "told to stop (a call to GitHub in flight); its scale set is deleted once it has",
                retry_after=STOP_RETRY,
            )
        named = _scale_set_named(self._reads, pool)
        if named is None:
            # Deleted by the recorded id only: no one can make a pool's spec unreadable to point
            # that id elsewhere.
            log.warning("pool %s: no readable spec.scaleSet; its scale set is deleted by id only", pool.key)
        others = [] if named is None else self._claims.others(pool, *named)
        if named is not None and others:
            log.info(
                "pool %s: scale set %r is left on GitHub: pool(s) %s name it too",
                pool.key,
                named[1],
                ", ".join(others),
            )
            return
        if named is not None and self._left_to_another_deleted_pool(pool, *named):
            return
        client = self._clients.get(pool, tearing_down=True)
        found = None if named is None else self._found(client, *named)
        recorded = scale_set_id
        if (
            named is not None
            and scale_set_id
            and scale_set_id != found
            and not _is_named(client, scale_set_id, *named)
        ):
            log.warning(
                "pool %s: scale set %d in its status is not its scale set %r on GitHub: left alone",
                pool.key,
                scale_set_id,
                named[1],
            )
            recorded = None
        for gone in dict.fromkeys(one for one in (recorded, found) if one):
            try:
                client.delete_scale_set(gone)
            except ScaleSetNotFound:
                continue  # gone already: what the deletion wanted

    def _left_to_another_deleted_pool(self, pool: PoolRef, runner_group: str | None, name: str) -> bool:
        """True when a pool being deleted after this one deletes the scale set
        (``ScaleSetClaims.deleted_too``); raises ``ScaleSetStillUsed`` while one before it is
        not gone."""
        after, before = self._claims.deleted_too(pool, runner_group, name)
        if after:
            log.info(
                "pool %s: scale set %r is left to pool(s) %s, being deleted too, to delete",
                pool.key,
                name,
                ", ".join(after),
            )
            return True
        if before:
            raise ScaleSetStillUsed(
                f"pool(s) {', '.join(before)}, being deleted too, name scale set {name} and may "
                "still run jobs in it: it is deleted once they are gone"
            )
        return False

    @staticmethod
    def _found(client: ScaleSetClient, runner_group: str | None, name: str) -> int | None:
        """The id of the scale set of that name in that runner group on GitHub; None when there
        is none (or no such group)."""
        try:
            group = client.runner_group(runner_group or DEFAULT_RUNNER_GROUP)
        except RunnerGroupNotFound:
            return None  # a scale set lives in its group: none there
        found = client.scale_set(group.id, name)
        return None if found is None else found.id


def _scale_set_named(reads: ScaleSetPoolReads, pool: PoolRef) -> tuple[str | None, str] | None:
    """The pool's ``spec.runnerGroup`` and ``spec.scaleSet.name``; None when its spec is not
    readable."""
    parsed = reads.pool(pool.namespace, pool.name)
    spec = None if parsed is None or parsed.model is None else parsed.model.spec
    if spec is None or spec.scale_set is None:
        return None
    return spec.runner_group, spec.scale_set.name


def _is_named(client: ScaleSetClient, scale_set_id: int, runner_group: str | None, name: str) -> bool:
    """Whether GitHub's scale set ``scale_set_id`` is the one called ``name`` in ``runner_group``
    (names compared as GitHub does, case-folded); False when there is no such scale set. A runner
    group GitHub no longer has by that name (renamed, deleted) is not held against it: the pool's
    own scale set would otherwise be left registered."""
    try:
        recorded = client.scale_set_by_id(scale_set_id)
    except ScaleSetNotFound:
        return False
    if recorded.name.casefold() != name.casefold():
        return False
    try:
        group = client.runner_group(runner_group or DEFAULT_RUNNER_GROUP)
    except RunnerGroupNotFound:
        return True
    return recorded.runner_group_id == group.id


def scale_set_policy(github: GitHubSettings) -> Policy:
    """The Actions service calls' deadline and answer cap: ``--github-timeout`` and
    ``--github-max-response-bytes``, as for every other GitHub call (the long poll keeps its
    own deadline, longer than the service holds it)."""
    return Policy(timeout=float(github.timeout), max_response_bytes=github.max_response_bytes)


@dataclass(frozen=True)
class ScaleSetParts:
    """What the operator's assembly hands on: the secret updater's JIT source, the runner
    managers' way to remove a scale set's runners, the reconciler's ``PoolJobs.scale_sets`` and
    the leader's listeners (a ``Runnable``)."""

    jit: ScaleSetJitConfigs
    removal: ScaleSetRunnerRemoval
    pools: PoolScaleSets
    listeners: ScaleSetListeners


def assemble(
    reads: ScaleSetPoolReads,
    kube: Kube,
    rest: RestClients,
    settings: Settings,
    allowed: Callable[[api.RunnerPool], bool],
    *,
    access: NamespaceRefusals,
) -> ScaleSetParts:
    """The scale-set side of the operator: one client cache, the listeners of the pools in
    enabled namespaces that the allow-list admits (``allowed``), writing ``status.scaleSet``;
    the session owner is the leader's identity (else the host name, as ARC's listener pod's).

    A scale set's claims count the pools the allow-list admits in namespaces not known to be
    refused (``access``), not only in those known enabled. Right after a start or a leadership
    change no namespace is known enabled until a pass there checks it (a deleted pool's
    finalizer checks only its own): counting only the enabled ones, it saw no other pool naming
    its scale set and deleted it, busy runners of that other pool and all."""
    policy = scale_set_policy(settings.github)
    clients = ScaleSetClients(rest, wire=lambda: Wire(policy), hosts=settings.github.hosts.hosts)
    finalized = JustFinalized()
    listened = listened_pools(reads, settings.github.pool_ref, allowed, finalized)

    def claimable(pool: api.RunnerPool) -> bool:
        return settings.tenants.allows_pool(pool) and not access.refused(pool.namespace)

    claims = ScaleSetClaims(
        listened_pools(reads, settings.github.pool_ref, claimable),
        reads,
        every=listened_pools(reads, settings.github.pool_ref, lambda pool: True),
    )
    listeners = ScaleSetListeners(
        listened,
        listener_factory(
            clients,
            StatusSink(kube, reads),
            owner=settings.leader_election.identity or socket.gethostname(),
            holder=claims.holder,
        ),
        resume=resumed_view(reads),
    )
    return ScaleSetParts(
        ScaleSetJitConfigs(clients, reads),
        ScaleSetRunnerRemoval(reads, clients),
        PoolScaleSets(clients, listeners, reads, claims, finalized),
        listeners,
    )
