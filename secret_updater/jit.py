"""Fill each JIT pod's Secret with its own runner's just-in-time config.

The secret updater's JIT half, the one writer of a JIT config into a Secret: the reconciler
creates the Secret empty (``runnerpool.children.jit_child``), asks for it to be filled
(``fill``), and its one apply empties it once the pod has registered or is going. A fill asks
GitHub once (``generate-jitconfig``: name = the pod's name, the pool's labels; for a scale-set
pool the scale set's ``generatejitconfig``, outside the REST budget) and
merge-patches the config into the Secret, with GitHub's runner id in an annotation that marks
the Secret as filled for good. A 409 is a runner of that name left over (an earlier attempt whose
patch was lost, an operator restart in between): the runner managers' rule removes it unless
busy (``remove_leftover``, i.e. ``runnerpool.runners.leftovers``; this module deletes no
runner itself), and the fill asks again. The same rule removes the runner of a fill whose pod
or pool went while GitHub made it or while its config was written: nothing would run it, and a
deleted pool's finalizer may have drained already. That removal is tried again with the same
backoff until GitHub has no runner of that name (``_remove_unused``), for at most a day; of
that id, too, when GitHub's answer gave it: a new leader may have made its own by that name.

One job per pod on the token jobs' scheduler, asked for any number of times, run once to
success. Failures follow the token jobs' rules (``secret_updater.timing``: transient ones
retried from 5 s doubling to 5 minutes, GitHub's ``retry-after`` honoured), and per pool: while
a pool backs off, none of its pods asks GitHub, so an outage costs one call per retry and pool,
not one per pod. The failure is reported as the token's (``TokenReady``) while a pod of the pool
waits for a config.

The config lives only in the patch body; errors recorded or logged are scrubbed of it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler

from runnerpool.domain import PoolRef, RegistrationFailure, pool_key, utcnow
from runnerpool.github.credentials import ClientCache, CredentialError, teardown_client
from runnerpool.github.errors import (
    BadCredentials,
    GitHubError,
    MalformedResponse,
    NotFound,
    NotSent,
    Unavailable,
)
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import DeleteOutcome, JitConfig, JitRequest
from runnerpool.naming import JIT_RUNNER_ID_ANNOTATION, JIT_SECRET_KEY
from runnerpool.reasons import Reason
from runnerpool.scheduling import add_self_scheduling_job
from secret_updater.failures import PatchFailedError, classify
from secret_updater.timing import DEFAULT_POLICY, RetryPolicy, counts_as_try, next_run_after_failure

__all__ = ["JitSecretUpdater", "RemoveLeftover", "ScaleSetJit", "SecretWrites", "jit_patch"]

log = logging.getLogger(__name__)

_NAME_IN_USE = 409
#: How long a runner made for a pod or pool that went is tried to be deleted: GitHub itself
#: removes an ephemeral runner (a JIT runner is one) that has not connected for a day.
LEFTOVER_TRIES_FOR = timedelta(days=1)
#: How often a failing pool's other pods look again while one of them asks GitHub for all.
PROBE_WAIT = timedelta(seconds=1)


class RemoveLeftover(Protocol):
    """Removes the pool's runner of that name (with ``runner_id``, only if it is that one) unless
    busy (``None``: none). Given by the assembly: ``runnerpool.runners.leftovers
    .delete_leftover_runner``, the runner managers' rule."""

    def __call__(
        self, github: GitHubClient, pool: PoolRef, name: str, *, runner_id: int | None = None
    ) -> DeleteOutcome | None: ...


#: Makes a scale-set pool's runner and its JIT config through the scale set (the Actions
#: service, no REST budget). Given by the assembly: ``runnerpool.scaleset``'s client.
ScaleSetJit = Callable[[PoolRef, JitRequest], JitConfig]


def jit_patch(config: JitConfig) -> dict[str, Any]:
    """The merge patch that fills a JIT Secret (the API server base64-encodes ``stringData``)."""
    return {
        "metadata": {"annotations": {JIT_RUNNER_ID_ANNOTATION: str(config.runner_id)}},
        "stringData": {JIT_SECRET_KEY: config.encoded},
    }


@dataclass(frozen=True)
class SecretWrites:
    """What both halves of the secret updater share: the clients they ask GitHub with, the
    Secret patch they write with, whom they tell of news, the scheduler their jobs run on,
    and the runner managers' rule for a leftover runner."""

    clients: ClientCache
    patch_secret: Callable[[str, str, dict[str, Any]], object]
    notify: Callable[[str, str], None]
    scheduler: BaseScheduler
    remove_leftover: RemoveLeftover
    scale_set_jit: ScaleSetJit | None = None


