"""Reconcile one RunnerPool: small steps, each returning at its first error.

Reads come from the informer caches; every write is skipped when the live
object already says what the operator wants, so reconciling a converged pool
writes nothing.  Waiting (for a token, for a busy runner) is a requeue, not an
error: only errors get exponential backoff from the work queue.

GitHub is the runner managers' business (``runnerpool.runners``): ``status.runners`` is
the counts they computed from their latest listing, read without a request, and the
finalizer asks them to deregister the pool's runners, so one component owns every runner
deletion on GitHub.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, autoscaling, children, conditions, metrics, naming
from runnerpool import status as pool_status
from runnerpool.api_errors import describe, is_namespace_terminating, status_of
from runnerpool.autoscaling import Decision, Window
from runnerpool.credential_protection import CredentialProtection
from runnerpool.domain import Drain, PoolRef, TokenFailure, pool_key, split_key, utcnow
from runnerpool.drift import contains
from runnerpool.events import NORMAL, WARNING, OnChange, Recorder
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import GitHubError
from runnerpool.github.groups import RunnerGroups
from runnerpool.github.protocol import GitHubClients
from runnerpool.hook_access import HookAccessStep
from runnerpool.pods import failures, jit, template
from runnerpool.pods.create_backoff import CreateBackoff
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.jit import JitSecrets
from runnerpool.pods.step import Converged, LivePods, PodStep
from runnerpool.pods.template import busy_marked
from runnerpool.reads import Reads
from runnerpool.reasons import Reason
from runnerpool.runtime.controller import Result, TerminalError
from runnerpool.runtime.kube import RUNNER_POOLS, SECRETS, Kube, Resource
from runnerpool.settings import Settings
from runnerpool.writes import Write, Writes

log = logging.getLogger(__name__)

__all__ = [
    "DeregistrationError",
    "InvalidSpecError",
    "PoolState",
    "Reconciler",
    "RunnerJobs",
    "TokenJobs",
]


class TokenJobs(Protocol):
    """The part of ``secret_updater.TokenUpdater`` the reconciler drives."""

    def start(self, pool: PoolRef) -> None: ...
    def stop(self, namespace: str, name: str) -> None: ...
    def failure(self, namespace: str, name: str) -> TokenFailure | None: ...
    def check_secret(
        self, namespace: str, name: str, encoded_token: str | None, *, recreated: bool
    ) -> float | None: ...
    def withdraw(self, namespace: str, name: str, *, has_token: bool) -> bool: ...
    #: Each JIT pod's own config: filled by the same scheduler (``secret_updater.jit``).
    @property
    def jit(self) -> jit.JitJobs: ...


class RunnerJobs(Protocol):
    """The part of ``runnerpool.runners.manager.RunnerManagers`` the reconciler drives."""

    def start(self, pool: PoolRef) -> None: ...
    def stop(self, namespace: str, name: str) -> None: ...
    def counts(self, namespace: str, name: str) -> api.RunnerCounts | None: ...
    def drain(self, pool: PoolRef) -> Drain: ...
    def bring_round_forward(self, namespace: str, name: str) -> None: ...


class PoolState(Protocol):
    """Anything else that keeps per-pool state and must let go of a pool that is gone
    (the demand recorder); the reconciler tells it, without knowing what it is."""

    def forget(self, namespace: str, name: str) -> None: ...


#: Why a pool's own webhook secret (``spec.autoscaling.webhookSecretRef``) cannot be used, or
#: ``None`` when it can (``runnerpool.demand.secret.PoolSecrets.problem``, given by the manager).
WebhookSecretCheck = Callable[[str, api.WebhookSecretRef], str | None]
#: Seconds until a pool whose webhook Secret is missing or unusable looks for it again.
WEBHOOK_SECRET_RECHECK = 30.0

#: Seconds until a pool whose runner group could not be checked looks again (its answers are
#: cached, see ``runnerpool.github.groups``: most looks cost no request).
RUNNER_GROUP_RECHECK = 60.0


@dataclass(frozen=True)
class _Gate:
    """A check a pool must pass before it may have runners, as its condition; a closed gate
    says when to look again (``None``: when something changes)."""

    condition: dict[str, Any]
    recheck: float | None = None

    @property
    def open(self) -> bool:
        return bool(self.condition["status"] == "True")


class DeregistrationError(RuntimeError):
    """GitHub refused to deregister; the finalizer stays and the queue backs off."""


class InvalidSpecError(TerminalError):
    """The stored spec fails validation (written under an older, looser schema): retrying
    cannot help until the user edits it, so the queue drops the key without backoff."""


@dataclass
class _Pass:
    """One reconcile: the pool as read (``raw`` follows the pool's own writes) and its writes."""

    pool: api.RunnerPool
    raw: dict[str, Any]
    writes: Writes = field(default_factory=Writes)
    #: The conditions of the gates the pool passed (``Reconciler._gates``).
    gates: list[dict[str, Any]] = field(default_factory=list)
    #: The id of the pool's runner group, once its gate found it (JIT runners are made in it).
    runner_group_id: int | None = None


class Reconciler:
    def __init__(
        self,
        cache: Reads,
        api_client: client.ApiClient,
        tokens: TokenJobs,
        runners: RunnerJobs,
        recorder: Recorder,
        *,
        settings: Settings = Settings(),
        clock: Callable[[], datetime] = utcnow,
        expectations: Expectations | None = None,
        protection: CredentialProtection | None = None,
        namespaces: Reads | None = None,
        forgetters: tuple[PoolState, ...] = (),
        webhook_secrets: WebhookSecretCheck | None = None,
        create_backoff: CreateBackoff | None = None,
        github: GitHubClients | None = None,
        runner_groups: RunnerGroups | None = None,
    ) -> None:
        self._cache = cache
        self._jit = JitSecrets(cache, Kube(api_client), tokens.jit)
        # The pools' runner groups, checked with each pool's client (``runnerpool.github.groups``);
        # without ``github``, spec.runnerGroup is not checked.
        self._github = github
        self._runner_groups = runner_groups or RunnerGroups()
        self._webhook_secrets = webhook_secrets
        self._kube = Kube(api_client)
        self._tokens = tokens
        self._recorder = recorder
        self._settings = settings
        self._clock = clock
        self._runners = runners
        self._pods = PodStep(
            cache,
            api_client,
            expectations or Expectations(),
            default_image=settings.runners.image,
            default_api_url=settings.github.api_url,
            backoff=create_backoff,
        )
        self._hook_access = HookAccessStep(cache, self._kube)
        #: Stuck pods are told once per change of their reasons, not on every pass that sees them.
        self._failing_told = OnChange()
        self._status_written: dict[str, float] = {}
        self._first_seen: dict[str, float] = {}
        self._protection = protection
        self._namespaces = namespaces
        self._forgetters = forgetters
        #: The scale-down window of each pool that follows demand (see ``runnerpool.autoscaling``).
        self._windows: dict[str, Window] = {}

    def __call__(self, key: str) -> Result:
        namespace, name = split_key(key)
        parsed = self._cache.pool(namespace, name)
        if parsed is None:
            # Deleted (finalizer already gone) or never ours: make sure no job lingers, and the
            # namespace's busy budget goes with its last pool.
            self._stop_jobs(namespace, name)
            if self._protection is not None:
                self._protection.forget(namespace, name)
            writes = Writes()
            self._pods.release_unused_budget(namespace, writes)
            _log_pass(namespace, name, "gone", writes)
            return Result()
        raw, pool, problems = parsed.raw, parsed.model, parsed.problems
        if pool is None:
            # Stored under an older, looser schema: retrying cannot help until the user edits it.
            self._recorder.event(raw, WARNING, Reason.INVALID_SPEC, f"fix the RunnerPool spec: {problems}")
            _log_pass(namespace, name, "invalid", Writes())
            raise InvalidSpecError(f"{key}: fix the RunnerPool spec: {problems}")
        run = _Pass(pool, raw)
        try:
            result = self._finalize(run) if self._ending(run) else self._converge(run)
        except ApiException as err:
            if not self._ends_quietly(run, err):
                raise
            _log_pass(namespace, name, "ended", run.writes)
            return Result()
        # A pass that made pods says so even when its status write waits (coalesced).
        waiting = result.requeue_after is not None and Write.POD_CREATED not in run.writes
        _log_pass(namespace, name, "requeue" if waiting else run.writes.action, run.writes)
        return result

    def _ending(self, run: _Pass) -> bool:
        """Deleted, or in a namespace being deleted: nothing new may be created, deregister."""
        if run.pool.deleting:
            return True
        return self._namespaces is not None and self._namespaces.namespace_terminating(run.pool.namespace)

    def _ends_quietly(self, run: _Pass, err: ApiException) -> bool:
        """A pool gone or changed under a stale cache (404/409), or a namespace being deleted.

        Neither is an error: the pool's deletion event, or the namespace's, brings the
        pool back here (then to deregistration) without a retry.
        """
        pool = run.pool
        status = status_of(err)
        this_pool = status.details.get("kind") == api.PLURAL and status.details.get("name") == pool.name
        # 409 on the pool itself: the cache was stale, and the newer version's event is
        # already on its way to bring the pool back.
        stale = this_pool and err.status in (404, 409)
        if not stale and not is_namespace_terminating(err):
            return False
        log.debug("pool %s/%s: reconcile ends: %s", pool.namespace, pool.name, describe(err))
        return True

    # ------------------------------------------------------------------ converge

    def _converge(self, run: _Pass) -> Result:
        """Gather, then status, then act: the decision is on the pool before any pod is made."""
        gates = self._gates(run)
        closed = next((gate for gate in gates if not gate.open), None)
        if closed is not None:
            return self._refuse(run, closed)
        run.gates = [gate.condition for gate in gates]
        self._ensure_finalizer(run)
        self._protect_credentials(run)
        # Before any pod: a pod naming a ServiceAccount that does not exist yet is refused.
        self._hook_access.converge(run.pool, run.writes)
        recheck: float | None = None
        if self._registers_jit(run.pool):
            # No pool token: a pool switched from token mode has it emptied and its job stopped.
            secret: dict[str, Any] = {}
            self._withdraw_token(run)
            self._runners.start(self._pool_ref(run))
        else:
            secret = self._ensure_token_secret(run)
            self._ensure_jobs(run)
            # A token lost (Secret deleted, emptied or edited) is refilled now, not at the next refresh.
            recheck = self._tokens.check_secret(
                run.pool.namespace,
                run.pool.name,
                (secret.get("data") or {}).get(naming.TOKEN_SECRET_KEY),
                recreated=Write.SECRET_CREATED in run.writes,
            )
        # One read of the pool's pods for the whole pass: the decision, the creates, the round.
        live = self._pods.read(run.pool)
        decision = self._decide(run.pool, live)
        # A decision that may fall later (scaleDownDelay) is looked at again when it can.
        recheck = _sooner(recheck, decision.recheck_after)
        # A missing webhook Secret is looked for again: no watch reports its creation.
        if self._webhook_secret_problem(run.pool) is not None:
            recheck = _sooner(recheck, WEBHOOK_SECRET_RECHECK)
        # So is a missing credential Secret: the cache sees it only once it carries our label.
        if self._protection is not None:
            missing = self._protection.secrets.retry_in(
                run.pool.namespace, run.pool.spec.credential_secret_name
            )
            recheck = _sooner(recheck, missing)
        # A JIT pod waits for its own config (runnerpool.pods.jit), not for the pool's token.
        token = self._registers_jit(run.pool) or pool_status.has_token(secret)
        if run.pool.spec.autoscaling is not None:
            # The runner managers retire above status.desiredReplicas: it must be there before
            # the pods this decision makes, or they could take the new pods for surplus.
            planned = self._pods.counts(run.pool, decision.replicas, live, with_creates=token)
            self._update_status(run, secret, planned, decision)
        if not token:
            # No new pod without a token, but the pods that run still count in the status.
            counts = self._pods.counts(run.pool, decision.replicas, live)
            wait = self._update_status(run, secret, counts, decision)
            return Result(requeue_after=_sooner(_sooner(wait, self._settings.tokens.wait), recheck))
        converged = self._act_on_pods(run, decision, live)
        self._converge_jit_secrets(run, live)
        wait = self._update_status(run, secret, converged.counts, decision)
        # A refused create is tried again when its backoff ends, whatever else happens meanwhile.
        return Result(requeue_after=_sooner(_sooner(wait, recheck), converged.retry_in))

    # ------------------------------------------------------------------ gates

    def _gates(self, run: _Pass) -> list[_Gate]:
        """The checks before anything is made or asked of GitHub: the namespace may use the
        scope (``--allow``; no GitHub call at all otherwise), then the runner group."""
        pool = run.pool
        stamp = conditions.Stamp(pool.generation, self._clock())
        gates: list[_Gate] = []
        allow = self._settings.tenants.allow_list
        if allow.enforced:
            refusal = allow.refusal(pool.namespace, pool.scope)
            if refusal is not None:
                return [
                    _Gate(stamp.condition(conditions.SCOPE_ALLOWED, False, Reason.SCOPE_NOT_ALLOWED, refusal))
                ]
            allowed = f"--allow lets namespace {pool.namespace} use {pool.scope.kind} {pool.scope.name}"
            gates.append(
                _Gate(stamp.condition(conditions.SCOPE_ALLOWED, True, Reason.SCOPE_ALLOWED, allowed))
            )
        if pool.spec.runner_group is not None and self._github is not None:
            gates.append(self._runner_group_gate(run, stamp, pool.spec.runner_group))
        return gates

    def _runner_group_gate(self, run: _Pass, stamp: conditions.Stamp, name: str) -> _Gate:
        pool = run.pool
        assert self._github is not None
        try:
            client = children.github_client(self._github, pool, self._settings.github.api_url)
            group = self._runner_groups.check(client, pool.scope, name, _served_repositories(pool))
        except (GitHubError, CredentialError) as err:
            wait = getattr(err, "retry_after", None) or RUNNER_GROUP_RECHECK
            condition = stamp.condition(conditions.RUNNER_GROUP_READY, False, err.reason, err.message)
            return _Gate(condition, recheck=max(wait, RUNNER_GROUP_RECHECK))
        run.runner_group_id = group.id
        message = f"runners join runner group {group.name!r} (id {group.id}) of {pool.scope.name}"
        return _Gate(stamp.condition(conditions.RUNNER_GROUP_READY, True, Reason.RUNNER_GROUP_FOUND, message))

    def _refuse(self, run: _Pass, gate: _Gate) -> Result:
        """A pool that may not have runners: no token (the token job stops and the Secret is
        emptied), no runner manager, no new pod; its conditions and an Event say why."""
        pool = run.pool
        self._stop_jobs(pool.namespace, pool.name)
        self._withdraw_token(run)
        refused = gate.condition
        before = conditions.find((run.raw.get("status") or {}).get("conditions") or [], refused["type"])
        ready = {**refused, "type": conditions.READY, "message": f"no runners: {refused['message']}"}
        self._set_condition(run, refused, ready, observed=True)
        if before is None or (before.get("status"), before.get("reason")) != ("False", refused["reason"]):
            self._recorder.event(run.raw, WARNING, refused["reason"], refused["message"])
        _log_pass(pool.namespace, pool.name, "refused", run.writes)
        return Result(requeue_after=gate.recheck)

    def _act_on_pods(self, run: _Pass, decision: Decision, live: LivePods) -> Converged:
        converged = self._pods.converge(run.pool, run.writes, decision.replicas, live)
        pods = converged.counts
        if converged.refused is not None:
            # Every refusal, as a ReplicaSet tells it: the recorder folds repeats into a count, and
            # the backoff keeps the count small.
            self._recorder.event(
                run.raw,
                WARNING,
                Reason.FAILED_CREATE,
                f"creating a runner pod failed: {converged.refused.cause}",
            )
        self._tell_failing(run, pods)
        created = run.writes.count(Write.POD_CREATED)
        if created and _was_ready(run.raw):
            # A pool's first pods are its normal start, which the conditions tell; pods made
            # for a pool that was ready (a scale-up, a replacement) are news.
            self._recorder.event(run.raw, NORMAL, Reason.CREATED_PODS, f"created {created} runner pod(s)")
        if Write.BUDGET_UPDATED in run.writes:
            self._recorder.event(
                run.raw,
                NORMAL,
                Reason.UPDATED_DISRUPTION_BUDGET,
                "brought the busy runners' disruption budget back to spec",
            )
        if pods.surplus or pods.used_up or _busy_not_marked(run.pool, live.pods):
            # Taking pods away and marking busy ones are the runner managers' job: ask for a
            # round now, not in a minute.
            self._runners.bring_round_forward(run.pool.namespace, run.pool.name)
        return converged

    def _tell_failing(self, run: _Pass, pods: pool_status.PodCounts) -> None:
        """A Warning when the reasons the pool's pods are stuck for change (not when a count does:
        pods failing one after the other are one story); pods no longer stuck are told by the
        Ready condition's recovery."""
        reasons = frozenset(f.reason for f in pods.failing)
        key = pool_key(run.pool.namespace, run.pool.name)
        if not self._failing_told.changed(key, reasons) or not reasons:
            return
        message = failures.describe(pods.failing)
        self._recorder.event(run.raw, WARNING, pool_status.RUNNER_PODS_FAILING_REASON, message)

    def _decide(self, pool: api.RunnerPool, live: LivePods) -> Decision:
        """``spec.replicas``, or what demand asks for, held during the scale-down delay only
        by the pods that are still up (``held_by``)."""
        key = pool_key(pool.namespace, pool.name)
        decision, window = autoscaling.decide(pool, self._windows.get(key, Window()), self._clock())
        if pool.spec.autoscaling is not None:
            self._windows[key] = window
        if not decision.holding:
            return decision  # nothing held: no need to count the pods
        return decision.held_by(self._pods.counts(pool, decision.replicas, live).active)

    def _ensure_finalizer(self, run: _Pass) -> None:
        if naming.POOL_FINALIZER not in run.pool.finalizers:
            self._patch_finalizers(run, [*run.pool.finalizers, naming.POOL_FINALIZER])
            run.writes.add(Write.FINALIZER_ADDED)

    def _patch_finalizers(self, run: _Pass, finalizers: list[str]) -> None:
        # The resourceVersion makes this a compare-and-swap: no other controller's finalizer is lost.
        run.raw = self._kube.patch(
            RUNNER_POOLS,
            run.pool.namespace,
            run.pool.name,
            {
                "metadata": {
                    "finalizers": finalizers or None,
                    "resourceVersion": run.raw["metadata"]["resourceVersion"],
                }
            },
        )

    def _protect_credentials(self, run: _Pass) -> None:
        if self._protection is None:
            return
        pool = run.pool
        if self._protection.protect(pool.namespace, pool.name, pool.spec.credential_secret_name):
            run.writes.add(Write.CREDENTIALS_PROTECTED)

    def _ensure_token_secret(self, run: _Pass) -> dict[str, Any]:
        """The empty, owned Secret the token updater fills: the reconciler never writes its data.

        The cache selects Secrets by the managed-by label: a create refused because the Secret
        exists (409) is a cache that lags, or a Secret whose labels someone removed, which no
        event would ever bring back; it is read by name, and its labels put back.
        """
        desired = children.token_secret(run.pool)
        name = desired["metadata"]["name"]
        live = self._cache.get_secret(run.pool.namespace, name)
        if live is None:
            created = self._create(run, Write.SECRET_CREATED, SECRETS, desired)
            if Write.SECRET_CREATED in run.writes:
                return created
            try:
                live = self._kube.get(SECRETS, run.pool.namespace, name)
            except ApiException as err:
                if err.status != 404:
                    raise
                return desired  # deleted since: its own event brings the pool back
        if contains(live.get("metadata", {}), desired["metadata"]):
            return live
        self._kube.patch(SECRETS, run.pool.namespace, name, {"metadata": desired["metadata"]})
        run.writes.add(Write.SECRET_METADATA)
        return live

    def _registers_jit(self, pool: api.RunnerPool) -> bool:
        return pool.spec.registers_jit

    def _converge_jit_secrets(self, run: _Pass, live: LivePods) -> None:
        """Each JIT pod's own Secret (created, filled, emptied): a pool switched back to token
        mode still empties the Secrets of its JIT pods.  Pods made in this pass are seen in the
        next, which their creation brings."""
        request = jit.jit_request(run.pool, template.runner_labels(run.pool), run.runner_group_id)
        self._jit.converge(self._pool_ref(run), request, live.pods, run.writes)

    def _token_failure(self, pool: api.RunnerPool) -> TokenFailure | None:
        if self._registers_jit(pool):
            return self._tokens.jit.failure(pool.namespace, pool.name)
        return self._tokens.failure(pool.namespace, pool.name)

    def _ensure_jobs(self, run: _Pass) -> None:
        """The token job and the runner manager: both idempotent, both cheap to repeat."""
        ref = self._pool_ref(run)
        self._tokens.start(ref)
        self._runners.start(ref)

    def _credentials(self, pool: api.RunnerPool) -> dict[str, Any] | None:
        """The pool's credential Secret: cached once labelled, read by name before that."""
        if self._protection is None:
            return self._cache.get_secret(pool.namespace, pool.spec.credential_secret_name)
        return self._protection.secrets.get(pool.namespace, pool.spec.credential_secret_name)

    def _pool_ref(self, run: _Pass) -> PoolRef:
        spec = run.pool.spec
        credentials = self._credentials(run.pool)
        return PoolRef(
            namespace=run.pool.namespace,
            name=run.pool.name,
            scope=run.pool.scope,
            credential_secret_name=spec.credential_secret_name,
            github_api_url=self._api_url(run.pool),
            credentials_version=(credentials or {}).get("metadata", {}).get("resourceVersion", "missing"),
        )

    def _stop_jobs(self, namespace: str, name: str) -> None:
        key = pool_key(namespace, name)
        self._status_written.pop(key, None)
        self._first_seen.pop(key, None)
        self._windows.pop(key, None)
        self._failing_told.forget(key)
        self._pods.forget(namespace, name)
        self._tokens.stop(namespace, name)
        self._tokens.jit.stop(namespace, name)
        metrics.forget_pool(namespace, name)
        self._runners.stop(namespace, name)
        for state in self._forgetters:
            state.forget(namespace, name)

    def _api_url(self, pool: api.RunnerPool) -> str:
        return children.api_url(pool, self._settings.github.api_url)

    def _create(
        self, run: _Pass, write: Write, resource: Resource, desired: dict[str, Any]
    ) -> dict[str, Any]:
        """Create a child from the cache's miss; returns ``desired`` itself when it already exists.

        A 409 means the cache has not caught up with an earlier create: the object's own
        event brings it, and the reconcile it triggers takes it from there.
        """
        try:
            answer = self._kube.create(resource, run.pool.namespace, desired)
        except ApiException as err:
            if err.status != 409:
                raise
            return desired
        run.writes.add(write)
        return answer

    # ------------------------------------------------------------------ status

    def _update_status(
        self, run: _Pass, secret: dict[str, Any], pods: pool_status.PodCounts | None, decision: Decision
    ) -> float | None:
        """Write the status if it changed; returns seconds to wait when the write is coalesced.

        ``status.demand`` is not the reconciler's (``runnerpool.demand.recorder`` writes it,
        on any replica): it is left out of the comparison and of the patch, which would
        otherwise write on every pass or null it.
        """
        pool = run.pool
        old = {k: v for k, v in (run.raw.get("status") or {}).items() if k != pool_status.DEMAND}
        refused = self._pods.create_failure(pool)
        status = pool_status.desired_status(
            conditions.Stamp(pool.generation, self._clock()),
            pool,
            old=old,
            secret=secret,
            pods=pods,
            failure=self._token_failure(pool),
            runners=self._runner_counts(pool),
            decision=decision,
            webhook_secret_problem=self._webhook_secret_problem(pool),
            refused=refused.cause if refused is not None else None,
            gates=run.gates,
        )
        metrics.observe_pool(pool, status, pods.failing if pods else ())
        if status == old:
            return None
        wait = self._coalesced(pool, old, status)
        if wait is not None:
            return wait
        run.raw = self._kube.patch(
            RUNNER_POOLS,
            pool.namespace,
            pool.name,
            {"status": pool_status.merge_patch(old, status)},
            subresource="status",
        )
        run.writes.add(Write.STATUS)
        self._record_transitions(run, old.get("conditions") or [], status["conditions"])
        self._record_scaling(run, old.get("desiredReplicas"), decision)
        return None

    def _coalesced(self, pool: api.RunnerPool, old: dict[str, Any], status: dict[str, Any]) -> float | None:
        """Seconds a status change waits (pod counts while pods start fold into one write),
        or ``None`` to write it now (and remember when)."""
        key = pool_key(pool.namespace, pool.name)
        now = time.monotonic()
        last = self._status_written.get(key)
        if not old and last is None and not _has_failure(status):
            # A new pool's first status waits as long as a coalesced one: its token usually
            # comes within that time, and "waiting for the token" would be overwritten at once.
            first = self._first_seen.setdefault(key, now)
            wait = first + self._settings.queue.status_coalesce - now
            if wait > 0 and pool.spec.autoscaling is None:
                return wait
        if last is not None and not pool_status.notable(old, status):
            wait = last + self._settings.queue.status_coalesce - now
            if wait > 0:
                return wait
        self._status_written[key] = now
        self._first_seen.pop(key, None)
        return None

    def _webhook_secret_problem(self, pool: api.RunnerPool) -> str | None:
        ref = pool.spec.autoscaling.webhook_secret_ref if pool.spec.autoscaling else None
        if ref is None or self._webhook_secrets is None:
            return None
        return self._webhook_secrets(pool.namespace, ref)

    def _runner_counts(self, pool: api.RunnerPool) -> dict[str, Any] | None:
        counts = self._runners.counts(pool.namespace, pool.name)
        return None if counts is None else counts.model_dump(by_alias=True)

    def _set_condition(self, run: _Pass, *conds: dict[str, Any], observed: bool = False) -> None:
        """Write conditions on their own (the finalizer and a refused pool have no full status
        to compute); ``observed``: the pool's generation was acted on (written with them)."""
        stored = run.raw.get("status") or {}
        old = stored.get("conditions") or []
        merged = conditions.merge(old, list(conds))
        status: dict[str, Any] = {"conditions": merged}
        if observed:
            status["observedGeneration"] = run.pool.generation
        if all(stored.get(key) == value for key, value in status.items()):
            return
        pool = run.pool
        run.raw = self._kube.patch(
            RUNNER_POOLS, pool.namespace, pool.name, {"status": status}, subresource="status"
        )
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
        message = f"{before} -> {decision.replicas} runners: {decision.message}"
        self._recorder.event(run.raw, NORMAL, verb, message)

    # ------------------------------------------------------------------ deletion

    def _finalize(self, run: _Pass) -> Result:
        """Deregister every runner of the pool, then let it go.

        Order matters so that nothing stays registered and no busy runner is
        killed: stop issuing tokens and have the token updater empty the Secret (a
        restarted container cannot register again), have the runner managers drain the
        pool (an idle runner is deleted on GitHub at once and can take no job; a busy one
        answers 422 and is left to finish; the pods go only once no runner is busy), wait
        for its pods to go, then look once more for a late registration (every pass
        lists again, and the pass that finds the pods gone lists last).

        The runner managers let go of the pool first, so that nothing else touches its
        runners or pods meanwhile.  ``RunnersDeregistered`` says what the deletion waits for.
        """
        pool = run.pool
        if naming.POOL_FINALIZER not in pool.finalizers:
            return Result()
        self._stop_jobs(pool.namespace, pool.name)
        if self._settings.tenants.allow_list.refusal(pool.namespace, pool.scope) is not None:
            # No GitHub call for a scope the namespace may not use (it made no runner there).
            self._withdraw_token(run)
            self._remove_finalizer(run)
            return Result()
        self._protect_credentials(run)
        self._withdraw_token(run)
        drained = self._drain(run)
        if drained.listing_wait is not None:
            return Result(requeue_after=drained.listing_wait)  # the scope's next shared listing
        stamp = conditions.Stamp(pool.generation, self._clock())
        if drained.busy:
            message = f"{drained.busy} runner(s) still running a job"
            self._recorder.event(run.raw, NORMAL, Reason.WAITING_FOR_BUSY_RUNNERS, message)
            self._set_condition(
                run,
                stamp.condition(
                    conditions.RUNNERS_DEREGISTERED,
                    False,
                    Reason.RUNNERS_BUSY,
                    f"{message}; deleting when done",
                ),
            )
            return Result(requeue_after=self._settings.deletion.busy_runner_wait)
        self._set_condition(
            run,
            stamp.condition(
                conditions.RUNNERS_DEREGISTERED,
                True,
                Reason.DEREGISTERED,
                "no runner of this pool is registered",
            ),
        )
        run.writes.add(Write.PODS_DELETED, drained.pods_deleted)
        self._pods.delete_legacy_deployment(pool, run.writes)
        if drained.pods_left:
            return Result(requeue_after=self._settings.deletion.pods_gone_wait)
        self._remove_finalizer(run)
        if self._protection is not None:
            self._protection.finalized(pool.namespace, pool.name, pool.spec.credential_secret_name)
        return Result()

    def _withdraw_token(self, run: _Pass) -> None:
        secret = self._cache.get_secret(run.pool.namespace, naming.token_secret_name(run.pool.name))
        has_token = secret is not None and pool_status.has_token(secret)
        if self._tokens.withdraw(run.pool.namespace, run.pool.name, has_token=has_token):
            run.writes.add(Write.TOKEN_EMPTIED)

    def _drain(self, run: _Pass) -> Drain:
        """Have the runner managers deregister the pool's runners and, once none is busy,
        delete its pods. A GitHub or credential failure keeps the finalizer and says why."""
        pool = run.pool
        try:
            drained = self._runners.drain(self._pool_ref(run))
        except (GitHubError, CredentialError) as err:
            reason = err.reason
            self._recorder.event(
                run.raw,
                WARNING,
                Reason.DEREGISTRATION_FAILED,
                f"cannot deregister runners yet: {reason}: {err}",
            )
            stamp = conditions.Stamp(pool.generation, self._clock())
            failed = stamp.condition(
                conditions.RUNNERS_DEREGISTERED, False, reason, f"cannot deregister runners yet: {err}"
            )
            try:
                self._set_condition(run, failed)
            except ApiException as api_err:
                log.warning(
                    "cannot record the deregistration failure of %s: %s", pool.name, describe(api_err)
                )
            raise DeregistrationError(f"{pool.namespace}/{pool.name}: {reason}: {err}") from err
        if drained.deregistered:
            self._recorder.event(
                run.raw, NORMAL, Reason.DEREGISTERED_RUNNERS, f"deregistered {drained.deregistered} runner(s)"
            )
        return drained

    def _remove_finalizer(self, run: _Pass) -> None:
        self._patch_finalizers(run, [f for f in run.pool.finalizers if f != naming.POOL_FINALIZER])
        run.writes.add(Write.FINALIZER_REMOVED)


def _served_repositories(pool: api.RunnerPool) -> tuple[str, ...]:
    """The repositories (``owner/name``) whose jobs the pool is for, as far as its spec says:
    those it polls; a pool without ``spec.autoscaling.repositories`` names none."""
    listed = pool.spec.autoscaling.repositories if pool.spec.autoscaling else []
    return tuple(repo if "/" in repo else f"{pool.spec.organization}/{repo}" for repo in listed)


def _busy_not_marked(pool: api.RunnerPool, pods: list[dict[str, Any]]) -> bool:
    """A delivery or poll says a job runs on one of the pool's pods, and the pod has no busy mark.

    The mark (and with it the eviction protection) follows the runner listing, which would
    reach it only at the next ``--runner-sync-interval``; a round brought forward reaches it
    within ``kick_gap``, so a drain right after a job starts finds the pod protected.
    """
    demand = pool.status.demand
    running = {j.runner for j in demand.jobs.values() if j.state == "in_progress"} if demand else set()
    running.discard(None)
    if not running:
        return False
    return any(str(pod["metadata"].get("name")) in running and not busy_marked(pod) for pod in pods)


#: Condition reasons of a pool on its way up: moving between them (or on to ready) is not news.
_STARTING = frozenset({Reason.WAITING_FOR_TOKEN, Reason.TOKEN_NOT_READY, Reason.RUNNERS_STARTING})
#: Ready reasons whose news has an Event of its own (``FailedCreate`` for each refusal, and
#: ``RunnerPodsFailing`` per change of the stuck pods' reasons): no second one for the condition.
_TOLD_BY_THEIR_OWN_EVENTS = frozenset(
    {pool_status.POD_CREATE_FAILED_REASON, pool_status.RUNNER_PODS_FAILING_REASON}
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
    invalid, ended) and which writes it made."""
    log.info(
        "reconciled pool",
        # ``pool`` as the log context writes it (namespace/name): one key for every line of a pool.
        extra={
            "pool": pool_key(namespace, name),
            "namespace": namespace,
            "action": action,
            "writes": writes.as_log(),
        },
    )
