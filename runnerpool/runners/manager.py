"""One runner manager per scope and credential: list the scope's runners, then act for each of
its pools that list with that credential.

Scheduling: one APScheduler job per listing (repository or organization on one GitHub host, as
one namespace's credential Secret sees it: ``ListingKey``), run by a small thread pool
(``RunnerSettings.threads``) so that hundreds of repository-scoped pools neither need hundreds
of threads nor send hundreds of concurrent requests (GitHub's secondary limits start at 100). A
scope's run never overlaps itself (``runnerpool.scheduling``); each run sets its own next run
time from the budget rule (``runnerpool.github.budget``). A scope whose job was replaced (its
last pool went and a new one came, e.g. the pool's credential Secret changed) runs the new job
at once; the old run stops acting at its next step and leaves the new job's schedule alone. The
reconciler registers a pool with ``start`` on every converge and removes it with ``stop`` when
the pool goes; the last pool of a scope removes the scope's job. The operator runs this only on
the leader, like the workers.

A run lists the scope once through the shared listing, then for each pool: publishes its
runner counts (and enqueues the pool when they changed, so the reconciler writes
``status.runners``), and carries out the pure decisions of ``runnerpool.runners.lifecycle``
(finished pods, offline runners, busy marks) and ``runnerpool.runners.retirement``
(scale-down and rollout: the only way runner pods of a live pool are taken away).

Ownership: the runner managers are the one owner of runner deletion on GitHub (here, and
``runnerpool.runners.leftovers`` for a JIT fill's leftover) and of runner pod deletion. They
start and stop jobs only: ``runnerpool.runtime.runnables.scheduler_runnable`` owns the
scheduler's lifecycle.

The reconciler brings a scope's round forward (``bring_round_forward``) when it sees pods to
take away, so a scale-down or a rollout step does not wait for the next listing; such
requests are folded into one run at most every ``kick_gap`` seconds (``--runner-kick-gap``),
and an unchanged listing costs a free 304.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from kubernetes.client.rest import ApiException

from runnerpool import api, autoscaling, log_context, naming
from runnerpool.api_errors import describe, is_refusal, log_failure
from runnerpool.domain import Drain, PoolRef, StuckPod, parse_duration, pool_key, utcnow
from runnerpool.github.budget import ScopeBackoff, listing_cost, next_listing_delay
from runnerpool.github.credentials import CredentialError, teardown_client
from runnerpool.github.errors import GitHubError, RateLimited, Unavailable
from runnerpool.github.protocol import GitHubClient, GitHubClients, RateLimitAware
from runnerpool.github.types import DeleteOutcome, Runner
from runnerpool.reads import PodsNotCachedError, Reads, parse_pool
from runnerpool.runners import lifecycle, metrics, retirement
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.runners.listing import ListingKey, SharedListing, Snapshot, runner_counts
from runnerpool.runners.removal import DeleteRunner, ServiceRemoval, deleter
from runnerpool.runtime.kube import PODS, RUNNER_POOLS, Kube
from runnerpool.scheduling import add_self_scheduling_job
from runnerpool.settings import RunnerSettings

__all__ = ["KubePods", "PodWriter", "RunnerManagers"]

log = logging.getLogger(__name__)


class PodWriter(Protocol):
    def delete_pod(self, namespace: str, name: str, uid: str, resource_version: str | None) -> bool: ...
    def hurry_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        resource_version: str,
        grace: int,
        *,
        unmark: dict[str, Any] | None,
    ) -> bool: ...
    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...
    def desired_now(self, namespace: str, name: str) -> int | None: ...


class KubePods:
    """Pod writes with the guards the decisions rely on."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    def desired_now(self, namespace: str, name: str) -> int | None:
        """The pool's ``autoscaling.desired_replicas`` as the API server has it (``None``: gone,
        being deleted, or not decided yet): one GET, for a round about to retire pods of a pool
        that follows demand (``RunnerManagers._confirmed``)."""
        raw = self._kube.get_if_there(RUNNER_POOLS, namespace, name)
        pool = None if raw is None else parse_pool(raw).model
        return None if pool is None or pool.deleting else autoscaling.desired_replicas(pool)

    def delete_pod(self, namespace: str, name: str, uid: str, resource_version: str | None) -> bool:
        """Delete only the pod as it was decided on: a restart since then changed its
        resourceVersion, and the API server answers 409 instead of deleting (``None``: any
        version of that pod, for a pool being deleted whose runners are all gone)."""
        return self._delete(namespace, name, uid, resource_version, {})

    def hurry_pod(
        self,
        namespace: str,
        name: str,
        uid: str,
        resource_version: str,
        grace: int,
        *,
        unmark: dict[str, Any] | None,
    ) -> bool:
        """Delete a pod being deleted again, as it was decided on, with a shorter ``grace``
        (``gracePeriodSeconds``, counted from its first deletion: ``lifecycle.hurried_grace``).

        ``unmark``: the pod still carries the busy mark (a pod being deleted keeps it), which
        its runner no longer deserves: GitHub showed it idle or gone. It is taken off first,
        on the same version: deploy/optional/busy-runner-deletion refuses any shorter grace for
        a marked pod, whoever asks."""
        if unmark is not None:
            try:
                meta = {**unmark["metadata"], "resourceVersion": resource_version}
                patched = self._kube.patch(PODS, namespace, name, {**unmark, "metadata": meta})
            except ApiException as err:
                if err.status in (404, 409):
                    return False
                raise
            resource_version = patched["metadata"]["resourceVersion"]
        return self._delete(namespace, name, uid, resource_version, {"gracePeriodSeconds": grace})

    def _delete(
        self, namespace: str, name: str, uid: str, resource_version: str | None, options: dict[str, Any]
    ) -> bool:
        preconditions = {"uid": uid}
        if resource_version is not None:
            preconditions["resourceVersion"] = resource_version
        try:
            self._kube.delete(PODS, namespace, name, {"preconditions": preconditions, **options})
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise
        return True

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        try:
            self._kube.patch(PODS, namespace, name, patch)
        except ApiException as err:
            if err.status != 404:
                raise