class _LeftoverBusyError(GitHubError):
    default_reason = Reason.JIT_RUNNER_NAME_IN_USE


@dataclass
class _Pod:
    ref: PoolRef
    secret: str
    request: JitRequest


@dataclass
class _Leftover:
    """A runner GitHub made for a pod or pool that went: nothing will run it, and nothing else
    deletes it (a deleted pool's runner manager is gone), so it is tried until it is gone."""

    ref: PoolRef
    name: str
    since: datetime
    attempt: int = 0
    #: The runner's id when the fill's answer said it: only that runner is deleted.
    runner_id: int | None = None

    @property
    def job_id(self) -> str:
        return f"jit-leftover/{self.ref.namespace}/{self.name}"


@dataclass
class _Pool:
    attempt: int = 0
    not_before: datetime | None = None
    failure: RegistrationFailure | None = None
    #: The failure needs a human (credentials GitHub refuses, a scope it does not know): it
    #: stays the pool's with no pod waiting, so demand keeps going to a sibling pool that
    #: works, until the pool's ref changes (``follow``).
    lasting: bool = False
    #: The ref the failure was made with.
    failed_with: PoolRef | None = None
    #: A pod of the failing pool is asking GitHub once its backoff ended: the others wait for
    #: its answer. Before, every pod due then passed the check together, up to
    #: ``--token-threads`` calls a retry, each counted as a try of the pool's backoff.
    probing: bool = False
    pods: set[str] = field(default_factory=set)


