"""The secret updater: keep each pool's token Secret filled with a valid registration token.

The one writer of a token or JIT Secret's *data* (filling and emptying; the reconciler
creates the Secrets empty). It deletes no runner on GitHub: a leftover JIT runner is removed
through the runner managers' rule (``runnerpool.runners.leftovers``), handed in by the
assembly. It starts and stops jobs only: the scheduler they run on is started and shut down
by ``runnerpool.runtime.runnables.scheduler_runnable``.

One APScheduler job per pool. A job run fetches a token, merge-patches it into the pool's
Secret when it changed, and schedules itself for ``margin`` before the token expires. Runner
pods mount that Secret, so a pod started at any moment finds a token with at least ``margin``
to go.

Failures are data, not crashes: each one is recorded for the reconciler (which turns it into
a condition), counted, and retried on a schedule that fits its kind (see ``timing``).

The token itself lives only in the patch body handed to ``patch_secret``. The updater keeps a
SHA-256 of the last value it wrote, which is enough to skip writing an unchanged token, and
scrubs the value out of any error text it records.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler
from kubernetes.client.rest import ApiException

from runnerpool import log_context
from runnerpool.api_errors import describe, log_failure
from runnerpool.domain import PoolRef, RegistrationFailure, pool_key, rfc3339, split_key, utcnow
from runnerpool.github.credentials import ClientCache
from runnerpool.naming import (
    TOKEN_EXPIRY_ANNOTATION,
    TOKEN_ISSUED_ANNOTATION,
    TOKEN_SECRET_KEY,
    token_secret_name,
)
from runnerpool.scheduling import add_self_scheduling_job
from runnerpool.settings import TokenSettings
from secret_updater import metrics
from secret_updater.failures import INTERNAL_REASON, PATCH_FAILED_REASON, PatchFailedError, classify
from secret_updater.jit import JitSecretUpdater, RemoveLeftover, ScaleSetJit, SecretWrites
from secret_updater.shared_tokens import SharedTokens
from secret_updater.timing import (
    DEFAULT_POLICY,
    RetryPolicy,
    before_expiry,
    counts_as_try,
    next_run_after_failure,
    next_run_after_success,
)

__all__ = [
    "INTERNAL_REASON",
    "PATCH_FAILED_REASON",
    "SecretUpdater",
    "token_patch",
]

log = logging.getLogger(__name__)

#: How long after its own write the job distrusts a cache that shows another token (or none).
CACHE_GRACE = timedelta(seconds=2)


def token_patch(token: str, expires_at: datetime) -> dict[str, Any]:
    """JSON merge-patch for the token Secret.

    ``stringData`` lets the API server do the base64 encoding; the annotation tells the
    reconciler (and humans) how long the token is good for without decoding the Secret. The
    second one stays when the Secret is emptied: a token was issued, so the pool may have
    registered runners, which its finalizer must deregister (``runnerpool.deregistration``).
    """
    return {
        "metadata": {
            "annotations": {TOKEN_EXPIRY_ANNOTATION: rfc3339(expires_at), TOKEN_ISSUED_ANNOTATION: "true"}
        },
        "stringData": {TOKEN_SECRET_KEY: token},
    }


#: Empties a token Secret: a restarted runner container finds nothing to register with.
EMPTY_TOKEN_PATCH: dict[str, Any] = {
    "data": {TOKEN_SECRET_KEY: None},
    "metadata": {"annotations": {TOKEN_EXPIRY_ANNOTATION: None}},
}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _digest_of_encoded(encoded: str) -> str | None:
    try:
        return _digest(base64.b64decode(encoded, validate=True).decode())
    except ValueError:  # not base64 or not UTF-8: certainly not what the job wrote
        return None


#: (next run time, whether to notify the reconciler)
_Outcome = tuple[datetime, bool]


@dataclass
class _PoolState:
    ref: PoolRef
    generation: int
    # Serialises a job's Secret write with stop(): once stop() returns, no write follows.
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    active: bool = True
    last_digest: str | None = None
    failure: RegistrationFailure | None = None
    attempt: int = 0
    reasons: set[str] = field(default_factory=set)
    # When the last write landed (clock time): a cache read soon after may predate it.
    written_at: datetime | None = None
    # When the token in the Secret expires (the last one this job wrote, or fetched and found
    # already written): a failing refresh is retried before then (``timing.before_expiry``).
    expires_at: datetime | None = None


class SecretUpdater:
    """Runs one token job per pool (and one JIT job per JIT pod) on ``scheduler``.

    The scheduler is someone else's to start and shut down (``scheduler_runnable``; tests
    pass one that is never started and inspect its jobs). Jobs carry their own
    ``coalesce``/``max_instances``/misfire settings so they behave the same on any scheduler.
    """

    def __init__(
        self,
        clients: ClientCache,
        patch_secret: Callable[[str, str, dict[str, Any]], object],
        notify: Callable[[str, str], None],
        scheduler: BaseScheduler,
        remove_leftover: RemoveLeftover,
        *,
        settings: TokenSettings = TokenSettings(),
        clock: Callable[[], datetime] = utcnow,
        failure_retry: RetryPolicy = DEFAULT_POLICY,
        rng: random.Random | None = None,
        scale_set_jit: ScaleSetJit | None = None,
    ) -> None:
        margin = settings.refresh_margin
        if margin <= timedelta(0):
            raise ValueError("margin must be positive")
        self._clients = clients
        self._patch_secret = patch_secret
        self._notify = notify
        self._margin = margin
        self._clock = clock
        self._shared = SharedTokens(margin, clock)
        self._policy = failure_retry
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._pools: dict[str, _PoolState] = {}
        self._generations = 0
        self._scheduler = scheduler
        #: Each JIT pod's own config (``spec.registration: jit``): the same writes, on the same jobs' terms.
        self.jit = JitSecretUpdater(
            SecretWrites(clients, patch_secret, notify, scheduler, remove_leftover, scale_set_jit),
            clock=clock,
            failure_retry=failure_retry,
            rng=rng,
        )

    # -- the interface the reconciler drives -----------------------------------------------------

    def start(self, pool: PoolRef) -> None:
        """Ensure a job for ``pool``; its first run is due now, not after an interval."""
        with self._lock:
            state = self._pools.get(pool.key)
            if state is not None and state.ref == pool and self._has_job(pool.key):
                return
            self._generations += 1
            if state is None:
                state = _PoolState(ref=pool, generation=self._generations)
                self._pools[pool.key] = state
            else:
                if state.ref != pool:
                    # Scope, credentials or URL changed: the token in the Secret may be for
                    # the old scope, so the next fill must write whatever it gets.
                    state.last_digest = None
                    state.attempt = 0
                state.ref = pool
                state.generation = self._generations
            generation = state.generation
            # Remove first: on a scheduler that is not running yet, replace_existing would
            # leave both versions queued.
            self._remove_job(pool.key)
            add_self_scheduling_job(
                self._scheduler,
                self._run,
                (pool.key, generation),
                job_id=pool.key,
                name=f"registration token {pool.key}",
                first_run=self._clock(),
                # Should a run ever fail to set its next run, the job still comes back.
                safety_net_seconds=self._policy.permanent_max.total_seconds(),
            )
        log.info("token job started for pool %s (%s)", pool.key, pool.scope)

    def stop(self, namespace: str, name: str) -> None:
        """Remove the job and forget the pool; after this returns no Secret write happens."""
        key = pool_key(namespace, name)
        with self._lock:
            state = self._pools.pop(key, None)
            self._remove_job(key)
            if state is not None:
                metrics.forget_pool(namespace, name, state.reasons)
        if state is None:
            return
        with state.write_lock:  # waits for a write in flight
            state.active = False
        log.info("token job stopped for pool %s", key)

    def withdraw(self, namespace: str, name: str, *, has_token: bool) -> bool:
        """Stop the pool's job and empty its token Secret (``has_token``: the cache shows one).

        The updater is the one writer of a token's data: it fills it, and for a pool being
        deleted it empties it. Once :meth:`stop` returned no fill can follow, so the Secret
        stays empty. Returns whether it wrote; raises what the Secret's patch raises.
        """
        self.stop(namespace, name)
        if not has_token:
            return False
        self._patch_secret(namespace, token_secret_name(name), EMPTY_TOKEN_PATCH)
        log.info("token Secret of pool %s emptied: the pool is being deleted", pool_key(namespace, name))
        return True

    def failure(self, namespace: str, name: str) -> RegistrationFailure | None:
        with self._lock:
            state = self._pools.get(pool_key(namespace, name))
            return state.failure if state is not None else None

    def check_secret(
        self,
        namespace: str,
        name: str,
        encoded_token: str | None,
        *,
        recreated: bool,
        expires_at: datetime | None = None,
    ) -> float | None:
        """Refill at once a token Secret that lost the token this job wrote; and learn when the
        token the Secret holds expires (``expires_at``, its annotation) before the job wrote one:
        after a restart or a change of leader, a first refresh that fails is retried before
        then too (``timing.before_expiry``).

        ``encoded_token`` is the Secret's ``data`` value as the reconciler's cache shows it
        (base64, or ``None``). The job skips writing a token equal to the last one it wrote,
        so a Secret deleted and recreated empty (``recreated``), or emptied or changed by
        hand, would otherwise wait for the next refresh, half an hour away. The refill takes
        the scope's shared token when it is still fresh: no GitHub request.

        A failing job keeps its backoff (its next success writes anyway). Within
        :data:`CACHE_GRACE` of the job's own write, a mismatch is most likely a cache that
        has not seen that write yet: the answer is then the number of seconds after which
        asking again tells a lost token from a late cache; otherwise ``None``.
        """
        key = pool_key(namespace, name)
        with self._lock:
            state = self._pools.get(key)
            if state is not None and state.expires_at is None and encoded_token:
                state.expires_at = expires_at
            if state is None or state.last_digest is None:
                return None  # nothing written yet: the job's next run writes whatever it gets
            if not recreated:
                if encoded_token and _digest_of_encoded(encoded_token) == state.last_digest:
                    return None
                since = self._clock() - state.written_at if state.written_at is not None else None
                if since is not None and since < CACHE_GRACE:
                    return (CACHE_GRACE - since).total_seconds()
            state.last_digest = None
            if state.failure is not None:
                return None
            with contextlib.suppress(JobLookupError):
                self._scheduler.modify_job(key, next_run_time=self._clock())
        log.info("token Secret of pool %s lost its token; refilling it now", key)
        return None

    def stop_all(self) -> None:
        """Stop every pool's jobs: no Secret write follows (``scheduler_runnable`` then shuts
        the scheduler down without waiting for a job stuck on a slow GitHub call)."""
        with self._lock:
            keys = list(self._pools)
        for key in keys:
            namespace, name = split_key(key)
            self.stop(namespace, name)
        self.jit.stop_all()

    # -- one job run -----------------------------------------------------------------------------

    @log_context.runs_for_pool
    def _run(self, key: str, generation: int) -> datetime | None:
        """Scheduler entry point: never raises, always leaves a next run behind.

        Returns the next run time it scheduled (``None`` if the pool went away meanwhile): the
        scheduler ignores it, tests that call the job directly check the decision with it.
        """
        with self._lock:
            state = self._pools.get(key)
            if state is None or state.generation != generation:
                return None
            ref = state.ref
        try:
            outcome = self._fill(state, ref, generation)
        except Exception as err:  # anything: the scheduler must keep going
            outcome = self._record_failure(state, ref, generation, err)
        if outcome is None:
            return None  # replaced or stopped: the replacement has its own schedule (scheduling)
        next_run, tell = outcome
        self._reschedule(key, generation, next_run)
        if tell:
            # Last, so the reconciler sees the Secret, the failure and the schedule all settled.
            self._safe_notify(ref)
        return next_run

    def _fill(self, state: _PoolState, ref: PoolRef, generation: int) -> _Outcome | None:
        client = self._clients.get(ref.namespace, ref.credential_secret_name, ref.api_url, ref.connection)
        # The credentials' version too: a replaced job does not wait for (or take the token of)
        # its stale predecessor's request made with the Secret's previous content. And the
        # connection: a pool whose CA bundle or proxy fails must not hand its failure (shared
        # by ``SharedTokens``) to a pool of the same credential that reaches GitHub its own way.
        shared_key = (
            ref.namespace,
            ref.credential_secret_name,
            ref.credentials_version,
            ref.api_url,
            ref.connection,
            ref.scope.key,
        )
        token = self._shared.get(shared_key, lambda: client.registration_token(ref.scope))
        digest = _digest(token.token)
        with state.write_lock:
            if not state.active or state.generation != generation:
                return None
            wrote = digest != state.last_digest
            if wrote:
                # The write itself enqueues the pool (the token Secret is the pool's child, and
                # its informer event names the pool), so no notify follows a write; the
                # reconcile it brings must already see the failure gone.
                with self._lock:
                    cleared, state.failure = state.failure, None
                try:
                    self._patch_secret(
                        ref.namespace, ref.token_secret, token_patch(token.token, token.expires_at)
                    )
                except Exception as err:
                    with self._lock:
                        state.failure = cleared
                    raise PatchFailedError(
                        f"cannot write the token into Secret {ref.namespace}/{ref.token_secret}: "
                        f"{_describe(err, token.token)}"
                    ) from None
        now = self._clock()
        with self._lock:
            if not self._is_current(ref.key, generation):
                return None
            recovered = state.failure is not None
            state.failure = None
            state.attempt = 0
            state.expires_at = token.expires_at
            if wrote:
                state.last_digest = digest
                state.written_at = now
                metrics.TOKEN_FILLS.labels(ref.namespace, ref.name).inc()
            # Under the lock so that stop() cannot drop the series just before we recreate it.
            metrics.TOKEN_EXPIRY.labels(ref.namespace, ref.name).set(token.expires_at.timestamp())
        if wrote:
            log.info(
                "registration token for pool %s refreshed; expires %s", ref.key, rfc3339(token.expires_at)
            )
        return next_run_after_success(token.expires_at, now, self._margin, self._policy), recovered

    def _record_failure(
        self, state: _PoolState, ref: PoolRef, generation: int, err: Exception
    ) -> _Outcome | None:
        reason, message = classify(err)
        now = self._clock()
        with self._lock:
            if not self._is_current(ref.key, generation):
                return None
            previous = state.failure
            if counts_as_try(err):
                state.attempt += 1
            attempt, expires_at = state.attempt, state.expires_at
            since = previous.since if previous is not None else now
            state.failure = RegistrationFailure(reason=reason, message=message, since=since)
            state.reasons.add(reason)
            metrics.TOKEN_FAILURES.labels(ref.namespace, ref.name, reason).inc()
        changed = previous is None or (previous.reason, previous.message) != (reason, message)
        delay = next_run_after_failure(attempt, err, self._rng, self._policy)
        delay = before_expiry(delay, now, expires_at, self._margin, self._policy)
        level = logging.WARNING if changed else logging.DEBUG
        log.log(
            level,
            "registration token for pool %s: %s: %s (attempt %d, retry in %ds)",
            ref.key,
            reason,
            message,
            attempt,
            int(delay.total_seconds()),
        )
        if reason == INTERNAL_REASON:
            log.debug("registration token for pool %s: traceback", ref.key, exc_info=err)
        return now + delay, changed

    # -- helpers ---------------------------------------------------------------------------------

    def _is_current(self, key: str, generation: int) -> bool:
        state = self._pools.get(key)
        return state is not None and state.generation == generation

    def _has_job(self, key: str) -> bool:
        return self._scheduler.get_job(key) is not None

    def _remove_job(self, key: str) -> None:
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(key)

    def _reschedule(self, key: str, generation: int, when: datetime) -> None:
        # The scheduler updates a job's next run time under its job-store lock right after
        # submitting it; modify_job takes the same lock, so this always lands afterwards.
        with self._lock:
            if not self._is_current(key, generation):
                return
            with contextlib.suppress(JobLookupError):
                self._scheduler.modify_job(key, next_run_time=when)

    def _safe_notify(self, ref: PoolRef) -> None:
        try:
            self._notify(ref.namespace, ref.name)
        except Exception as err:
            log_failure(log, logging.ERROR, "notifying the reconciler about pool %s failed", ref.key, err=err)


def _describe(err: BaseException, secret: str) -> str:
    """The API server's answer to a refused write (its status, reason and message: what a
    quota or an admission policy says, and so what to fix), without ``secret``; of any other
    error only its type, since a client error's text may quote the request, token and all.
    Scrubbed before it is cut to one line's length: an admission webhook's message may quote
    the object it refused, and a token cut in two would no longer be found."""
    if not isinstance(err, ApiException):
        return type(err).__name__
    return describe(err, redact=functools.partial(_scrub, secret=secret))


def _scrub(text: str, secret: str) -> str:
    """``text`` without ``secret``, as written and as a Secret's ``data`` carries it (base64)."""
    if not secret:
        return text
    encoded = base64.b64encode(secret.encode()).decode()
    return text.replace(secret, "***").replace(encoded, "***")