#: "Started after that listing": a listing's start time plus the clock's resolution.
_LATER = timedelta(microseconds=1)


@dataclasses.dataclass(frozen=True)
class _Drained:
    """What a drain pass did on GitHub: runners still busy, runners it deregistered, the pods
    that may go now (``DELETE_POD`` decisions; none while a runner is busy), and how many pods
    stuck Terminating it no longer waits for."""

    busy: int
    deregistered: int
    deletions: tuple[lifecycle.PodDecision, ...] = ()
    #: Pods given up on (stuck Terminating) that GitHub has no runner of: not waited for.
    abandoned: int = 0


@dataclasses.dataclass(frozen=True)
class _DrainMemo:
    """What a deleted pool's drain remembers between its passes (see ``RunnerManagers.drain``)."""

    #: The earliest start the next listing may have.
    since: datetime
    #: Whether the pool's pods were seen gone by then.
    gone_seen: bool = False
    #: Scheduled pods deleted before any listing showed their runner (one still registering,
    #: say): a runner that registered as its pod went is looked up by name once the pods are
    #: gone, since one listing of a busy scope can miss it (pages shift as runners come and go).
    unlisted: frozenset[str] = frozenset()


class RunnerManagers:
    """All scopes' runner managers, on one scheduler."""

    def __init__(
        self,
        pools: Reads,
        clients: GitHubClients,
        pods: PodWriter,
        notify: Callable[[str], None],
        scheduler: BaseScheduler,
        *,
        listing: SharedListing | None = None,
        settings: RunnerSettings = RunnerSettings(),
        clock: Callable[[], datetime] = utcnow,
        wanted_hash: Callable[[api.RunnerPool], str] | None = None,
        removal: ServiceRemoval | None = None,
    ) -> None:
        interval = settings.sync_interval
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._pools = pools
        self._clients = clients
        self._pods = pods
        self._notify = notify
        self.listing = listing or SharedListing(clock)
        self._interval = interval
        self._clock = clock
        self._wanted_hash = wanted_hash
        #: Scale-set pools' runners go through the Actions service (``runnerpool.runners.removal``).
        self._removal = removal
        self._registration_timeout = timedelta(seconds=settings.registration_timeout)
        self._kick_gap = settings.kick_gap
        self._last_run: dict[ListingKey, datetime] = {}
        self._brought_forward: set[ListingKey] = set()
        self._running: set[ListingKey] = set()
        # Which job of a scope is the live one: a scope that lost its last pool and got a new
        # one has a new job at once (runnerpool.scheduling), while the old one's run may go
        # on; that stale run must neither act further nor set the new job's schedule.
        self._generations: dict[ListingKey, int] = {}
        self._generation_count = 0
        self._lock = threading.Lock()
        self._refs: dict[str, PoolRef] = {}
        self._scopes: dict[ListingKey, dict[str, PoolRef]] = {}
        self._counts: dict[str, api.RunnerCounts] = {}
        self._marks_refused: dict[str, str] = {}
        self._credentials: dict[ListingKey, str] = {}
        # Per pool being drained (see ``drain``).
        self._drained: dict[str, _DrainMemo] = {}
        # Shared by a scope's rounds and its deleted pools' drains, and kept after the scope's
        # last pool went (its finalizer drains after that): see runnerpool.github.budget.
        self._backoff = ScopeBackoff(interval, lambda: self._clock().timestamp())
        self._stopping = threading.Event()
        self._scheduler = scheduler

    # -- registry (driven by the reconciler) ----------------------------------------------------

    def start(self, pool: PoolRef) -> None:
        """Manage ``pool``'s runners; a new scope gets its first run now. A live pool is not
        being drained: what an earlier drain under its name remembered goes (one that ended
        without its last pass, by a lost credential or a finalizer taken off by hand, would
        let a later deletion of a pool of that name skip the listing that finds late runners)."""
        key = ListingKey.of(pool)
        with self._lock:
            self._drained.pop(pool.key, None)
            if self._refs.get(pool.key) == pool:
                return
            old = self._refs.get(pool.key)
            if old is not None:
                self._detach(old)
            self._refs[pool.key] = pool
            members = self._scopes.setdefault(key, {})
            members[pool.key] = pool
            if len(members) == 1:
                self._generation_count += 1
                self._generations[key] = self._generation_count
                add_self_scheduling_job(
                    self._scheduler,
                    self._run,
                    (key, self._generation_count),
                    job_id=str(key),
                    name=f"runner manager {key}",
                    first_run=self._clock(),
                    safety_net_seconds=self._interval * 10,
                )
                log.info("runner manager started for %s", key)
            elif key in self._running:
                # The run in progress read its pools before this one joined: once more, soon.
                self._brought_forward.add(key)

    def stop(self, namespace: str, name: str) -> None:
        key = pool_key(namespace, name)
        with self._lock:
            ref = self._refs.pop(key, None)
            if ref is not None:
                self._detach(ref)
            self._counts.pop(key, None)
            self._marks_refused.pop(key, None)
        metrics.forget_pool(namespace, name)

    def counts(self, namespace: str, name: str) -> api.RunnerCounts | None:
        """The pool's runner counts from the latest listing; ``None`` before its first one."""
        with self._lock:
            return self._counts.get(pool_key(namespace, name))

    def mark_refused(self, namespace: str, name: str) -> str | None:
        """What the cluster said of the busy marks (or unmarks) of the pool's latest round that
        it refused; ``None`` when it refused none."""
        with self._lock:
            return self._marks_refused.get(pool_key(namespace, name))

    def drain(self, pool: PoolRef) -> Drain:
        """For a deleted pool's finalizer: delete its idle runners on GitHub now, and once none
        is busy, its pods the busy-safe way (``lifecycle.drained``: a running pod whose runner
        the listing missed waits for a listing that started after its container, and goes only
        once GitHub, asked by the pod's name, has no runner of it either: ``_looked_up``). The
        only other place runner pods are deleted is a live pool's round. Pods still Terminating
        past their deletion time are named in ``Drain.stuck``; given up on
        (``lifecycle.given_up``: their node lost) and confirmed runnerless by GitHub, they are
        no longer counted in ``pods_left``.

        The pool's runners come from the scope's shared listing, one at most every
        ``kick_gap`` for all the pools of the scope being drained (``SharedListing.recent``):
        on the first pass one no older than ``kick_gap``; after a pass that left runners or
        pods behind, one that started after that pass; once the pool's pods are gone, one
        that started after they were first seen gone, so that a runner that registered late
        is found before the finalizer lets go. Until such a listing is due, this returns at
        once with ``listing_wait`` set. A runner listed busy is not even asked for: GitHub
        would refuse, and the request would only spend budget. 204 and 404 both mean the
        runner is gone. Raises ``GitHubError`` or ``CredentialError``.

        However often the finalizer asks, the scope's GitHub calls back off after a failure
        (``ScopeBackoff``): meanwhile this raises the last failure again without a request.
        Either way the raised error's ``retry_after`` is the scope's wait, which the finalizer
        follows.
        """
        key = ListingKey.of(pool)
        refusal = self._backoff.refusal(key)
        if refusal is not None:
            raise refusal
        # Credential protection keeps the Secret while the pool needs it; what it cannot keep
        # (a Secret deleted before it was protected, the CA bundle or proxy login a deleted
        # namespace took along) is served by the last client that worked for the pool.
        github = teardown_client(self._clients, pool)
        # The pod cache can only lag behind deletions, so "none left" is never early; read
        # before the listing, so that the listing that confirms "none left" started later.
        pods = [lifecycle.PodView.of(pod) for pod in self._pools.list_pods(pool.namespace, pool.name)]
        now = self._clock()
        waited = [view for view in pods if not lifecycle.given_up(view, now)]
        stuck = tuple(_stuck(view) for view in pods if lifecycle.overdue(view, now))
        try:
            since = self._listed_since(pool, gone=not waited)
            snapshot = self.listing.recent(key, pool.scope, github, since=since, gap=self._kick_gap)
            if not isinstance(snapshot, Snapshot):
                return Drain(busy=0, deregistered=0, pods_left=len(pods), listing_wait=snapshot, stuck=stuck)
            unlisted = self._unlisted(pool) if not waited else ()
            done = self._deregister_drained(
                pool, github, snapshot, pods, confirm=not waited, unlisted=unlisted
            )
        except GitHubError as err:
            wait = self._backoff.failed(key, err)
            log.info("deregistration in %s paused for %.0fs: %s", key, wait, err.reason)
            raise self._backoff.refusal(key) or err from err  # with the scope's wait
        self._backoff.succeeded(key)
        left = len(pods) - done.abandoned
        self._remember(pool, done, snapshot.started_at, gone=not waited, left=left)
        if done.busy:
            return Drain(busy=done.busy, deregistered=done.deregistered, pods_left=left, stuck=stuck)
        deleted = self._delete_pods(pool, done.deletions)
        return Drain(0, done.deregistered, pods_deleted=deleted, pods_left=left, stuck=stuck)

    def _deregister_drained(
        self,
        pool: PoolRef,
        github: GitHubClient,
        snapshot: Snapshot,
        pods: list[lifecycle.PodView],
        *,
        confirm: bool,
        unlisted: Iterable[str] = (),
    ) -> _Drained:
        """Deregister the pool's idle runners ``snapshot`` shows; once none is busy, look up the
        runners of the running pods it showed none for (``_looked_up``), deregister those too,
        and say which pods may go (``lifecycle.drained``).

        ``confirm``: only pods given up on are left (``lifecycle.given_up``: stuck Terminating,
        their node lost); those GitHub has no runner of, neither listed nor looked up by name,
        are no longer waited for (``_Drained.abandoned``). One listed is deregistered now and
        confirmed by the next pass. ``unlisted``: pods gone before their runner was listed
        (``_DrainMemo``), looked up by name too when this listing does not show them."""
        delete_runner = deleter(self._removal, pool, github)
        runners = self._drained_runners(pool, snapshot, (view.name for view in pods))
        busy, deregistered = self._deregister_marking(pool, delete_runner, pods, runners)
        if busy:
            return _Drained(busy, deregistered)
        listed = {runner.name: runner for runner in runners}
        decisions = [lifecycle.drained(view, listed.get(view.name), snapshot.started_at) for view in pods]
        doubtful = [d.pod.name for d in decisions if d.action is lifecycle.Action.LOOK_UP_AND_DELETE]
        confirming = [view.name for view in pods if view.name not in listed] if confirm else []
        asked = {*doubtful, *confirming}
        late = [name for name in unlisted if name not in listed and name not in asked]
        found = self._looked_up(pool, github, snapshot, doubtful + confirming + late)
        busy, more = self._deregister_marking(pool, delete_runner, pods, found.values())
        if busy:
            return _Drained(busy, deregistered + more)
        deletions = tuple(
            lifecycle.looked_up(decision, found.get(decision.pod.name))
            for decision in decisions
            if decision.action is not lifecycle.Action.KEEP
        )
        abandoned = sum(1 for name in confirming if name not in found)
        return _Drained(0, deregistered + more, deletions, abandoned)

    def _deregister_marking(
        self,
        pool: PoolRef,
        delete_runner: DeleteRunner,
        pods: Sequence[lifecycle.PodView],
        runners: Iterable[Runner],
    ) -> tuple[int, int]:
        """A drain's ``_deregister``, marking the pods of the runners listed busy, and of those
        GitHub answered busy (``lifecycle.busy_marks``): (busy, deregistered)."""
        runners = list(runners)
        self._mark(pool, lifecycle.busy_marks(pods, runners), self._stopping.is_set)
        busy, deregistered, refused = _deregister(delete_runner, runners)
        self._mark(pool, lifecycle.busy_marks(pods, refused), self._stopping.is_set)
        return busy, deregistered

    def _mark(
        self, pool: PoolRef, marks: Iterable[lifecycle.BusyMark], halted: Callable[[], bool]
    ) -> list[str]:
        """Patch the marks on (or off), each only while not ``halted``; one that fails is logged,
        not raised: a drain must go on (its runners' deregistration does not depend on the
        marks), and the next round marks again. Returns what the cluster said of the marks it
        refused as asked (an admission policy, say: ``api_errors.is_refusal``), for the pool's
        Event (``mark_refused``): asking again will not change it."""
        refused: list[str] = []
        for mark in marks:
            if halted():
                break
            try:
                self._pods.patch_pod(pool.namespace, mark.pod.name, mark.patch())
            except ApiException as err:
                log_failure(
                    log, logging.WARNING, "cannot mark pod %s/%s", pool.namespace, mark.pod.name, err=err
                )
                if is_refusal(err):
                    refused.append(_mark_refusal(pool, mark, err))
        return refused

    def _publish_refusal(self, ref: PoolRef, said: str | None) -> None:
        """What the cluster said of this round's refused marks (``None``: none refused);
        the reconciler is told when that changed."""
        with self._lock:
            if ref.key not in self._refs or self._marks_refused.get(ref.key) == said:
                return
            if said is None:
                del self._marks_refused[ref.key]
            else:
                self._marks_refused[ref.key] = said
        self._notify(ref.key)

    def _looked_up(
        self, pool: PoolRef, github: GitHubClient, snapshot: Snapshot, names: Iterable[str]
    ) -> dict[str, Runner]:
        """The pool's runners GitHub has under ``names`` (pods no listing showed a runner for:
        running ones about to be deleted, ``LOOK_UP_AND_DELETE``, stuck ones about to be given
        up on, and ones that outlived their stop, ``_hurry``), by pod name.

        A paged listing can miss a runner, busy or not (``lifecycle``), and a busy one's pod must
        stay. One request per such pod, answered from GitHub's ``name`` filter (a conditional
        page: the same answer again is a free 304). Such pods are few: a pod whose runner an
        earlier pass deregistered while its container still runs, or one a listing missed; a
        pod whose runner a listing showed, or whose container stopped, needs none.
        """
        found: dict[str, Runner] = {}
        for name in names:
            runners = tuple(github.runners_named(pool.scope, name))
            ours = self._drained_runners(pool, dataclasses.replace(snapshot, runners=runners), [name])
            # A busy runner of the pod's very name keeps the pod whatever labels it shows: the
            # labels may no longer say whose it is (a scale set another pool adopted relabels its
            # runners), and waiting for a job costs only time. Only ours is ever deregistered.
            for runner in [*ours, *(runner for runner in runners if runner.busy)]:
                if name not in found or runner.busy:  # two of one name: the busy one decides
                    found[name] = runner
        return found

    def _drained_runners(self, pool: PoolRef, snapshot: Snapshot, pod_names: Iterable[str]) -> list[Runner]:
        """A deleted pool's runners in ``snapshot`` (``_runners_of``, while the cache still has it)."""
        parsed = self._pools.pool(pool.namespace, pool.name)
        if parsed is None or parsed.model is None:
            return snapshot.of_pool(pool.namespace, pool.name)
        return _runners_of(parsed.model, snapshot, pod_names, self._pools)

    def _delete_pods(self, pool: PoolRef, deletions: Iterable[lifecycle.PodDecision]) -> int:
        """The pods ``deletions`` let go (a drain's once none of the pool's runners is busy, and
        ``_hurry``'s); how many deletions began (a pod told to stop again is not counted: it was
        counted when it was first deleted). A deletion the cluster refuses holds up none of the
        others (their runners are deregistered already); the first refusal is raised after them,
        for the pool to say so."""
        deleted = 0
        refused: ApiException | None = None
        for decision in deletions:
            view = decision.pod
            try:
                if decision.grace_seconds is not None:
                    self._hurry_pod(pool, view, decision.grace_seconds)
                    continue
                version = None if decision.runner is not None else (view.resource_version or None)
                deleted += self._pods.delete_pod(pool.namespace, view.name, view.uid, version)
            except ApiException as err:
                refused = refused or err
        if refused is not None:
            raise refused
        return deleted

    def _hurry_pod(self, pool: PoolRef, view: lifecycle.PodView, grace: int) -> None:
        """Delete ``view`` again with ``grace`` (``lifecycle.hurried_grace``), as it was decided
        on (its resourceVersion: a container that ended since changed it, and 409 means done)."""
        unmark = lifecycle.BusyMark(view, False).patch() if view.busy_marked else None
        if self._pods.hurry_pod(
            pool.namespace, view.name, view.uid, view.resource_version, grace, unmark=unmark
        ):
            log.info(
                "pod %s/%s still ran its runner container more than %ds after it was told to stop; "
                "told again, to be killed %ds from now",
                pool.namespace,
                view.name,
                lifecycle.STOP_OVERDUE.total_seconds(),
                lifecycle.HURRY_SECONDS,
            )

    def _listed_since(self, pool: PoolRef, *, gone: bool) -> datetime:
        """Since when the pool's listing must have started; see ``drain``."""
        now = self._clock()
        with self._lock:
            memo = self._drained.get(pool.key, _DrainMemo(now - timedelta(seconds=self._kick_gap)))
            if gone and not memo.gone_seen:
                memo = dataclasses.replace(memo, since=max(memo.since, now), gone_seen=True)
                self._drained[pool.key] = memo
            return memo.since

    def _remember(self, pool: PoolRef, done: _Drained, listed_at: datetime, *, gone: bool, left: int) -> None:
        """After a drain pass: the pool's ``_DrainMemo`` for the next, or none once it is done."""
        with self._lock:
            if not (done.busy or left):
                self._drained.pop(pool.key, None)
                return
            # Only a scheduled pod can have registered a runner: one never scheduled (a pool
            # deleted while its pods waited for room) would cost a request each for nothing.
            went = (d.pod.name for d in done.deletions if d.runner is None and d.pod.node)
            unlisted = self._drained.get(pool.key, _DrainMemo(listed_at)).unlisted.union(went)
            # The next pass needs a listing that started after this one's.
            self._drained[pool.key] = _DrainMemo(listed_at + _LATER, gone, unlisted)

    def _unlisted(self, pool: PoolRef) -> tuple[str, ...]:
        """The pods the drain deleted before a listing showed their runner (``_DrainMemo``)."""
        with self._lock:
            memo = self._drained.get(pool.key)
        return tuple(sorted(memo.unlisted)) if memo is not None else ()

    def delete_leftover(
        self, github: GitHubClient, pool: PoolRef, name: str, *, runner_id: int | None = None
    ) -> DeleteOutcome | None:
        """A JIT fill's leftover runner (``runnerpool.runners.leftovers``), deleted the pool's way."""
        return delete_leftover_runner(github, pool, name, runner_id=runner_id, removal=self._removal)

    def _detach(self, ref: PoolRef) -> None:
        """Under ``_lock``: take ``ref`` out of its scope, and the scope away if it was the last."""
        key = ListingKey.of(ref)
        members = self._scopes.get(key, {})
        members.pop(ref.key, None)
        if members:
            return
        self._scopes.pop(key, None)
        self._generations.pop(key, None)
        self._running.discard(key)
        self._credentials.pop(key, None)
        self._last_run.pop(key, None)
        self._brought_forward.discard(key)
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(str(key))
        self.listing.forget(key)
        metrics.forget_scope(str(key))
        log.info("runner manager stopped for %s", key)

    def bring_round_forward(self, namespace: str, name: str) -> None:
        """Run the pool's scope soon (not before ``kick_gap`` after its last run)."""
        with self._lock:
            ref = self._refs.get(f"{namespace}/{name}")
            if ref is None:
                return
            key = ListingKey.of(ref)
            if key in self._brought_forward:
                return  # already brought forward, or noted by the run in progress
            self._brought_forward.add(key)
            if key in self._running:
                return  # the run's end schedules the next one ``kick_gap`` later
            last = self._last_run.get(key)
            soonest = self._clock()
            if last is not None:
                soonest = max(soonest, last + timedelta(seconds=self._kick_gap))
            job = self._scheduler.get_job(str(key))
            if job is None or (job.next_run_time is not None and job.next_run_time <= soonest):
                return
            self._scheduler.modify_job(str(key), next_run_time=soonest)

    def scopes(self) -> list[ListingKey]:
        with self._lock:
            return sorted(self._scopes, key=str)

    def stop_all(self) -> None:
        """Stop for good: no GitHub or pod write starts after this returns (the scheduler is
        shut down by its owner, ``scheduler_runnable``)."""
        self._stopping.set()

    # -- one run ----------------------------------------------------------------------------------

    def _run(self, key: ListingKey, generation: int) -> None:
        """Scheduler entry point: never raises, always leaves a next run behind (if still
        the scope's live job: a stale run ends quietly, its replacement runs on its own)."""
        with self._lock:
            if not self._is_live(key, generation):
                return
            self._last_run[key] = self._clock()
            self._brought_forward.discard(key)
            self._running.add(key)
        try:
            delay = self.sync(key, generation)
        except Exception as err:
            log_failure(log, logging.WARNING, "runner manager for %s failed", key, err=err)
            delay = self._interval
        with self._lock:
            if not self._is_live(key, generation):
                return
            self._running.discard(key)
            if key in self._brought_forward:  # brought forward while this run was going: once more, soon
                delay = min(delay, self._kick_gap)
            with contextlib.suppress(JobLookupError):
                self._scheduler.modify_job(str(key), next_run_time=self._clock() + timedelta(seconds=delay))

    def _is_live(self, key: ListingKey, generation: int | None) -> bool:
        """Under ``_lock``: the run of ``generation`` (``None``: a direct call) may act."""
        return key in self._scopes and (generation is None or self._generations.get(key) == generation)

    def _halted(self, key: ListingKey, generation: int | None) -> bool:
        if self._stopping.is_set():
            return True
        with self._lock:
            return not self._is_live(key, generation)

    def sync(self, key: ListingKey, generation: int | None = None) -> float:
        """List the scope once and act for each of its pools; returns seconds to the next run.

        ``generation``: the job's, so that a run whose job was replaced meanwhile stops acting.
        """
        with self._lock:
            refs = sorted(self._scopes.get(key, {}).values(), key=lambda ref: ref.key)
        if not refs:
            return self._interval
        try:
            snapshot, github = self._list(key, refs)
        except (GitHubError, CredentialError) as err:
            metrics.LISTING_FAILURES.labels(str(key), err.reason).inc()
            log.warning("cannot list the runners of %s: %s: %s", key, err.reason, err.message)
            if isinstance(err, GitHubError):
                self._backoff.failed(key, err)
            delay = next_listing_delay(self._interval, None, 0.0, retry_after=err.retry_after)
            metrics.SYNC_DELAY.labels(str(key)).set(delay)
            return delay
        self._backoff.succeeded(key)
        retry_after: float | None = None
        for ref in refs:
            if self._halted(key, generation):
                break
            try:
                self._sync_pool(ref, snapshot, lambda: self._halted(key, generation))
            except (RateLimited, Unavailable) as err:
                # GitHub said stop, or is down: the other pools' deletes would only fail too.
                log.warning("runner manager for %s paused: %s: %s", key, err.reason, err.message)
                retry_after = max(self._backoff.failed(key, err), err.retry_after or 0.0)
                break
            except (GitHubError, CredentialError, ApiException) as err:
                # One pool's trouble must not starve the others of their turn.
                log.warning("runner manager for pool %s: %s", ref.key, describe(err))
        return self._next_delay(key, github, snapshot, retry_after)

    def _list(self, key: ListingKey, refs: list[PoolRef]) -> tuple[Snapshot, GitHubClient]:
        """List with the credential the key names (every pool of ``refs`` uses it: ``ListingKey``).
        Another Secret's failure cannot blind these pools: it lists under a key of its own."""
        ref = refs[0]
        github = self._clients.get(ref.namespace, ref.credential_secret_name, ref.api_url, ref.connection)
        return self.listing.fetch(key, ref.scope, github), github

    @log_context.runs_for_pool
    def _sync_pool(self, ref: PoolRef, snapshot: Snapshot, halted: Callable[[], bool]) -> None:
        parsed = self._pools.pool(ref.namespace, ref.name)
        pool = parsed.model if parsed is not None else None
        if pool is None:
            return  # gone, or invalid: the reconciler reports it
        if pool.deleting:
            return  # its finalizer has deregister() remove the runners now
        try:
            listed = self._pools.list_pods(ref.namespace, ref.name)
        except PodsNotCachedError:
            return  # its namespace no longer enabled: no runner is judged by pods not seen
        pods = [lifecycle.PodView.of(pod) for pod in listed]
        runners = _runners_of(pool, snapshot, (pod.name for pod in pods), self._pools)
        self._publish(ref, runner_counts(runners))
        todo = lifecycle.plan(
            pods,
            runners,
            self._clock(),
            _deadline(pool),
            self._registration_timeout,
            listing_started=snapshot.started_at,
        )
        wanted = self._wanted_hash(pool) if self._wanted_hash is not None else None
        desired = autoscaling.desired_replicas(pool)  # the reconciler's decision, on the pool
        retire = retirement.retirements(todo.decisions, desired, wanted) if desired is not None else ()
        if retire and pool.spec.autoscaling is not None:
            retire = self._confirmed(ref, todo.decisions, wanted)
        if retire:
            todo = dataclasses.replace(todo, replace=todo.replace + retire)
        if not (todo.collect or todo.replace or todo.marks or todo.outlived):
            self._publish_refusal(ref, None)
            return
        github = self._clients.get(ref.namespace, ref.credential_secret_name, ref.api_url, ref.connection)
        busy, refused = self._carry_out(ref, github, todo, halted)
        if not halted():  # a round cut short may not have met the refusal it would meet again
            self._publish_refusal(ref, "; ".join(sorted(set(refused))) or None)
        self._hurry(ref, github, snapshot, todo, runners=runners, busy=busy, halted=halted)

    def _confirmed(
        self, ref: PoolRef, decisions: Sequence[lifecycle.PodDecision], wanted: str | None
    ) -> tuple[lifecycle.PodDecision, ...]:
        """The retirements of a pool that follows demand, decided again on the desired count the
        API server has now.

        The reconciler writes ``status.desiredReplicas`` before it creates the pods of a
        scale-up, but the pool and its pods reach this round through two watches: a round
        could see the new pods and the count before them, take the new pods for surplus and
        delete them (and a JIT pool's runners with them), again for as long as the pools'
        watch lagged. A pool with a fixed size has no such race: the reconciler reads its
        ``spec.replicas`` from the same cache as this round."""
        desired = self._pods.desired_now(ref.namespace, ref.name)
        return retirement.retirements(decisions, desired, wanted) if desired is not None else ()

    def _publish(self, ref: PoolRef, counts: api.RunnerCounts) -> None:
        with self._lock:
            if ref.key not in self._refs:
                return  # stopped meanwhile: do not bring its series back
            changed = self._counts.get(ref.key) != counts
            self._counts[ref.key] = counts
            metrics.publish_counts(ref.namespace, ref.name, counts)
        if changed:
            self._notify(ref.key)

    def _carry_out(
        self, ref: PoolRef, github: GitHubClient, todo: lifecycle.Plan, halted: Callable[[], bool]
    ) -> tuple[frozenset[int], list[str]]:
        """Collects, replaces and marks, in that order, until ``halted``. Returns the ids of the
        runners to collect that GitHub answered busy (422): listed offline and idle, they had a
        job all the same; and the marks the cluster refused (``_mark``)."""
        delete_runner = deleter(self._removal, ref, github)
        busy = self._collect(ref, delete_runner, todo.collect, halted)
        kept = self._replace(ref, delete_runner, todo.replace, halted) if not halted() else []
        # A pod kept by a 422 is marked busy whatever the listing said of its mark (the 422
        # proves the job before a listing does), and the listing's older unmark is dropped.
        names = {pod.name for pod in kept}
        marks = [mark for mark in todo.marks if mark.pod.name not in names]
        refused = self._mark(
            ref, [*(lifecycle.BusyMark(pod, True) for pod in kept if not pod.deleting), *marks], halted
        )
        return busy, refused

    def _collect(
        self,
        ref: PoolRef,
        delete_runner: DeleteRunner,
        runners: Sequence[Runner],
        halted: Callable[[], bool],
    ) -> frozenset[int]:
        """Deletes the offline runners whose pods are gone or terminating; returns those GitHub
        answered busy."""
        busy: set[int] = set()
        for runner in runners:
            if halted():
                break
            outcome = delete_runner(runner.id)
            if outcome is DeleteOutcome.BUSY:
                busy.add(runner.id)
            if outcome is DeleteOutcome.DELETED:
                metrics.RUNNERS_COLLECTED.labels(ref.namespace, ref.name).inc()
                log.info(
                    "deleted offline runner %s (id %d) of pool %s: its pod is gone or terminating",
                    runner.name,
                    runner.id,
                    ref.key,
                )
        return frozenset(busy)

    def _replace(
        self,
        ref: PoolRef,
        delete_runner: DeleteRunner,
        decisions: Sequence[lifecycle.PodDecision],
        halted: Callable[[], bool],
    ) -> list[lifecycle.PodView]:
        """Deletes the pods the plan replaces, deregistering their runners first where it says
        so; a runner that took a job since the listing keeps its pod. Returns the pods so kept."""
        namespace, name = ref.namespace, ref.name
        kept: list[lifecycle.PodView] = []
        for decision in decisions:
            if halted():
                return kept
            pod = decision.pod
            if decision.action is lifecycle.Action.DEREGISTER_AND_DELETE:
                assert decision.runner is not None
                outcome = delete_runner(decision.runner.id)
                if outcome is DeleteOutcome.BUSY:
                    log.info("pod %s/%s kept: its runner took a job since the listing", namespace, pod.name)
                    kept.append(pod)
                    continue
                if outcome is DeleteOutcome.ALREADY_GONE and not decision.delete_if_gone:
                    continue  # it may have registered again under a new id: see the next listing
            try:
                deleted = self._pods.delete_pod(namespace, pod.name, pod.uid, pod.resource_version)
            except ApiException as err:
                # Refused by the cluster (an admission policy, say): the other pods' deletions,
                # and the busy marks after them, must not wait on this one; the next round asks again.
                log_failure(
                    log, logging.WARNING, "cannot delete runner pod %s/%s", namespace, pod.name, err=err
                )
                continue
            if deleted:
                metrics.PODS_REPLACED.labels(namespace, name, decision.reason).inc()
                log.info("deleted runner pod %s/%s: %s", namespace, pod.name, decision.reason)
        return kept

    def _hurry(
        self,
        ref: PoolRef,
        github: GitHubClient,
        snapshot: Snapshot,
        todo: lifecycle.Plan,
        *,
        runners: Sequence[Runner],
        busy: frozenset[int],
        halted: Callable[[], bool],
    ) -> None:
        """A live pool's pods that ``lifecycle.outlived_stop`` (scaled down, rolled out), the
        drain's way (``_looked_up``, ``_deregister``): looked up by name when the listing showed
        no runner of theirs, idle runners of their name deregistered (but those ``todo``
        collected already), a busy one left to its job (two of one name: the busy one keeps the
        pod; ``busy``: the collected ones GitHub answered busy); then told to stop again."""
        delete_runner = deleter(self._removal, ref, github)
        collected = {runner.id for runner in todo.collect}
        for view in todo.outlived:
            if halted():
                return
            named = [runner for runner in runners if runner.name == view.name]
            if not named:
                named = list(self._looked_up(ref, github, snapshot, [view.name]).values())
            if any(runner.id in busy for runner in named):
                continue  # its DELETE answered 422: it runs a job
            running, _, _ = _deregister(
                delete_runner, (runner for runner in named if runner.id not in collected)
            )
            if not running:
                self._hurry_pod(ref, view, lifecycle.hurried_grace(view, snapshot.started_at))

    def _next_delay(
        self, key: ListingKey, github: GitHubClient, snapshot: Snapshot, retry_after: float | None
    ) -> float:
        budget = github.rate_limit() if isinstance(github, RateLimitAware) else None
        with self._lock:
            self._credentials[key] = snapshot.credential
            sharing = sum(1 for credential in self._credentials.values() if credential == snapshot.credential)
        delay = next_listing_delay(
            self._interval,
            budget,
            self._clock().timestamp(),
            pages=listing_cost(len(snapshot.runners)),
            scopes=sharing,
            retry_after=retry_after,
        )
        metrics.SYNC_DELAY.labels(str(key)).set(delay)
        if delay > self._interval and budget is not None:
            log.info(
                "runner listing of %s slowed to every %.0fs: %d of %d requests left for %s",
                key,
                delay,
                budget.remaining,
                budget.limit,
                snapshot.credential,
            )
        return delay