class JitSecretUpdater:
    def __init__(
        self,
        writes: SecretWrites,
        *,
        clock: Callable[[], datetime] = utcnow,
        failure_retry: RetryPolicy = DEFAULT_POLICY,
        rng: random.Random | None = None,
    ) -> None:
        self._clients = writes.clients
        self._patch_secret = writes.patch_secret
        self._notify = writes.notify
        self._scheduler = writes.scheduler
        self._remove_leftover = writes.remove_leftover
        self._scale_set_jit = writes.scale_set_jit
        self._clock = clock
        self._policy = failure_retry
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}  # by pod uid, until filled or forgotten
        self._done: set[str] = set()  # pod uids filled, until forgotten
        self._made: set[str] = set()  # pod uids GitHub made (or may have made) a runner for, until forgotten
        self._pools: dict[str, _Pool] = {}
        self._leftovers: dict[str, _Leftover] = {}  # by job id, until gone
        self._issued: set[str] = set()  # stopped pools GitHub made a runner for, until marked
        #: Pod uids whose config write is in flight (GitHub made the runner), until it ends.
        self._writing: set[str] = set()
        #: Of those, the ones in flight when ``stop_all`` ran (the operator stops leading): their
        #: runner is left to the next leader, who sees the config written or, if the write
        #: failed, meets the runner as a 409 and replaces it.
        self._handed_over: set[str] = set()
        #: ``stop_all`` calls so far: a failed fill begun before the last one leaves the runner it
        #: may have made to the next leader (``_remove_unless_handed_over``).
        self._stops = 0

    # -- the interface the reconciler drives -----------------------------------------------------

    def fill(self, pool: PoolRef, secret: str, pod_uid: str, request: JitRequest) -> None:
        """Fill ``secret`` with a config for the pod ``pod_uid`` (once, however often asked; a
        pod asked for again with another scale set id follows it, ``_follow_scale_set``)."""
        with self._lock:
            if pod_uid in self._done:
                return
            if (queued := self._pods.get(pod_uid)) is not None:
                self._follow(queued, pod_uid, pool, request)
                return
            self._pods[pod_uid] = _Pod(pool, secret, request)
            state = self._pools.setdefault(pool.key, _Pool())
            state.pods.add(pod_uid)
            first = max(self._clock(), state.not_before or self._clock())
            add_self_scheduling_job(
                self._scheduler,
                self._run,
                (pod_uid,),
                job_id=_job_id(pod_uid),
                name=f"jit config {pool.namespace}/{request.name}",
                first_run=first,
                safety_net_seconds=self._policy.permanent_max.total_seconds(),
            )

    def _follow(self, queued: _Pod, pod_uid: str, pool: PoolRef, request: JitRequest) -> None:
        """Under the lock: a queued pod asked for with another scale set id (its scale set made
        again on GitHub under a new id, which the pool's status now has), or with another ref
        (the user fixed or rotated the credentials), asks with those. Kept, the old id would be
        asked for at every retry, a 404 for good; and fixed credentials waited for a backoff of
        up to 5 minutes their predecessors earned, where a token pool's job tries them at once.
        The pool's backoff starts over, so the pod asks at once."""
        if queued.request.scale_set_id == request.scale_set_id and queued.ref == pool:
            return
        self._pods[pod_uid] = replace(queued, ref=pool, request=request)
        state = self._pools.get(queued.ref.key)
        if state is not None:
            state.attempt, state.not_before, state.lasting = 0, None, False
        self._reschedule(pod_uid, self._clock())

    def follow(self, pool: PoolRef) -> None:
        """The pool's ref as this pass built it. A lasting failure made with another one is no
        longer the pool's (the user fixed or rotated its credentials): with no pod waiting,
        nothing else would ask GitHub again, and the pool stayed refused, its demand sent to a
        sibling, until the operator restarted. The pool is told; its backoff starts over."""
        with self._lock:
            state = self._pools.get(pool.key)
            if state is None or not state.lasting or state.failed_with in (None, pool):
                return
            state.failure, state.lasting, state.failed_with = None, False, None
            state.attempt, state.not_before = 0, None
        self._notify(pool.namespace, pool.name)

    def forget_pod(self, namespace: str, pod_uid: str) -> None:
        """The pod has used its config or is going: no fill for it from now on."""
        with self._lock:
            cleared = self._forget(pod_uid)
        if cleared is not None:
            self._notify(cleared.namespace, cleared.name)

    def _forget(self, pod_uid: str) -> PoolRef | None:
        """Under the lock: ``forget_pod``. Returns the pool whose failure this cleared (tell it):
        once none of its pods waits for a config, a transient failure (an outage, a rate limit)
        is no longer the pool's. Kept, a pool whose pod went (its demand gone) said TokenReady
        False until its next pod got a config, and its own jobs' demand passed it over for a
        sibling meanwhile; the backoff (``not_before``) stays for its next pod. A lasting one
        (``_Pool.lasting``) stays: cleared, the next job went to the broken pool again."""
        self._done.discard(pod_uid)
        self._made.discard(pod_uid)
        pod = self._pods.pop(pod_uid, None)
        if pod is None:
            return None
        self._remove_job(pod_uid)
        state = self._pools.get(pod.ref.key)
        if state is None:
            return None
        state.pods.discard(pod_uid)
        if state.pods or state.failure is None or state.lasting:
            return None
        state.failure = None
        return pod.ref

    def stop(self, namespace: str, name: str) -> bool:
        """No fill for the pool from now on (it is gone, refused or being deleted); whether
        GitHub made a runner for one of its pods (its config written, being written, or lost
        with a write that failed and waits for its retry).

        A deleted pool's finalizer decides from its caches whether the pool may have runners
        (``runnerpool.deregistration``): they show a filled JIT Secret only once the write has
        landed and reached them, and a failed write never. This answer makes it ask GitHub then,
        and it is given at every stop until the finalizer has written the pool's mark
        (:meth:`marked`): a pass whose mark write failed would otherwise be told nothing on the
        next, and let the pool go without GitHub. A fill that finds its pool stopped, before
        its write or during it, deletes the runner GitHub made for it (``_fill``)."""
        key = pool_key(namespace, name)
        with self._lock:
            state = self._pools.pop(key, None)
            pods = state.pods if state is not None else set()
            if not self._made.isdisjoint(pods):
                self._issued.add(key)
            self._made.difference_update(pods)
            for uid in pods:
                self._pods.pop(uid, None)
                self._remove_job(uid)
            return key in self._issued

    def marked(self, namespace: str, name: str) -> None:
        """The pool carries its mark (``runnerpool.deregistration``), or is gone."""
        with self._lock:
            self._issued.discard(pool_key(namespace, name))

    def stop_all(self) -> None:
        """Stop every pod's job (the operator is stopping): no fill starts after this returns,
        and a fill whose write is in flight keeps the runner GitHub made for it
        (``_handed_over``)."""
        with self._lock:
            self._stops += 1
            self._handed_over |= self._writing
            for uid in self._pods:
                self._remove_job(uid)
            for leftover in self._leftovers.values():
                self._remove_job_id(leftover.job_id)
            self._pods.clear()
            self._pools.clear()
            self._leftovers.clear()
            self._issued.clear()

    def failure(self, namespace: str, name: str) -> RegistrationFailure | None:
        with self._lock:
            state = self._pools.get(pool_key(namespace, name))
            return state.failure if state is not None else None

    # -- one job run -----------------------------------------------------------------------------

    def _run(self, pod_uid: str) -> None:
        with self._lock:
            pod = self._pods.get(pod_uid)
            state = self._pools.get(pod.ref.key) if pod is not None else None
            if pod is None or state is None:
                return
            now = self._clock()
            if state.not_before is not None and now < state.not_before:
                self._reschedule(pod_uid, state.not_before)  # the pool backs off
                return
            if state.failure is not None:  # one pod asks for the failing pool
                if state.probing:
                    self._reschedule(pod_uid, now + PROBE_WAIT)
                    return
                state.probing = True
            stops = self._stops
        try:
            self._fill(pod, pod_uid)
        except Exception as err:  # anything: the scheduler must keep going
            self._failed(pod, pod_uid, err, stops)
            return
        with self._lock:
            recovered = state.failure is not None
            state.failure, state.attempt, state.not_before = None, 0, None
            state.probing = False
            state.lasting, state.failed_with = False, None
        if recovered:
            self._notify(pod.ref.namespace, pod.ref.name)

    def _fill(self, pod: _Pod, pod_uid: str) -> None:
        ref = pod.ref
        client = self._clients.get(ref.namespace, ref.credential_secret_name, ref.api_url, ref.connection)
        config = self._generate(client, pod)
        with self._lock:
            forgotten = pod_uid not in self._pods
            if not forgotten:
                self._made.add(pod_uid)  # ``stop`` tells the finalizer: GitHub has a runner for it
                self._writing.add(pod_uid)
        if forgotten:
            # The pod or its pool went while GitHub made the runner: nobody will run it, and a
            # deleted pool's finalizer may have drained already, its runner manager stopped:
            # nothing else would ever delete it.
            self._remove_unused(
                _Leftover(ref, pod.request.name, self._clock(), runner_id=config.runner_id), client
            )
            return
        # The pod stays asked for during the write: a second ask meanwhile is no second runner.
        gone = False
        try:
            self._patch_secret(ref.namespace, pod.secret, jit_patch(config))
        except Exception as err:
            # Asked again after the backoff; the runner made for it is a 409 then, and replaced.
            status = getattr(err, "status", None) or type(err).__name__
            failed: PatchFailedError | None = PatchFailedError(
                f"cannot write the JIT config into Secret {ref.namespace}/{pod.secret}: {status}"
            )
            # The Secret is its pod's and went with it: a pod deleted before any pass saw it
            # end (an unscheduled pod goes at once), which no pass will ever forget. Asked
            # again, each retry made a runner, deleted the last as a leftover, and failed the
            # pool's TokenReady, every few minutes while the pool lived.
            gone = status == 404
        else:
            failed = None
        with self._lock:
            self._writing.discard(pod_uid)
            cleared = self._forget(pod_uid) if gone else None
            kept, handed_over = pod_uid in self._pods, pod_uid in self._handed_over
            self._handed_over.discard(pod_uid)
            if kept and failed is None:
                del self._pods[pod_uid]
                self._remove_job(pod_uid)
                self._done.add(pod_uid)
        if cleared is not None:
            self._notify(cleared.namespace, cleared.name)
        if not kept and not handed_over:
            # Forgotten during the write, written or not: as above, and no retry will come. A
            # deleted pool's finalizer that stopped it meanwhile also drains (``stop`` said so).
            self._remove_unused(
                _Leftover(ref, pod.request.name, self._clock(), runner_id=config.runner_id), client
            )
            return
        if failed is not None:
            raise failed from None
        log.info(
            "JIT config for runner %s (pool %s) written to Secret %s", pod.request.name, ref.key, pod.secret
        )

    def _generate(self, client: GitHubClient, pod: _Pod) -> JitConfig:
        try:
            return self._ask(client, pod)
        except GitHubError as err:
            if err.status != _NAME_IN_USE:
                raise
        outcome = self._remove_leftover(client, pod.ref, pod.request.name)
        if outcome is DeleteOutcome.BUSY:
            raise _LeftoverBusyError(f"a busy runner named {pod.request.name} already exists", status=409)
        if outcome is DeleteOutcome.NOT_THE_POOLS:
            raise _LeftoverBusyError(
                f"a runner named {pod.request.name} is another pool's (one of the same name in another "
                "namespace): left alone",
                status=409,
            )
        return self._ask(client, pod)

    def _ask(self, client: GitHubClient, pod: _Pod) -> JitConfig:
        """REST ``generate-jitconfig``, or the scale set's for a scale-set pool's runner (a
        runner of the same name left over is a 409 either way)."""
        if pod.request.scale_set_id is None:
            return client.generate_jitconfig(pod.ref.scope, pod.request)
        if self._scale_set_jit is None:
            raise GitHubError("this operator was started without the scale set client")
        return self._scale_set_jit(pod.ref, pod.request)

    def _failed(self, pod: _Pod, pod_uid: str, err: Exception, stops: int) -> None:
        """Retry the fill after the pool's backoff.

        A failure without GitHub's answer (a timeout, a reset, a 5xx) may have made the runner
        all the same: the pool's ``stop`` says so from then on, so that a deleted pool's
        finalizer asks GitHub; and a pod or pool gone meanwhile has that runner looked up and
        deleted, as after a fill that succeeded too late (``_fill``)."""
        reason, message = classify(err)
        now = self._clock()
        maybe_made = _may_have_made(err)
        with self._lock:
            state = self._pools.get(pod.ref.key)
            if state is not None:
                state.probing = False  # answered, the pod known or not
            known = state is not None and pod_uid in self._pods
            if known:
                assert state is not None
                if maybe_made:
                    self._made.add(pod_uid)
                previous = state.failure
                if counts_as_try(err):
                    state.attempt += 1
                delay = next_run_after_failure(state.attempt, err, self._rng, self._policy)
                if not isinstance(err, _LeftoverBusyError):
                    # The pool's: none of its pods asks before it ends. A runner of this pod's
                    # own name in the way is the pod's alone: held up by it, the scheduler ran
                    # the same pod first each time, and the pool's other pods got no config.
                    state.not_before = now + delay
                state.failure = RegistrationFailure(
                    reason, message, previous.since if previous is not None else now
                )
                state.lasting, state.failed_with = _lasting(err), pod.ref
                self._reschedule(pod_uid, now + delay)
        if not known:
            # Stopped or forgotten meanwhile: nothing to retry, nothing to report.
            if maybe_made:
                self._remove_unless_handed_over(_Leftover(pod.ref, pod.request.name, now), stops)
            return
        changed = previous is None or (previous.reason, previous.message) != (reason, message)
        log.log(
            logging.WARNING if changed else logging.DEBUG,
            "JIT config for runner %s (pool %s): %s: %s (retry in %ds)",
            pod.request.name,
            pod.ref.key,
            reason,
            message,
            int(delay.total_seconds()),
        )
        if changed:
            self._notify(pod.ref.namespace, pod.ref.name)

    # -- runners nobody will run ----------------------------------------------------------------

    def _remove_unless_handed_over(self, leftover: _Leftover, stops: int) -> None:
        """``_remove_unused`` of a runner a failed fill may have made, unless the operator
        stopped leading since the fill began: the next leader fills the same pod under the same
        runner name (a 409 has it replace this one) and may already have made its own, which a
        removal by name here would delete. (A fill that succeeded knows it made the runner, and
        ``_fill`` removes it by its id: a busy runner is never removed either way.)"""
        with self._lock:
            handed_over = self._stops != stops
        if handed_over:
            log.info(
                "runner %s of pool %s, if made, is left to the next leader: this operator stopped leading",
                leftover.name,
                leftover.ref.key,
            )
            return
        self._remove_unused(leftover)

    def _remove_unused(self, leftover: _Leftover, client: GitHubClient | None = None) -> None:
        """Delete ``leftover`` on GitHub (the runner managers' rule: never a busy one); a
        failure, or a runner found busy, is tried again with the fills' backoff
        (``_removal_failed``). Before, the failure went to ``_failed``, which dropped it for a
        pod or pool no longer known, and the runner stayed registered for good.

        ``client``: the fill's; a retry takes the pool's client again, or the last one that
        worked for it when a deleted namespace took its Secrets (``teardown_client``)."""
        try:
            github = client if client is not None else teardown_client(self._clients, leftover.ref)
            outcome = self._remove_leftover(github, leftover.ref, leftover.name, runner_id=leftover.runner_id)
            if outcome is DeleteOutcome.BUSY:
                raise _LeftoverBusyError(f"runner {leftover.name} runs a job; deleted once done", status=409)
        except Exception as err:  # anything: the runner must not be forgotten
            self._removal_failed(leftover, err)
            return
        self._drop_leftover(leftover)
        if outcome is DeleteOutcome.NOT_THE_POOLS:
            log.info(
                "runner %s is another pool's, not left over for pool %s: left alone",
                leftover.name,
                leftover.ref.key,
            )
        elif leftover.attempt:
            log.info("deleted runner %s left over for pool %s", leftover.name, leftover.ref.key)

    def _removal_failed(self, leftover: _Leftover, err: Exception) -> None:
        """Try ``leftover`` again after the backoff, for at most ``LEFTOVER_TRIES_FOR``."""
        reason, message = classify(err)
        now = self._clock()
        if now - leftover.since >= LEFTOVER_TRIES_FOR:
            log.warning(
                "runner %s of pool %s is left on GitHub (%s: %s); GitHub removes it once it has not "
                "connected for a day",
                leftover.name,
                leftover.ref.key,
                reason,
                message,
            )
            self._drop_leftover(leftover)
            return
        leftover.attempt += 1
        when = now + next_run_after_failure(leftover.attempt, err, self._rng, self._policy)
        with self._lock:
            scheduled = leftover.job_id in self._leftovers
            self._leftovers[leftover.job_id] = leftover
            if scheduled:
                self._reschedule_id(leftover.job_id, when)
            else:
                add_self_scheduling_job(
                    self._scheduler,
                    self._retry_removal,
                    (leftover.job_id,),
                    job_id=leftover.job_id,
                    name=f"leftover runner {leftover.ref.namespace}/{leftover.name}",
                    first_run=when,
                    safety_net_seconds=self._policy.permanent_max.total_seconds(),
                )
        log.warning(
            "cannot delete runner %s left over for pool %s: %s: %s (retry at %s)",
            leftover.name,
            leftover.ref.key,
            reason,
            message,
            f"{when:%H:%M:%S}",
        )

    def _drop_leftover(self, leftover: _Leftover) -> None:
        """``leftover`` is gone, or given up on: no retry of it is kept."""
        with self._lock:
            if self._leftovers.pop(leftover.job_id, None) is not None:
                self._remove_job_id(leftover.job_id)

    def _retry_removal(self, job_id: str) -> None:
        with self._lock:
            leftover = self._leftovers.get(job_id)
        if leftover is not None:
            self._remove_unused(leftover)

    # -- helpers ---------------------------------------------------------------------------------

    def _reschedule(self, pod_uid: str, when: datetime) -> None:
        self._reschedule_id(_job_id(pod_uid), when)

    def _reschedule_id(self, job_id: str, when: datetime) -> None:
        with contextlib.suppress(JobLookupError):
            self._scheduler.modify_job(job_id, next_run_time=when)

    def _remove_job(self, pod_uid: str) -> None:
        self._remove_job_id(_job_id(pod_uid))

    def _remove_job_id(self, job_id: str) -> None:
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(job_id)


