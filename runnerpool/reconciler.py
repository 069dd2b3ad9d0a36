"""Reconcile one RunnerPool: gates, observe, desire, apply, status, pods, as one linear script.

:meth:`Reconciler.converge` reads like the pass it makes: the gates (``runnerpool.gates``) before
anything is made; one snapshot of what the caches show (``runnerpool.observe``); the pool's
children as wanted (``runnerpool.children``) made so by the one apply (``runnerpool.apply``);
the decision and the status on the pool before any pod is made; then the pods' creates
(``runnerpool.pods.step``) and each JIT pod's Secret.  Every write is skipped when the cache
already shows its result, so a converged pool writes nothing; waiting (for a token, for a busy
runner) is a requeue, not an error: only errors get the work queue's backoff.

Who owns what (README.md, "Who owns what"): the reconciler creates pods and never deletes one;
the runner managers (``runnerpool.runners``) delete pods and the runners on GitHub, busy-safe;
the token updater (``secret_updater``) fills and empties token Secrets and fills JIT Secrets,
the reconciler creates both and empties a used JIT Secret.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool import api, autoscaling, children, conditions, deregistration, metrics, naming
from runnerpool import status as pool_status
from runnerpool.api_errors import describe, is_access_denied, is_namespace_terminating, is_refusal, status_of
from runnerpool.apply import FOREIGN, Child, apply, controlled_by
from runnerpool.autoscaling import Decision, Window
from runnerpool.domain import RFC3339, Drain, PoolRef, pool_key, split_key, utcnow
from runnerpool.echoes import Echoes
from runnerpool.events import NORMAL, WARNING, EventRecorder
from runnerpool.gates import Gate, Verdict
from runnerpool.github.credentials import CredentialError, credentials_version
from runnerpool.github.errors import GitHubError
from runnerpool.github.types import DEFAULT_RUNNER_GROUP_ID, JitRequest
from runnerpool.observe import Observed, PoolSecrets, RunnerJobs, TokenJobs, observe
from runnerpool.pods import endings, failures, labels, template
from runnerpool.pods import state as pod_state
from runnerpool.pods.create_backoff import CreateBackoff
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.slow_start import SlowStart
from runnerpool.pods.start_backoff import StartBackoff
from runnerpool.pods.step import Converged, PodStep
from runnerpool.reads import PodsNotCachedError, Reads
from runnerpool.reasons import Reason
from runnerpool.runtime.controller import Result, TerminalError
from runnerpool.runtime.kube import RUNNER_POOLS, Kube
from runnerpool.settings import Settings
from runnerpool.writes import Write, Writes

log = logging.getLogger(__name__)

__all__ = [
    "Forgets",
    "InvalidSpecError",
    "PoolJobs",
    "PoolState",
    "PoolStates",
    "Reconciler",
    "RunnerJobs",
    "ScaleSets",
    "TokenJobs",
]

#: Seconds until a pool whose webhook Secret is missing or unusable looks for it again.
WEBHOOK_SECRET_RECHECK = 30.0
#: Seconds until a pool held up by a same-named object it does not own looks again (a foreign
#: object carries no label of ours, so no watch reports its deletion).
FOREIGN_RECHECK = 30.0
#: How often a refusal that lasts is told again as an Event (the API server keeps an Event an
#: hour by default: the refusal, which has no condition, would be told nowhere after that).
REFUSAL_RETELL = 1800.0
#: How many status-coalescing windows a new pool's first status waits for its token at most.
FIRST_STATUS_TOKEN_WAIT = 5
#: The key of the runner manager's refused busy marks in ``PoolState.refusal_news``.
_BUSY_MARKS = "busy-marks"


class Forgets(Protocol):
    """Anything else that keeps per-pool state and must let go of a pool that is gone
    (the demand recorder); the reconciler tells it, without knowing what it is."""

    def forget(self, namespace: str, name: str) -> None: ...


class ScaleSets(Protocol):
    """The owner of scale sets on GitHub (``runnerpool.scale_set_pools``): the leader's
    listeners create and adopt them; the finalizer has it delete a pool's once its runners are
    gone."""

    def listen(self, namespace: str, name: str) -> None:
        """The scale-set pool is live: its listener should run (soon, if it does not)."""
        ...

    def delete(self, pool: PoolRef, scale_set_id: int | None) -> None:
        """Delete the pool's scale set: the one of ``scale_set_id`` (None: the status has none
        yet) and the one of its name (gone already: done); raises GitHubError."""
        ...


@dataclass(frozen=True)
class PoolJobs:
    """The background jobs a pool has while it may have runners: its token job (and JIT
    fills), its runner manager, and whatever else remembers it (``others``)."""

    tokens: TokenJobs
    runners: RunnerJobs
    others: tuple[Forgets, ...] = ()
    scale_sets: ScaleSets | None = None

    def stop(self, namespace: str, name: str) -> bool:
        """Every job of the pool stops; whether a JIT config was written for one of its pods
        that the caches may not show yet (``JitJobs.stop``: told until :meth:`marked`)."""
        self.tokens.stop(namespace, name)
        issued = self.tokens.jit.stop(namespace, name)
        self.runners.stop(namespace, name)
        for other in self.others:
            other.forget(namespace, name)
        return issued

    def marked(self, namespace: str, name: str) -> None:
        """The pool carries its may-have-runners mark, or is gone (``JitJobs.marked``)."""
        self.tokens.jit.marked(namespace, name)


@dataclass
class PoolState:
    """What the reconciler remembers of one pool between passes."""

    #: The scale-down window of a pool that follows demand (``runnerpool.autoscaling``).
    window: Window = field(default_factory=Window)
    #: When the status was last written, and when a new pool was first seen (coalescing).
    status_written: float | None = None
    first_seen: float | None = None
    #: The stuck pods' reasons last told as an Event (told once per change).
    failing_told: frozenset[str] | None = None

    #: The pods whose bad ending was told (``runnerpool.pods.endings``), by uid.
    endings_told: frozenset[str] = frozenset()
    #: The refusals told as Events, by child (``Child.key``): what was said, and when.
    refusals_told: dict[str, tuple[str, float]] = field(default_factory=dict)

    def refusal_news(self, child: str, said: str) -> bool:
        """Remember ``said`` of ``child``; whether to tell it: new, changed, or told
        ``REFUSAL_RETELL`` ago (an Event expires, after an hour by default)."""
        now = time.monotonic()
        told = self.refusals_told.get(child)
        if told is not None and told[0] == said and now - told[1] < REFUSAL_RETELL:
            return False
        self.refusals_told[child] = (said, now)
        return True

    def refusal_over(self, child: str) -> None:
        """``child`` went through: a refusal of it met again is news again."""
        self.refusals_told.pop(child, None)

    def failing_changed(self, reasons: frozenset[str]) -> bool:
        """Remember ``reasons``; whether they differ from the ones last seen (then: news)."""
        changed, self.failing_told = reasons != self.failing_told, reasons
        return changed

    def endings_news(self, pods: Sequence[Mapping[str, Any]]) -> list[endings.Ending]:
        """The bad endings of ``pods`` not told yet; remembered, and pods gone forgotten."""
        found = endings.bad_endings(pods)
        news = [ending for ending in found if ending.uid not in self.endings_told]
        self.endings_told = frozenset(ending.uid for ending in found)
        return news


@dataclass
class PoolStates:
    """The reconciler's memory of every pool (one :class:`PoolState` each, one :meth:`forget`),
    the pod creates it still expects and backs off from, and its clock."""

    expectations: Expectations
    backoff: CreateBackoff = field(default_factory=CreateBackoff)
    clock: Callable[[], datetime] = utcnow
    pools: dict[str, PoolState] = field(default_factory=dict)
    #: The pools whose runners keep failing at start (``runnerpool.pods.start_backoff``).
    starts: StartBackoff = field(default_factory=StartBackoff)
    #: The resourceVersions of the reconciler's own pool writes (their events wake no pass).
    echoes: Echoes = field(default_factory=Echoes)
    #: Seconds for the status writes' coalescing windows.
    monotonic: Callable[[], float] = time.monotonic

    def of(self, key: str) -> PoolState:
        return self.pools.setdefault(key, PoolState())

    def forget(self, namespace: str, name: str, *, expectations: bool = True) -> None:
        """``expectations=False``: a pool being deleted keeps the pod creates its cache has not
        shown yet until it is gone (``Reconciler._finalize`` waits for them)."""
        key = pool_key(namespace, name)
        self.pools.pop(key, None)
        if expectations:
            self.expectations.forget(key)
        self.backoff.forget(key)
        self.starts.forget(key)
        self.echoes.forget(namespace, name)
        metrics.forget_pool(namespace, name)


class InvalidSpecError(TerminalError):
    """The stored spec fails validation (written under an older, looser schema): retrying
    cannot help until the user edits it, so the queue drops the key without backoff."""


@dataclass
class _Pass:
    """One reconcile: the pool as read (``raw`` follows the pool's own writes) and its writes."""

    pool: api.RunnerPool
    raw: dict[str, Any]
    state: PoolState
    writes: Writes = field(default_factory=Writes)
    #: The conditions of the gates the pool passed.
    gates: list[dict[str, Any]] = field(default_factory=list)
    runner_group_id: int | None = None

    @property
    def key(self) -> str:
        return pool_key(self.pool.namespace, self.pool.name)


class Reconciler:
    def __init__(
        self,
        reads: Reads,
        kube: Kube,
        jobs: PoolJobs,
        recorder: EventRecorder,
        *,
        gates: Sequence[Gate],
        secrets: PoolSecrets,
        states: PoolStates,
        settings: Settings,
    ) -> None:
        self._reads = reads
        self._kube = kube
        self._jobs = jobs
        self._recorder = recorder
        self._gates = tuple(gates)
        self._secrets = secrets
        self._states = states
        self._settings = settings
        #: What a pool's token must have left to go to a new pod (``status.has_usable_token``).
        self._token_min_life = pool_status.token_min_life(settings.tokens.refresh_margin)
        self._pods = PodStep(
            kube,
            states.expectations,
            states.backoff,
            starts=states.starts,
            default_image=settings.runners.image,
            default_api_url=settings.github.api_url,
            creates=SlowStart(settings.api_server.pod_creates),
            clock=states.clock,
        )

    def __call__(self, key: str) -> Result:
        namespace, name = split_key(key)
        parsed = self._reads.pool(namespace, name)
        if parsed is None:
            # Deleted (finalizer already gone) or never ours: no job lingers, and the
            # namespace's budgets go with its last pool.
            self._forget(namespace, name)
            self._jobs.marked(namespace, name)
            self._secrets.forget(namespace, name)
            writes = Writes()
            # The namespace's budgets go with its last pool, then the enabling binding.
            self._secrets.namespace_done(namespace, lambda: self._namespace_done(namespace, writes))
            _log_pass(namespace, name, "gone", writes)
            return Result()
        raw, pool, problems = parsed.raw, parsed.model, parsed.problems
        if pool is None:
            self._recorder.event(raw, WARNING, Reason.INVALID_SPEC, f"fix the RunnerPool spec: {problems}")
            _log_pass(namespace, name, "invalid", Writes())
            raise InvalidSpecError(f"{key}: fix the RunnerPool spec: {problems}")
        run = _Pass(pool, raw, self._states.of(key))
        try:
            result = self._finalize(run) if self._ending(run) else self.converge(run)
        except PodsNotCachedError:
            # Its namespace stopped being watched since this pass's gate (another pass found it
            # no longer enabled): the next pass finds it refused.
            _log_pass(namespace, name, "requeue", run.writes)
            return Result(requeue_after=1.0)
        except ApiException as err:
            if is_access_denied(err):
                for gate in self._gates:
                    gate.refused(namespace)
            if not _ends_quietly(run, err):
                raise
            _log_pass(namespace, name, "ended", run.writes)
            return Result()
        # A pass that made pods says so even when its status write waits (coalesced).
        waiting = result.requeue_after is not None and Write.POD_CREATED not in run.writes
        _log_pass(namespace, name, "requeue" if waiting else run.writes.action, run.writes)
        return result

    def _ending(self, run: _Pass) -> bool:
        """Deleted, or in a namespace being deleted: nothing new may be created, deregister."""
        return run.pool.deleting or self._reads.namespace_terminating(run.pool.namespace)

    # ------------------------------------------------------------------ converge

    def converge(self, run: _Pass) -> Result:
        """Gates, observe, desire and apply the children, status, then the pods."""
        closed = self._check_gates(run)
        if closed is not None:
            return self._refuse(run, closed, keep_jobs=closed.keep_jobs)
        self._ensure_finalizer(run)
        self._protect_credentials(run)
        seen = observe(
            self._reads,
            run.pool,
            self._pods.expected(run.pool),
            tokens=self._jobs.tokens,
            runners=self._jobs.runners,
            secrets=self._secrets,
        )
        secret, foreign, refused = self._apply_children(run, children.wanted(run.pool, seen))
        if foreign:
            return self._refuse(run, self._not_owned(run, foreign))
        if refused:
            return self._refuse(run, self._refused(run, refused), keep_jobs=True)
        recheck = self._start_jobs(run, seen, secret)
        decision = self._decide(run, seen)
        recheck = _sooner(_sooner(recheck, decision.recheck_after), _rechecks(seen))
        # A JIT pod waits for its own config, not for the pool's token; one expired, or about
        # to, is no token: a pod made with it could not register.
        token = _jit(run.pool) or pool_status.has_usable_token(
            secret, self._states.clock(), self._token_min_life
        )
        recheck = _sooner(recheck, self._token_lapse(run, seen, secret))
        self._mark_may_have_runners(run, secret, seen)
        self._tell_marks_refused(run, seen.mark_refused)
        if run.pool.spec.autoscaling is not None:
            # The runner managers retire above status.desiredReplicas: it must be there before
            # the pods this decision makes, or they could take the new pods for surplus.
            planned = self._pods.counts(run.pool, decision.replicas, seen, with_creates=token)
            self._update_status(run, seen, secret, planned, decision)
        if not token:
            # No new pod without a token, but the pods that run still count in the status.
            counts = self._pods.counts(run.pool, decision.replicas, seen)
            wait = self._update_status(run, seen, secret, counts, decision)
            return Result(requeue_after=_sooner(_sooner(wait, self._settings.tokens.wait), recheck))
        self._apply_children(run, children.budgets(run.pool, seen))
        converged = self._act_on_pods(run, decision, seen)
        secrets_wait = self._apply_jit_secrets(run, seen)
        wait = self._update_status(run, seen, secret, converged.counts, decision)
        # A refused create is tried again when its backoff ends, whatever else happens meanwhile.
        retry = _sooner(converged.retry_in, secrets_wait)
        # A refusal told by an Event alone is told again while it lasts; nothing else may wake
        # a quiet pool before its Event expires.
        retell = REFUSAL_RETELL if run.state.refusals_told else None
        return Result(requeue_after=_sooner(_sooner(wait, recheck), _sooner(retry, retell)))

    def _token_lapse(self, run: _Pass, seen: Observed, secret: dict[str, Any]) -> float | None:
        """Seconds until the pool's token stops going to new pods, while its refresh fails.

        ``TokenReady`` must then turn False and pods stop coming, and nothing else wakes the
        pool: the secret updater notifies a failure only when it is new, the Secret changes only
        with a new token, and informers do not resync. A refresh that works wakes the pool
        itself, writing the new token long before then.
        """
        if _jit(run.pool) or seen.token_failure is None:
            return None
        until, now = pool_status.token_usable_until(secret, self._token_min_life), self._states.clock()
        if until is None or until <= now or not pool_status.has_token(secret):
            return None  # no token to lose: the pool already waits for one (``tokens.wait``)
        return (until - now).total_seconds()

    def _check_gates(self, run: _Pass, *, deleting: bool = False) -> Verdict | None:
        """Each gate in order (``deleting``: those asked on deletion); the first closed one, or
        ``None`` (the passed ones are on ``run``)."""
        stamp = conditions.Stamp(run.pool.generation, self._states.clock())
        for gate in self._gates:
            if deleting and not gate.on_deletion:
                continue
            verdict = gate.check(run.pool, stamp)
            if verdict is None:
                continue
            if not verdict.open:
                return verdict
            run.gates.append(verdict.condition)
            if verdict.runner_group_id is not None:
                run.runner_group_id = verdict.runner_group_id
        return None

    def _refuse(
        self, run: _Pass, verdict: Verdict, *, deleting: bool = False, keep_jobs: bool = False
    ) -> Result:
        """A pool that may not have runners: no token (the job stops; the Secret is emptied if the
        verdict says so), no runner manager, no new pod; its conditions and an Event say why.
        ``deleting``: its jobs are stopped already, its pod expectations kept for the drain.
        ``keep_jobs``: no new pod, but the jobs run on (the runner manager keeps marking the
        busy pods of a pool whose child the cluster refuses); started if they are not, as in a
        new leader, and the marks the cluster refuses told."""
        pool = run.pool
        if keep_jobs and not deleting:
            self._keep_runner_manager(run)
        elif not deleting:
            self._forget(pool.namespace, pool.name)
        if verdict.withdraw:
            self._withdraw_token(run)
        refused = verdict.condition
        before = conditions.find((run.raw.get("status") or {}).get("conditions") or [], refused["type"])
        ready = {**refused, "type": conditions.READY, "message": f"no runners: {refused['message']}"}
        self._set_condition(
            run, *([refused] if refused["type"] == conditions.READY else [refused, ready]), observed=True
        )
        if before is None or (before.get("status"), before.get("reason")) != ("False", refused["reason"]):
            self._recorder.event(run.raw, WARNING, refused["reason"], refused["message"])
        _log_pass(pool.namespace, pool.name, "refused", run.writes)
        return Result(requeue_after=verdict.recheck)

    def _apply_children(self, run: _Pass, rows: list[Child]) -> tuple[dict[str, Any], list[Child], list[str]]:
        """The one apply over ``rows``; the token Secret as it now is, the foreign objects, and
        the creates the cluster refused (``_refusal``), each said as the pool's condition will.
        A refused change or deletion of an object that is there, and a refused budget, are told
        by an Event, and the pass goes on (a label it cannot repair stops no runner; a budget
        refused stops no pod)."""
        secret: dict[str, Any] = {}
        foreign: list[Child] = []
        refused: list[str] = []
        for child in rows:
            try:
                now = apply(self._kube, child, run.writes)
            except ApiException as err:
                said = self._refusal(run, child, err)
                if child.live is None and child.kind is not children.BUDGET:
                    refused.append(said)
                    continue
                self._tell_refused(run, child.key, said)
                now = child.live
            else:
                run.state.refusal_over(child.key)
            if now is FOREIGN:
                foreign.append(child)
            elif child.kind is children.TOKEN_SECRET:
                secret = now or child.desired or {}
        if Write.BUDGET_UPDATED in run.writes:
            self._recorder.event(
                run.raw,
                NORMAL,
                Reason.UPDATED_DISRUPTION_BUDGET,
                "brought a disruption budget of busy runners or their job pods back to spec",
            )
        return secret, foreign, refused

    def _refusal(self, run: _Pass, child: Child, err: ApiException) -> str:
        """What the cluster said of a write of ``child`` it refused as asked
        (``_raise_unless_refused``)."""
        self._raise_unless_refused(run, err)
        verb = "creating" if child.live is None else "changing" if child.desired is not None else "deleting"
        said = f"{verb} {child.kind.resource.plural} {child.name} was refused: {describe(err)}"
        if child.kind is children.BUDGET and child.desired is not None:
            said += "; the pods it covers are not protected from eviction"
        return said

    def _raise_unless_refused(self, run: _Pass, err: ApiException) -> None:
        """Raise ``err`` unless the cluster refused the write as asked (a quota, an admission
        policy: ``api_errors.is_refusal``): a server error retries with the queue's backoff, a namespace
        being deleted ends the pass quietly. The operator's access to the namespace taken away
        (the authorizer's 403, not a quota's): the gates ask again."""
        if not is_refusal(err):
            raise err
        if is_access_denied(err):
            for gate in self._gates:
                gate.refused(run.pool.namespace)

    def _keep_runner_manager(self, run: _Pass) -> None:
        """The pool's runner manager runs (idempotent), though the pool may make no pod: its
        busy pods are still to be marked, and a new leader has no manager running yet."""
        pool = run.pool
        credentials = self._secrets.credentials(pool.namespace, pool.spec.credential_secret_name)
        self._jobs.runners.start(self._pool_ref(run, credentials))
        self._tell_marks_refused(run, self._jobs.runners.mark_refused(pool.namespace, pool.name))

    def _refused(self, run: _Pass, refused: list[str]) -> Verdict:
        message = f"{'; '.join(refused)}; the pool tries again every {FOREIGN_RECHECK:.0f}s"
        stamp = conditions.Stamp(run.pool.generation, self._states.clock())
        condition = stamp.condition(conditions.READY, False, Reason.CHILD_REFUSED, message)
        return Verdict(condition, recheck=FOREIGN_RECHECK, withdraw=False)

    def _tell_refused(self, run: _Pass, key: str, said: str, reason: Reason = Reason.CHILD_REFUSED) -> None:
        """A refusal the pass goes on without (a disruption budget: the pods come all the same,
        and a drain may evict a busy one, whose runner still finishes its job when told to stop,
        within ``spec.busyGracePeriod``; a repair of a child that is there; a busy mark), of
        ``key`` (a child's, ``_BUSY_MARKS``): a Warning Event once, and again every
        ``REFUSAL_RETELL`` while it lasts (``PoolState.refusal_news``); the next pass (or round)
        tries again."""
        if run.state.refusal_news(key, said):
            log.warning("pool %s/%s: %s", run.pool.namespace, run.pool.name, said)
            self._recorder.event(run.raw, WARNING, reason, said)

    def _tell_marks_refused(self, run: _Pass, said: str | None) -> None:
        """The busy marks the cluster refused in the runner manager's latest round (``said``,
        ``RunnerJobs.mark_refused``; an admission policy that keeps pods' labels, say): the
        pods of running jobs are not covered by the busy budget. Before, only the manager's
        log said so."""
        if said is None:
            run.state.refusal_over(_BUSY_MARKS)
        else:
            self._tell_refused(run, _BUSY_MARKS, said, Reason.BUSY_MARK_REFUSED)

    def _not_owned(self, run: _Pass, foreign: list[Child]) -> Verdict:
        names = ", ".join(f"{c.kind.resource.plural} {c.name}" for c in foreign)
        message = f"{names} exists and is not controlled by this pool: left alone; delete or rename it"
        stamp = conditions.Stamp(run.pool.generation, self._states.clock())
        condition = stamp.condition(conditions.READY, False, Reason.CHILD_NOT_OWNED, message)
        return Verdict(condition, recheck=FOREIGN_RECHECK, withdraw=False)

    def _start_jobs(self, run: _Pass, seen: Observed, secret: dict[str, Any]) -> float | None:
        """The token job (token mode), the runner manager and a scale set's listener: all
        idempotent, cheap to repeat.

        A JIT pool has no pool token: one switched from token mode has it emptied and its job
        stopped.  A token lost (Secret deleted, emptied or edited) is refilled now.
        """
        ref = self._pool_ref(run, seen.credentials)
        if run.pool.spec.scale_set is not None and self._jobs.scale_sets is not None:
            self._jobs.scale_sets.listen(run.pool.namespace, run.pool.name)
        if _jit(run.pool):
            self._withdraw_token(run)
            self._jobs.runners.start(ref)
            return None
        self._jobs.tokens.start(ref)
        self._jobs.runners.start(ref)
        return self._jobs.tokens.check_secret(
            run.pool.namespace,
            run.pool.name,
            (secret.get("data") or {}).get(naming.TOKEN_SECRET_KEY),
            recreated=Write.SECRET_CREATED in run.writes,
            expires_at=pool_status.token_expiry(secret),
        )

    def _act_on_pods(self, run: _Pass, decision: Decision, seen: Observed) -> Converged:
        converged = self._pods.converge(run.pool, run.writes, decision.replicas, seen)
        pods = converged.counts
        if converged.refused is not None:
            # Every refusal, as a ReplicaSet tells it: the recorder folds repeats into a count.
            message = f"creating a runner pod failed: {converged.refused.cause}"
            told = Reason.TEMPLATE_INVALID if converged.refused.invalid else Reason.FAILED_CREATE
            self._recorder.event(run.raw, WARNING, told, message)
        self._tell_failing(run, pods)
        for ending in run.state.endings_news(seen.pods):
            self._recorder.event(run.raw, WARNING, ending.reason, ending.message)
        created = run.writes.count(Write.POD_CREATED)
        if created and _was_ready(run.raw):
            # A pool's first pods are its normal start, which the conditions tell; pods made
            # for a pool that was ready (a scale-up, a replacement) are news.
            self._recorder.event(run.raw, NORMAL, Reason.CREATED_PODS, f"created {created} runner pod(s)")
        if pods.surplus or pods.used_up or _busy_not_marked(run.pool, seen.pods):
            # Taking pods away and marking busy ones are the runner managers' job: ask for a
            # round now, not in a minute.
            self._jobs.runners.bring_round_forward(run.pool.namespace, run.pool.name)
        return converged

    def _tell_failing(self, run: _Pass, pods: pool_status.PodCounts) -> None:
        """A Warning when the reasons the pool's pods are stuck for change (not when a count does);
        pods no longer stuck are told by the Ready condition's recovery."""
        reasons = frozenset(f.reason for f in pods.failing)
        if run.state.failing_changed(reasons) and reasons:
            message = failures.describe(pods.failing)
            self._recorder.event(run.raw, WARNING, failures.ready_reason(pods.failing), message)

    def _apply_jit_secrets(self, run: _Pass, seen: Observed) -> float | None:
        """Each JIT pod's own Secret: created empty, filled by the token scheduler, emptied once
        used.  A pool switched back to token mode still empties the Secrets of its JIT pods;
        pods made in this pass are seen in the next, which their creation brings. Returns the
        seconds until Secrets the cluster refused are asked for again (``_jit_secrets_refused``)."""
        ref = self._pool_ref(run, seen.credentials)
        self._jobs.tokens.jit.follow(ref)
        group = run.runner_group_id if run.runner_group_id is not None else DEFAULT_RUNNER_GROUP_ID
        scale_set = run.pool.status.scale_set
        scale_set_id = scale_set.id if scale_set is not None and run.pool.spec.scale_set else None
        # A scale set not made yet: its pods wait, empty; the listener's status write brings a pass.
        may_fill = run.pool.spec.scale_set is None or scale_set_id is not None
        request = JitRequest(run.pool.name, tuple(labels.registered(run.pool)), group, naming.WORK_DIR)
        refused: dict[str, ApiException] = {}
        for pod in seen.pods:
            name = pod_state.jit_secret_name(pod)
            if name is None:
                continue
            uid, live = str(pod["metadata"]["uid"]), seen.jit_secrets.get(name)
            if children.jit_done(pod):
                self._jobs.tokens.jit.forget_pod(run.pool.namespace, uid)
            child = children.jit_child(run.pool.name, pod, name, live)
            try:
                now = None if child is None else apply(self._kube, child, run.writes)
            except ApiException as err:
                self._raise_unless_refused(run, err)
                refused[name] = err
                continue
            if now is FOREIGN:
                log.warning(
                    "pool %s: Secret %s is not pod %s's; leaving it", run.key, name, pod["metadata"]["name"]
                )
            elif may_fill and now is not None and not children.jit_done(pod) and not _ever_filled(now):
                pod_request = JitRequest(
                    str(pod["metadata"]["name"]), request.labels, group, request.work_folder, scale_set_id
                )
                self._jobs.tokens.jit.fill(ref, name, uid, pod_request)
        if refused:
            return self._jit_secrets_refused(run, refused)
        self._pods.no_secret_refused(run.pool)
        return None

    def _jit_secrets_refused(self, run: _Pass, refused: Mapping[str, ApiException]) -> float:
        """JIT pods' Secrets refused as asked: those pods cannot start. Told as a refused pod
        is (``Ready=False PodCreateFailed`` and one ``FailedCreate`` Event a pass quoting the
        cluster, the Secret's drawn name as ``runner-jit-POOL-*`` so that one cause reads the
        same every time), the pool's creates back off, and the Secrets are asked for again when
        the backoff ends. Before, the pass raised, and the pool said nothing while its pods
        waited for a Secret that never came."""
        prefix = naming.jit_secret_name(run.pool.name, "")
        redact = naming.without_drawn_names(prefix, naming.JIT_SECRET_SUFFIX)
        cause = describe(next(iter(refused.values())), redact=redact)
        failure = self._pods.secret_refused(
            run.pool, f"the JIT Secret of {len(refused)} pod(s) was refused: {cause}"
        )
        self._recorder.event(
            run.raw, WARNING, Reason.FAILED_CREATE, f"creating a runner pod failed: {failure.cause}"
        )
        return failure.delay

    def _decide(self, run: _Pass, seen: Observed) -> Decision:
        """``spec.replicas``, or what demand asks for, held during the scale-down delay only
        by the pods that are still up (``held_by``)."""
        pool, counted = run.pool, seen.runner_counts
        busy = None if counted is None else int(counted.get("busy", 0))
        decision, window = autoscaling.decide(pool, run.state.window, self._states.clock(), busy)
        if pool.spec.autoscaling is not None:
            run.state.window = window
        if not decision.holding:
            return decision  # nothing held: no need to count the pods
        return decision.held_by(self._pods.counts(pool, decision.replicas, seen).active)

    def _ensure_finalizer(self, run: _Pass) -> None:
        if naming.POOL_FINALIZER not in run.pool.finalizers:
            self._patch_finalizers(run, [*run.pool.finalizers, naming.POOL_FINALIZER])
            run.writes.add(Write.FINALIZER_ADDED)

    def _patch_finalizers(self, run: _Pass, finalizers: list[str]) -> None:
        # The resourceVersion makes this a compare-and-swap: no other controller's finalizer is lost.
        meta = {"finalizers": finalizers or None, "resourceVersion": run.raw["metadata"]["resourceVersion"]}
        self._patch_pool(run, {"metadata": meta})

    def _patch_pool(
        self, run: _Pass, patch: dict[str, Any], subresource: str = "", *, echo: bool = True
    ) -> None:
        """Every write of the pass to its pool: ``run.raw`` follows it, and its watch event
        is known as the pass's own (``runnerpool.echoes``), so it wakes no pass of its own
        unless ``echo`` is false."""
        pool, echoes, answer = run.pool, self._states.echoes, None
        echoes.begin(run.key)
        try:
            answer = self._kube.patch(RUNNER_POOLS, pool.namespace, pool.name, patch, subresource=subresource)
        finally:
            echoes.end(run.key, run.raw, patch, answer if echo else None)
        run.raw = answer

    def _protect_credentials(self, run: _Pass) -> None:
        pool = run.pool
        if self._secrets.protect(pool.namespace, pool.name, pool.spec.credential_secret_name):
            run.writes.add(Write.CREDENTIALS_PROTECTED)

    def _pool_ref(self, run: _Pass, credentials: dict[str, Any] | None) -> PoolRef:
        """What the pool's jobs work with; ``credentials``: its credential Secret as last read."""
        return self._settings.github.pool_ref(run.pool, credentials_version(credentials))

    def _forget(self, namespace: str, name: str, *, expectations: bool = True) -> bool:
        """A pool gone, refused or being deleted: its jobs stop and its memory goes (but for its
        expected pod creates, unless ``expectations``); whether a JIT config was written for one
        of its pods that the caches may not show yet."""
        issued = self._jobs.stop(namespace, name)
        self._states.forget(namespace, name, expectations=expectations)
        return issued

    def _namespace_done(self, namespace: str, writes: Writes) -> None:
        """The namespace's last pool is gone: its budgets go, and the gates let go of
        what they kept for it (its informers), before the enabling binding is released."""
        self.release_unused_budget(namespace, writes)
        for gate in self._gates:
            gate.released(namespace)

    def release_unused_budget(self, namespace: str, writes: Writes | None = None) -> None:
        """Delete the namespace's budgets once no pool of the namespace is left.

        It has no owner (no one pool may take it along), so without this an uninstall that
        deleted every pool would leave one budget behind in each of their namespaces. Asked
        when a pool is gone from the cache, so the last pool to go sees none left; a pool
        made meanwhile creates it again on its first pass. Also asked at a leadership start
        for a namespace whose last pool went under a leader that stopped before this
        (``SecretChecks.release_unused``; ``writes``: none, logged here).
        """
        if self._reads.pools_in(namespace):
            return
        done = writes if writes is not None else Writes()
        for name in naming.NAMESPACE_BUDGETS:
            live = self._reads.get_disruption_budget(namespace, name)
            apply(self._kube, children.budget_child(namespace, name, live, wanted=False), done)
        if writes is None and done:
            log.info("namespace has no pool left", extra={"namespace": namespace, "writes": done.as_log()})

    # ------------------------------------------------------------------ status

    def _update_status(
        self,
        run: _Pass,
        seen: Observed,
        secret: dict[str, Any],
        pods: pool_status.PodCounts | None,
        decision: Decision,
    ) -> float | None:
        """Write the status if it changed; returns seconds to wait when the write is coalesced.

        ``status.demand`` is not the reconciler's (``runnerpool.demand.writer`` writes it,
        on any replica), nor is ``status.scaleSet`` (the scale-set listener's): they are left
        out of the comparison and of the patch.
        """
        pool = run.pool
        old = {
            k: v for k, v in (run.raw.get("status") or {}).items() if k not in pool_status.WRITTEN_ELSEWHERE
        }
        refused = self._pods.create_failure(pool)
        status = pool_status.desired_status(
            conditions.Stamp(pool.generation, self._states.clock()),
            pool,
            old=old,
            secret=secret,
            pods=pods,
            failure=seen.token_failure,
            runners=seen.runner_counts,
            decision=decision,
            webhook_secret_problem=seen.webhook_problem,
            refused=refused.cause if refused is not None else None,
            refused_reason=refused.reason if refused is not None else Reason.POD_CREATE_FAILED,
            gates=run.gates,
            min_token_life=self._token_min_life,
        )
        metrics.observe_pool(pool, status, pods.failing if pods else ())
        if status == old:
            return None
        token = _jit(pool) or pool_status.has_token(secret)
        wait = self._coalesced(run, old, status, token=token)
        if wait is not None:
            return wait
        # A new desiredReplicas of a pool that follows demand is the runner managers' to act
        # on, read from their cache (a fixed pool's is its spec): its echo wakes one more pass,
        # which asks for their round again should the round this pass brought forward have
        # read the pool before the write reached the cache.
        moved = pool.spec.autoscaling is not None and old.get("desiredReplicas") != status.get(
            "desiredReplicas"
        )
        self._patch_pool(
            run, {"status": pool_status.merge_patch(old, status)}, subresource="status", echo=not moved
        )
        run.writes.add(Write.STATUS)
        self._record_transitions(run, old.get("conditions") or [], status["conditions"])
        self._record_scaling(run, old.get("desiredReplicas"), decision)
        return None

    def _coalesced(
        self, run: _Pass, old: dict[str, Any], status: dict[str, Any], *, token: bool
    ) -> float | None:
        """Seconds a status change waits (pod counts while pods start fold into one write),
        or ``None`` to write it now (and remember when)."""
        state, now, gap = run.state, self._states.monotonic(), self._settings.queue.status_coalesce
        if not old and state.status_written is None and not _has_failure(status):
            # A new pool's first status waits as long as a coalesced one, and while its token
            # is still to come up to FIRST_STATUS_TOKEN_WAIT of them: "waiting for the token"
            # would be overwritten at once. Pools made together (a chart of a hundred) get
            # their tokens over seconds, and each wrote its status twice.
            state.first_seen = now if state.first_seen is None else state.first_seen
            wait = state.first_seen + gap * (1 if token else FIRST_STATUS_TOKEN_WAIT) - now
            if wait > 0 and run.pool.spec.autoscaling is None:
                return wait
        if state.status_written is not None and not pool_status.notable(old, status):
            wait = state.status_written + gap - now
            if wait > 0:
                return wait
        state.status_written, state.first_seen = now, None
        return None

    def _set_condition(self, run: _Pass, *conds: dict[str, Any], observed: bool = False) -> None:
        """Write conditions on their own (the finalizer and a refused pool have no full status
        to compute); ``observed``: the pool's generation was acted on (written with them)."""
        stored = run.raw.get("status") or {}
        status: dict[str, Any] = {"conditions": conditions.merge(stored.get("conditions") or [], list(conds))}
        if observed:
            status["observedGeneration"] = run.pool.generation
        if all(stored.get(key) == value for key, value in status.items()):
            return
        self._patch_pool(run, {"status": status}, subresource="status")
        run.writes.add(Write.STATUS)

    def _record_transitions(self, run: _Pass, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
        """An Event per condition change that is news: a failure, a recovery from one, a pool
        that was ready starting runners again.  A pool's normal start (waiting for its
        token, runners starting, then ready) is in its conditions and costs no Event; the
        Scaling condition's moves are told by ``_record_scaling``."""
        for cond in new:
            before = conditions.find(old, cond["type"])
            if cond["type"] == conditions.SCALING or (
                before is not None and before.get("reason") == cond["reason"]
            ):
                continue
            if cond["reason"] in _TOLD_BY_THEIR_OWN_EVENTS:
                continue
            on_the_way_up = cond["status"] == "True" or cond["reason"] in _STARTING
            if on_the_way_up and (before is None or before.get("reason") in _STARTING):
                continue  # the normal start of every pool: not news
            healthy = cond["status"] == "True" or cond["reason"] in (
                Reason.WAITING_FOR_TOKEN,
                Reason.RUNNERS_STARTING,
            )
            self._recorder.event(run.raw, NORMAL if healthy else WARNING, cond["reason"], cond["message"])

    def _record_scaling(self, run: _Pass, before: Any, decision: Decision) -> None:
        """``ScaledUp``/``ScaledDown`` once the new count is written, with the decision's why."""
        if run.pool.spec.autoscaling is None or not isinstance(before, int) or before == decision.replicas:
            return
        verb = Reason.SCALED_UP if decision.replicas > before else Reason.SCALED_DOWN
        self._recorder.event(
            run.raw, NORMAL, verb, f"{before} -> {decision.replicas} runners: {decision.message}"
        )

    # ------------------------------------------------------------------ deletion

    def _finalize(self, run: _Pass) -> Result:
        """``_deregister_and_release``, saying so when the cluster refuses one of its writes
        (``told``: the pass began with that said already)."""
        stored = (run.raw.get("status") or {}).get("conditions") or []
        before = conditions.find(stored, conditions.RUNNERS_DEREGISTERED)
        told = before is not None and before.get("reason") == Reason.DELETION_REFUSED
        try:
            return self._deregister_and_release(run, refused_before=told)
        except ApiException as err:
            self._raise_unless_refused(run, err)
            return self._deletion_refused(run, err, told=told)

    def _deletion_refused(self, run: _Pass, err: ApiException, *, told: bool) -> Result:
        """A write the deletion needs was refused as asked (an admission policy on the pool's
        finalizer, on a pod's deletion, a Secret's patch): the finalizer stays, the condition and
        one Warning Event quote the cluster, and the deletion tries again every
        ``--busy-runner-wait``. Without this it was retried in silence, ever more slowly."""
        wait = self._settings.deletion.busy_runner_wait
        message = (
            f"the cluster refused a write the deletion needs: {describe(err)}; tried again every {wait:.0f}s"
        )
        stamp = conditions.Stamp(run.pool.generation, self._states.clock())
        refused = stamp.condition(conditions.RUNNERS_DEREGISTERED, False, Reason.DELETION_REFUSED, message)
        self._set_condition(run, refused)
        if not told:
            self._recorder.event(run.raw, WARNING, Reason.DELETION_REFUSED, message)
        _log_pass(run.pool.namespace, run.pool.name, "refused", run.writes)
        return Result(requeue_after=wait)

    def _deregister_and_release(self, run: _Pass, *, refused_before: bool = False) -> Result:
        """Deregister every runner of the pool, then let it go.

        Order matters so that nothing stays registered and no busy runner is killed: stop
        issuing tokens and have the token updater empty the Secret (a restarted container
        cannot register again), wait until the cache shows every pod the pool created that
        the API server still has (the drain reads the cache), have the runner managers drain
        the pool (an idle runner is deleted on GitHub at once and can take no job; a busy one
        answers 422 and is left to finish; the pods go only once no runner is busy), wait for
        its pods to go, then look once more for a late registration. ``RunnersDeregistered``
        says what it waits for. A pool that never registered a runner goes without GitHub, and
        one whose credential is lost goes after a bounded wait (``runnerpool.deregistration``).
        """
        pool = run.pool
        if naming.POOL_FINALIZER not in pool.finalizers:
            return Result()
        issued = self._forget(pool.namespace, pool.name, expectations=False)
        waiting = self._deletion_gates(run)  # before any read of the namespace's caches
        if waiting is not None:
            return waiting
        # A pool the allow-list refuses now is drained all the same: it has a finalizer only
        # if it was allowed once, and the runners it registered then (busy ones too) are no
        # fewer for the rules' change; leaving them, or deleting its scale set under them, was
        # worse than the cleanup calls at a scope it used.
        if not self._may_have_runners(run, issued=issued):
            # No GitHub call for a pool that never registered a runner (but its scale set, if
            # it has one).
            self._withdraw_token(run)
            return self._let_go(run)
        self._protect_credentials(run)
        self._withdraw_token(run)
        if self._pods.unseen_creates(pool):
            # A pod created just before the deletion that the cache does not show yet: the drain
            # reads the cache, and would let the pool go while that pod may still register a
            # runner (its event brings the next pass; an expectation ends after 5 minutes).
            return Result(requeue_after=self._settings.deletion.pods_gone_wait)
        drained = self._drain(run)
        if isinstance(drained, Result):
            return drained  # the credential is lost: waiting for it, or let go without it
        if drained.listing_wait is not None:
            return Result(requeue_after=drained.listing_wait)  # the scope's next shared listing
        stamp = conditions.Stamp(pool.generation, self._states.clock())
        if drained.busy:
            message = f"{drained.busy} runner(s) still running a job"
            self._recorder.event(run.raw, NORMAL, Reason.WAITING_FOR_BUSY_RUNNERS, message)
            busy = f"{message}; deleting when done"
            self._set_condition(
                run, stamp.condition(conditions.RUNNERS_DEREGISTERED, False, Reason.RUNNERS_BUSY, busy)
            )
            return Result(requeue_after=self._settings.deletion.busy_runner_wait)
        run.writes.add(Write.PODS_DELETED, drained.pods_deleted)
        if drained.pods_left:
            self._report_deregistered(run, stamp, drained)
            return Result(requeue_after=self._settings.deletion.pods_gone_wait)
        waiting = self._delete_scale_set(run)  # before "deregistered": it may have to wait
        if waiting is not None:
            return waiting
        return self._release_reported(run, stamp, drained, refused_before=refused_before)

    def _release_reported(
        self, run: _Pass, stamp: conditions.Stamp, drained: Drain, *, refused_before: bool
    ) -> Result:
        """``RunnersDeregistered``, then the finalizer goes. After a refused release the report
        comes once the release went through: before it, "deregistered" flipped back to
        ``DeletionRefused`` at each refused attempt (the pool may be held by a finalizer of
        someone else's; gone, the write ends the pass quietly)."""
        if not refused_before:
            self._report_deregistered(run, stamp, drained)
            return self._release(run)
        released = self._release(run)
        self._report_deregistered(run, stamp, drained)
        return released

    def _deletion_gates(self, run: _Pass) -> Result | None:
        """The gates asked on deletion (``Gate.on_deletion``); ``None``: passed, and said so (a
        namespace enabled again while its pool waited to drain).

        Where the operator may no longer read or write, the deletion waits, as the pool says,
        for the namespace to be enabled again; in a namespace being deleted, whose deletion took
        the operator's access with it (a Role, or a binding let go by hand), that will not
        happen: as with a lost credential, it says which runners may be left and goes after
        ``--credential-lost-wait``."""
        closed = self._check_gates(run, deleting=True)
        if closed is None:
            stored = (run.raw.get("status") or {}).get("conditions") or []
            changed = [c for c in run.gates if not conditions.same_state(stored, c)]
            if changed:
                self._set_condition(run, *changed)
            return None
        namespace = run.pool.namespace
        if not self._reads.namespace_terminating(namespace):
            return self._refuse(run, closed, deleting=True)
        taken = (
            f"namespace {namespace} is being deleted and took the operator's access to it along (a "
            "Role, or a RoleBinding let go by hand); nothing of the pool there can be read"
        )
        lost = CredentialError(Reason.NAMESPACE_NOT_ENABLED, taken)
        return self._credential_lost(run, lost, restore="grant the operator its namespace role there again")

    def _report_deregistered(self, run: _Pass, stamp: conditions.Stamp, drained: Drain) -> None:
        """``RunnersDeregistered`` True; pods stuck Terminating (a lost node) are named with their
        nodes, and a Warning Event tells when they first are and when the pool goes without them
        (``deregistration.stuck_pods``)."""
        reason, message = Reason.DEREGISTERED, "no runner of this pool is registered"
        if drained.stuck:
            reason = Reason.RUNNER_PODS_STUCK_TERMINATING
            message = deregistration.stuck_pods(drained.stuck, let_go=not drained.pods_left)
            stored = (run.raw.get("status") or {}).get("conditions") or []
            before = conditions.find(stored, conditions.RUNNERS_DEREGISTERED)
            if not drained.pods_left or before is None or before.get("reason") != reason:
                self._recorder.event(run.raw, WARNING, reason, message)
            if not drained.pods_left:
                return  # the pool goes now
        self._set_condition(run, stamp.condition(conditions.RUNNERS_DEREGISTERED, True, reason, message))

    def _let_go(self, run: _Pass) -> Result:
        """The pool's scale set, if it has one, goes from GitHub; then the finalizer."""
        waiting = self._delete_scale_set(run)
        return waiting if waiting is not None else self._release(run)

    def _delete_scale_set(self, run: _Pass) -> Result | None:
        """A scale-set pool's scale set goes from GitHub once its runners are gone (None: gone,
        or none to delete); a failure keeps the finalizer, says why and tells when to look
        again, as a drain's does (:meth:`_deregistration_failed`)."""
        pool = run.pool
        known = pool.status.scale_set
        if pool.spec.scale_set is None or self._jobs.scale_sets is None:
            return None
        scale_set_id = None if known is None else known.id  # None: found by name all the same
        try:
            credentials = self._secrets.credentials(pool.namespace, pool.spec.credential_secret_name)
            self._jobs.scale_sets.delete(self._pool_ref(run, credentials), scale_set_id)
        except (GitHubError, CredentialError) as err:
            if err.reason is Reason.SCALE_SET_STILL_USED:
                return self._scale_set_still_used(run, err.message)
            if deregistration.credential_failure(err):
                if scale_set_id is not None:  # the listener made it: wait for the credential, as a drain does
                    return self._credential_lost(run, err)
                # Never recorded: a credential that never worked made none (a typo'd Secret).
                message = (
                    f"cannot delete runner scale set {pool.spec.scale_set.name}: {err.reason}: {err}; "
                    "if its listener made it, remove it in the runner groups' settings on GitHub"
                )
                self._recorder.event(run.raw, WARNING, Reason.RUNNERS_LEFT_ON_GITHUB, message)
                return None
            doing = f"delete runner scale set {pool.spec.scale_set.name}"
            return self._deregistration_failed(run, doing, err)
        log.info(
            "pool %s: deleted runner scale set %s (id %s)", run.key, pool.spec.scale_set.name, scale_set_id
        )
        return None

    def _scale_set_still_used(self, run: _Pass, message: str) -> Result:
        """Another deleted pool naming the scale set may still have busy runners in it: waited
        for as this pool's own busy runners are (a Normal Event, ``RunnersDeregistered`` False,
        ``--busy-runner-wait``), not as a failure."""
        self._recorder.event(run.raw, NORMAL, Reason.WAITING_FOR_BUSY_RUNNERS, message)
        stamp = conditions.Stamp(run.pool.generation, self._states.clock())
        condition = stamp.condition(
            conditions.RUNNERS_DEREGISTERED, False, Reason.SCALE_SET_STILL_USED, message
        )
        self._set_condition(run, condition)
        return Result(requeue_after=self._settings.deletion.busy_runner_wait)

    def _release(self, run: _Pass) -> Result:
        """The finalizer goes, and with it the pool's hold on its credential Secret.

        In this order: the finalizer's patch can meet a conflict (another writer of the pool),
        and a Secret released before it, in a namespace being deleted, would be gone when the
        next pass drains again. A release that fails after the finalizer went is asked again when
        the pool is gone from the cache (``PoolSecrets.forget``)."""
        pool = run.pool
        self._remove_finalizer(run)
        self._secrets.finalized(pool.namespace, pool.name, pool.spec.credential_secret_name)
        return Result()

    def _may_have_runners(self, run: _Pass, *, issued: bool = False) -> bool:
        """Whether the pool may have registered a runner (``runnerpool.deregistration``); a JIT
        pool's live evidence is recorded as its mark: the drain deletes its pods and Secrets.
        ``issued``: the JIT fills wrote a config the caches may not show yet."""
        pool = run.pool
        if deregistration.marked(run.raw):
            return True
        pods = self._reads.list_pods(pool.namespace, pool.name)
        jit_names = pod_state.jit_secret_names(pods)
        found = issued or deregistration.may_have_runners(
            run.raw,
            jit=_jit(pool),
            token_secret=self._reads.get_secret(pool.namespace, naming.token_secret_name(pool.name)),
            pods=pods,
            jit_secrets=[self._reads.get_secret(pool.namespace, n) for n in jit_names],
        )
        if found and _jit(pool):  # its JIT Secrets go with the pods the drain deletes
            self._annotate(run, {naming.MAY_HAVE_RUNNERS_ANNOTATION: "true"})
        elif _jit(pool):
            found = self._marked_live(run)
        self._jobs.marked(pool.namespace, pool.name)  # marked, or no mark needed: it answered
        return found

    def _marked_live(self, run: _Pass) -> bool:
        """Whether the pool as the API server has it carries the mark: an earlier pass may
        have written it (its JIT fills said a config was made, and say nothing since) and this
        one read a cache that does not show it yet. Let go on that stale read, a scale-set
        pool's scale set was deleted on GitHub, its busy runners with it, before the finalizer's
        patch met its 409. One GET, for a JIT pool that shows no runner."""
        live = self._kube.get_if_there(RUNNER_POOLS, run.pool.namespace, run.pool.name)
        return live is not None and deregistration.marked(live)

    def _mark_may_have_runners(self, run: _Pass, secret: dict[str, Any], seen: Observed) -> None:
        """Mark a JIT pool once a JIT config was issued for one of its pods (its Secret filled,
        or its runner started); a token pool's mark is on its token Secret, written with the
        token (``runnerpool.deregistration``)."""
        if (
            not _jit(run.pool)
            or deregistration.marked(run.raw)
            or not deregistration.may_have_runners(
                run.raw, jit=True, token_secret=None, pods=seen.pods, jit_secrets=seen.jit_secrets.values()
            )
        ):
            return
        self._annotate(run, {naming.MAY_HAVE_RUNNERS_ANNOTATION: "true"})

    def _annotate(self, run: _Pass, annotations: dict[str, str | None]) -> None:
        self._patch_pool(run, {"metadata": {"annotations": annotations}})
        run.writes.add(Write.POOL_ANNOTATED)

    def _credential_lost(
        self, run: _Pass, err: GitHubError | CredentialError, *, restore: str = "restore the credential"
    ) -> Result:
        """Wait ``--credential-lost-wait`` from when the credential was first found lost, saying
        which runners may be left (and what to ``restore``); then let the pool go
        (``runnerpool.deregistration``)."""
        pool, now = run.pool, self._states.clock()
        since = deregistration.lost_since(run.raw)
        if since is None:
            since = now
            self._annotate(run, {naming.CREDENTIAL_LOST_ANNOTATION: f"{now:{RFC3339}}"})
        deadline = since + timedelta(seconds=self._settings.deletion.credential_lost_wait)
        try:
            pods = [str(p["metadata"]["name"]) for p in self._reads.list_pods(pool.namespace, pool.name)]
        except PodsNotCachedError:
            pods = []  # the namespace's access went with its deletion: its runners are named by pool
        left = deregistration.left_on_github(pool, pods, self._settings.github.api_url_of(pool))
        if now >= deadline:
            message = f"let go without deregistering ({err.reason}: {err}): {left}"
            self._recorder.event(run.raw, WARNING, Reason.RUNNERS_LEFT_ON_GITHUB, message)
            self._release(run)
            return Result()
        message = (
            f"cannot deregister runners: {err.reason}: {err}; {restore} by "
            f"{deadline:{RFC3339}} or the pool is let go without deregistering, and {left}"
        )
        self._recorder.event(run.raw, WARNING, Reason.CREDENTIAL_LOST, message)
        stamp = conditions.Stamp(pool.generation, now)
        self._set_condition(
            run, stamp.condition(conditions.RUNNERS_DEREGISTERED, False, Reason.CREDENTIAL_LOST, message)
        )
        wait = (deadline - now).total_seconds()
        return Result(requeue_after=min(wait, self._settings.deletion.busy_runner_wait))

    def _withdraw_token(self, run: _Pass) -> None:
        """Stop the token job; the token updater empties the Secret if it is the pool's and holds one."""
        pool = run.pool
        secret = self._reads.get_secret(pool.namespace, naming.token_secret_name(pool.name))
        ours = secret is not None and controlled_by(secret, pool.uid)
        if self._jobs.tokens.withdraw(
            pool.namespace, pool.name, has_token=ours and pool_status.has_token(secret or {})
        ):
            run.writes.add(Write.TOKEN_EMPTIED)

    def _drain(self, run: _Pass) -> Drain | Result:
        """Have the runner managers deregister the pool's runners and, once none is busy,
        delete its pods. A GitHub failure keeps the finalizer and says why; a lost credential
        is waited for a bounded time (:meth:`_credential_lost`, its result returned)."""
        pool = run.pool
        try:
            credentials = self._secrets.credentials(pool.namespace, pool.spec.credential_secret_name)
            drained = self._jobs.runners.drain(self._pool_ref(run, credentials))
        except (GitHubError, CredentialError) as err:
            if deregistration.credential_failure(err):
                return self._credential_lost(run, err)
            return self._deregistration_failed(run, "deregister runners", err)
        if deregistration.lost_since(run.raw) is not None:
            self._annotate(run, {naming.CREDENTIAL_LOST_ANNOTATION: None})  # it came back
        if drained.deregistered:
            message = f"deregistered {drained.deregistered} runner(s)"
            self._recorder.event(run.raw, NORMAL, Reason.DEREGISTERED_RUNNERS, message)
        return drained

    def _deregistration_failed(self, run: _Pass, doing: str, err: GitHubError | CredentialError) -> Result:
        """GitHub failed the finalizer's ``doing``: a Warning, ``RunnersDeregistered`` says why,
        and the finalizer stays.

        Waiting for GitHub is not an error: the pass looks again when the scope may call GitHub
        again (the error's ``retry_after``, which the runner managers' ``ScopeBackoff`` sets),
        else after ``--busy-runner-wait``. Raised, it would take the work queue's per-pool
        backoff instead, which every pass doubles: a namespace being deleted sends the pool a
        pass per pod and Secret event, and after an outage of a minute its pool came back only
        minutes later, its namespace stuck in Terminating meanwhile.
        """
        pool = run.pool
        self._recorder.event(
            run.raw, WARNING, Reason.DEREGISTRATION_FAILED, f"cannot {doing} yet: {err.reason}: {err}"
        )
        stamp = conditions.Stamp(pool.generation, self._states.clock())
        failed = f"cannot {doing} yet: {err}"
        try:
            self._set_condition(
                run, stamp.condition(conditions.RUNNERS_DEREGISTERED, False, err.reason, failed)
            )
        except ApiException as api_err:
            log.warning("cannot record the deregistration failure of %s: %s", pool.name, describe(api_err))
        return Result(requeue_after=err.retry_after or self._settings.deletion.busy_runner_wait)

    def _remove_finalizer(self, run: _Pass) -> None:
        self._patch_finalizers(run, [f for f in run.pool.finalizers if f != naming.POOL_FINALIZER])
        run.writes.add(Write.FINALIZER_REMOVED)


def _ends_quietly(run: _Pass, err: ApiException) -> bool:
    """A pool gone or changed under a stale cache (404/409), or a namespace being deleted.

    Neither is an error: the pool's deletion event, or the namespace's, brings the pool back
    here (then to deregistration) without a retry.
    """
    pool = run.pool
    status = status_of(err)
    this_pool = status.details.get("kind") == api.PLURAL and status.details.get("name") == pool.name
    stale = this_pool and err.status in (404, 409)
    if not stale and not is_namespace_terminating(err):
        return False
    log.debug("pool %s/%s: reconcile ends: %s", pool.namespace, pool.name, describe(err))
    return True


def _jit(pool: api.RunnerPool) -> bool:
    return pool.spec.registers_jit


def _ever_filled(secret: dict[str, Any]) -> bool:
    """The token scheduler wrote a runner id beside the config: never filled again."""
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    return children.jit_filled(secret) or naming.JIT_RUNNER_ID_ANNOTATION in annotations


def _rechecks(seen: Observed) -> float | None:
    """A missing webhook Secret, or a missing credential Secret (the cache sees it only once it
    carries our label), is looked for again: no watch reports its creation."""
    return _sooner(
        WEBHOOK_SECRET_RECHECK if seen.webhook_problem is not None else None, seen.credentials_retry
    )


def _busy_not_marked(pool: api.RunnerPool, pods: list[dict[str, Any]]) -> bool:
    """A delivery or poll says a job runs on one of the pool's pods, and the pod has no busy mark.

    The mark (and with it the eviction protection) follows the runner listing, which would
    reach it only at the next ``--runner-sync-interval``; a round brought forward reaches it
    within ``kick_gap``, so a drain right after a job starts finds the pod protected.
    """
    demand, scale_set = pool.status.demand, pool.status.scale_set
    running = {j.runner for j in demand.jobs.values() if j.state == "in_progress"} if demand else set()
    running.update(scale_set.busy_runners if scale_set else ())
    running.discard(None)
    if not running:
        return False
    return any(str(pod["metadata"].get("name")) in running and not template.busy_marked(pod) for pod in pods)


#: Condition reasons of a pool on its way up: moving between them (or on to ready) is not news.
_STARTING = frozenset(
    {Reason.WAITING_FOR_TOKEN, Reason.TOKEN_NOT_READY, Reason.RUNNERS_STARTING, Reason.SCALE_SET_PENDING}
)
#: Ready reasons whose news has an Event of its own (``FailedCreate`` for each refusal, and
#: ``RunnerPodsFailing`` or ``RunnerVersionOutdated`` per change of the stuck pods' reasons): no
#: second one for the condition.
_TOLD_BY_THEIR_OWN_EVENTS = frozenset(
    {
        pool_status.POD_CREATE_FAILED_REASON,
        Reason.TEMPLATE_INVALID,
        pool_status.RUNNER_PODS_FAILING_REASON,
        Reason.RUNNER_VERSION_OUTDATED,
    }
)


def _has_failure(status: dict[str, Any]) -> bool:
    """Whether a condition reports a failure (not the normal way up, not true)."""
    return any(c["status"] != "True" and c["reason"] not in _STARTING for c in status["conditions"])


def _was_ready(raw: dict[str, Any]) -> bool:
    """Whether the pool's stored status says it was ready (before this pass)."""
    ready = conditions.find((raw.get("status") or {}).get("conditions") or [], conditions.READY)
    return ready is not None and ready.get("status") == "True"


def _sooner(a: float | None, b: float | None) -> float | None:
    """The earlier of two optional requeue delays."""
    waits = [w for w in (a, b) if w is not None]
    return min(waits) if waits else None


def _log_pass(namespace: str, name: str, action: str, writes: Writes) -> None:
    """The one line per reconcile: what it did (create, update, noop, requeue, delete, gone,
    invalid, ended, refused) and which writes it made."""
    extra = {
        "pool": pool_key(namespace, name),
        "namespace": namespace,
        "action": action,
        "writes": writes.as_log(),
    }
    log.info("reconciled pool", extra=extra)