def _runners_of(
    pool: api.RunnerPool, snapshot: Snapshot, pod_names: Iterable[str], reads: Reads
) -> list[Runner]:
    """The pool's runners in ``snapshot`` (a scale-set pool's by name too: ``of_scale_set_pool``)."""
    scale_set = pool.spec.scale_set
    if scale_set is None:
        return snapshot.of_pool(pool.namespace, pool.name)
    return snapshot.of_scale_set_pool(
        pool.namespace,
        pool.name,
        scale_set.name,
        pod_names,
        lambda: not _has_namesake(pool, scale_set.name, reads),
    )


def _has_namesake(pool: api.RunnerPool, scale_set: str, reads: Reads) -> bool:
    """Whether a cached scale-set pool of another namespace has the pool's name and a scale set
    of the same name (on any GitHub and scope: rare, so judged broadly). Its runners are named
    and labelled as the pool's would be (a runner's name is its pod's, which carries no
    namespace), so the name's shape would take them for the pool's: a pool moved to another
    namespace keeping its name and ``spec.scaleSet.name``, or two namespaces' pools of one name
    in two runner groups, where GitHub keeps no pool label. Then only runners named after one of
    the pool's own pods are its."""
    name = scale_set.casefold()
    return any(
        other.name == pool.name
        and other.namespace != pool.namespace
        and other.spec.scale_set is not None
        and other.spec.scale_set.name.casefold() == name
        for other in reads.scale_set_pools()
    )