def _job_id(pod_uid: str) -> str:
    return f"jit/{pod_uid}"


def _may_have_made(err: Exception) -> bool:
    """Whether a failed fill may have left a runner on GitHub: the request went and its answer
    was lost or failed (``Unavailable``: a timeout, a reset, a 5xx) or could not be read
    (``MalformedResponse``), or an unexpected error. Not one that never left (``NotSent``: a
    pool whose server certificate was never trusted must still go at once when deleted), GitHub's own
    refusal (another ``GitHubError``: a 4xx makes nothing), a client that could not be built or
    a Secret write that failed after a config was written (``_fill`` keeps that one)."""
    if isinstance(err, NotSent):
        return False
    if isinstance(err, (Unavailable, MalformedResponse)):
        return True
    if isinstance(err, GitHubError):
        return err.status is not None and err.status >= 500  # a 5xx GitHub asked us to wait after
    return not isinstance(err, (CredentialError, PatchFailedError))


def _lasting(err: Exception) -> bool:
    """A failure only a human ends: credentials GitHub refuses (401, 403), a scope it does not
    know (404), a credential Secret missing or broken. Anything else (an outage, a leftover
    runner of the pod's name, a malformed answer) is the pod's or passes."""
    return isinstance(err, (BadCredentials, NotFound, CredentialError))