def _deregister(delete_runner: DeleteRunner, runners: Iterable[Runner]) -> tuple[int, int, list[Runner]]:
    """Delete the pool's idle ``runners`` on GitHub: (busy, deregistered, and the runners
    GitHub answered busy: listed idle, they took a job since)."""
    busy = deregistered = 0
    refused: list[Runner] = []
    for runner in runners:
        if runner.busy:
            busy += 1
            continue
        outcome = delete_runner(runner.id)
        if outcome is DeleteOutcome.BUSY:
            busy += 1
            refused.append(dataclasses.replace(runner, busy=True))
        elif outcome is DeleteOutcome.DELETED:
            deregistered += 1
    return busy, deregistered, refused


def _mark_refusal(pool: PoolRef, mark: lifecycle.BusyMark, err: ApiException) -> str:
    """A refused mark as the pool's Event tells it: the cluster's words and what it costs,
    without the pod's name (the log has it), so that one cause reads the same whichever pods
    meet it: told once while it lasts, not at each job's start."""
    cause = describe(err, redact=naming.without_runner_pod_names(pool.name))
    if mark.busy:
        return (
            f"marking busy runner pods was refused: {cause}; "
            "a drain or the cluster autoscaler may evict them mid-job"
        )
    return f"unmarking idle runner pods was refused: {cause}; the busy budget keeps drains from evicting them"


def _deadline(pool: api.RunnerPool) -> timedelta | None:
    text = pool.spec.recreate_deadline
    if not text:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        return None  # the CRD rejects such values; an older stored object just gets no deadline


def _stuck(view: lifecycle.PodView) -> StuckPod:
    """An ``overdue`` pod as the finalizer tells it: its name, its node, and when it is given up on."""
    assert view.deleted_at is not None, "overdue pods are being deleted"
    return StuckPod(view.name, view.node, view.deleted_at + lifecycle.STUCK_MARGIN)
