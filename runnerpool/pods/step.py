"""The reconciler's pod step: count the pool's pods and create the missing ones.

The pods come from the pass's snapshot (``runnerpool.observe``), so a converged pool costs
no write here.  Creates are the only pod
writes of the reconciler; scale-down, rollout replacement and finished pods are the runner
managers' (``runnerpool.runners.retirement``), which know from GitHub which runner is busy.

A create the API server refuses is not an error of the reconcile: it is counted in the
pool's create backoff (``runnerpool.pods.create_backoff``), which also holds the refusal the
pool reports until a create goes through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.api_errors import describe, is_namespace_terminating
from runnerpool.domain import pool_key
from runnerpool.pods import failures, scaling, template
from runnerpool.pods.create_backoff import CreateBackoff, CreateFailure
from runnerpool.pods.expectations import Expectations, still_pending
from runnerpool.pods.slow_start import SlowStart
from runnerpool.pods.start_backoff import StartBackoff
from runnerpool.runtime.kube import PODS, Kube
from runnerpool.writes import Write, Writes

if TYPE_CHECKING:
    from runnerpool.observe import Observed

__all__ = ["Converged", "PodStep"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Converged:
    """What :meth:`PodStep.converge` left: the counts after its creates, and a refusal."""

    counts: scaling.PodCounts
    #: This pass's create was refused (``None``: no create was refused in this pass).
    refused: CreateFailure | None = None
    #: Seconds until the next create may be tried (the pool is backing off), or until its pods
    #: are to be judged again (one may end the start backoff or count as unschedulable).
    retry_in: float | None = None


#: Status codes of a pod refused as written: 400 (strict decoding: an unknown field), 422 (invalid).
_POD_INVALID = frozenset({400, 422})


def refusal(err: ApiException, pool: str) -> str:
    """What the API server said of a refused runner pod, without the name it drew for it
    (``pods "p-x7k2q" is forbidden: ...`` as ``"p-*"``: the name is generated before admission)."""
    return describe(err, redact=naming.without_runner_pod_names(pool))


class PodStep:
    def __init__(
        self,
        kube: Kube,
        expectations: Expectations,
        backoff: CreateBackoff,
        *,
        starts: StartBackoff,
        default_image: str,
        default_api_url: str,
        creates: SlowStart,
        clock: Callable[[], datetime],
    ) -> None:
        self._kube = kube
        self._expectations = expectations
        self._backoff = backoff
        self._starts = starts
        self._image = default_image
        self._api_url = default_api_url
        self._creates = creates
        self._clock = clock

    def wanted_hash(self, pool: api.RunnerPool) -> str:
        return template.wanted_hash(pool, self._image, self._api_url)

    # ------------------------------------------------------------------ converge

    def expected(self, pool: api.RunnerPool) -> frozenset[str]:
        """The creates still expected: taken before the pass reads the pool's pods."""
        return self._expectations.expected(pool_key(pool.namespace, pool.name))

    def counts(
        self, pool: api.RunnerPool, replicas: int, live: Observed, *, with_creates: bool = False
    ) -> scaling.PodCounts:
        """The pool's pods as they are (``live``: this pass's snapshot), without any write;
        ``with_creates``: as they will be once :meth:`converge` made the missing ones (none
        while the pool backs off from a refused create)."""
        counts, _ = self._count(pool, live, replicas)
        if not with_creates or self._backing_off(pool) is not None:
            return counts
        return _after(counts, scaling.creates(counts))

    def secret_refused(self, pool: api.RunnerPool, cause: str) -> CreateFailure:
        """A pod's own (JIT) Secret refused, by a quota on Secrets, say: the pod cannot start
        without it, so the pool reports it and backs off its creates as for a refused pod."""
        key = pool_key(pool.namespace, pool.name)
        return self._backoff.failed(key, self.wanted_hash(pool), cause, secret=True)

    def no_secret_refused(self, pool: api.RunnerPool) -> None:
        """No pod's own Secret was refused in this pass (made, or none left to make: the pod
        whose Secret was refused is gone): a refusal of one is over. A pod's is not: only a
        pod create ends that."""
        failure = self.create_failure(pool)
        if failure is not None and failure.secret:
            self._backoff.succeeded(pool_key(pool.namespace, pool.name))

    def create_failure(self, pool: api.RunnerPool) -> CreateFailure | None:
        """The refusal the pool reports: its current template's last create was refused."""
        return self._backoff.failure(pool_key(pool.namespace, pool.name), self.wanted_hash(pool))

    def _count(
        self, pool: api.RunnerPool, live: Observed, replicas: int
    ) -> tuple[scaling.PodCounts, float | None]:
        """The counts, with the pool's pods failing at start while it backs off from them and
        lacks ready pods of its template (not while it has what it wants), and the seconds until
        a running pod may end that backoff (the pods judged once, here) or an unschedulable one
        counts as failing, whichever comes first: no pod event comes then."""
        key, wanted = pool_key(pool.namespace, pool.name), self.wanted_hash(pool)
        started = self._starts.observe(key, pool.generation, wanted, live.pods)
        names = [str(p["metadata"].get("name")) for p in live.pods]
        judged = failures.judge(live.pods, self._clock())
        counts = scaling.count(
            live.pods, replicas, wanted, still_pending(live.expected, names), failing=judged.failing
        )
        # A pool with the ready pods it wants, of its current template, is failing at nothing: its
        # streak waits for its next create (the chaos soak: a pool whose demand was gone said
        # RunnerPodsFailing for hours). Its older template's ready pods do not hide a rollout's.
        exited = self._starts.failing(key, pool.generation) if counts.ready_updated < replicas else None
        waits = [w for w in (started, judged.recheck_in) if w is not None]
        recheck = min(waits) if waits else None
        return (counts if exited is None else replace(counts, failing=(*counts.failing, exited))), recheck

    def converge(self, pool: api.RunnerPool, writes: Writes, replicas: int, live: Observed) -> Converged:
        """Create what is missing (unless backing off from a refusal).

        ``replicas``: the count decided for now (``spec.replicas`` unless the pool follows demand);
        ``live``: this pass's snapshot.
        """
        key = pool_key(pool.namespace, pool.name)
        counts, recheck = self._count(pool, live, replicas)
        wanted = scaling.creates(counts)
        if not wanted:
            failure = self.create_failure(pool)
            if failure is None or not failure.secret:  # a pod's refused Secret is still to report
                self._backoff.forget(key)  # nothing to create: no refusal left to report
            return Converged(counts, retry_in=recheck)
        wait = self._backing_off(pool)
        if wait is not None:
            return Converged(counts, retry_in=wait)
        batched = self._creates.run(wanted, lambda: self._create_pod(pool, key))
        writes.add(Write.POD_CREATED, batched.made)
        if batched.failures:
            refused = _refusal_of(batched.failures)
            return self._refused(pool, counts, batched.made, refused)
        self._backoff.succeeded(key)
        return Converged(_after(counts, wanted))

    def _backing_off(self, pool: api.RunnerPool) -> float | None:
        """Seconds until a create may be tried: the longer of the refused-create and the
        failed-at-start backoffs; ``None``: now."""
        key = pool_key(pool.namespace, pool.name)
        waits = [
            w
            for w in (
                self._backoff.wait(key, self.wanted_hash(pool)),
                self._starts.wait(key, pool.generation),
            )
            if w is not None
        ]
        return max(waits) if waits else None

    def _refused(
        self, pool: api.RunnerPool, counts: scaling.PodCounts, made: int, err: ApiException
    ) -> Converged:
        key = pool_key(pool.namespace, pool.name)
        if made:
            self._backoff.succeeded(key)  # the backoff counts refusals in a row
        failure = self._backoff.failed(
            key, self.wanted_hash(pool), refusal(err, pool.name), invalid=err.status in _POD_INVALID
        )
        log.warning(
            "pool %s: creating a runner pod failed (%d in a row, next attempt in %.0f s): %s",
            key,
            failure.failures,
            failure.delay,
            failure.cause,
        )
        return Converged(_after(counts, made), refused=failure, retry_in=failure.delay)

    def unseen_creates(self, pool: api.RunnerPool) -> frozenset[str]:
        """For a deleted pool's finalizer: its creates the cache has not shown that the API
        server still has. The expected ones it no longer has are gone before any watch event
        reached the cache (a watch that re-listed meanwhile never tells of them): they can
        register nothing more, and waiting for their event would hold the deletion for the
        expectations' 5 minutes. One list of the pool's pods, only while some are expected."""
        expected = self.expected(pool)
        if not expected:
            return expected
        listed = self._kube.list_items(PODS, pool.namespace, label_selector=children.selector(pool))
        there = {str(pod["metadata"]["name"]) for pod in listed}
        key = pool_key(pool.namespace, pool.name)
        for name in expected - there:
            self._expectations.observe(key, name)
        return expected & there

    def forget(self, namespace: str, name: str) -> None:
        """A finalized or gone pool's create expectations and backoff go with it."""
        key = pool_key(namespace, name)
        self._expectations.forget(key)
        self._backoff.forget(key)
        self._starts.forget(key)

    def _create_pod(self, pool: api.RunnerPool, key: str) -> None:
        # Each pod its own body: a JIT pod names its own Secret (template.runner_pod).
        body = template.runner_pod(pool, self._image, self._api_url)
        # Strict: an unknown field of the pool's template (a typo) is refused, not dropped with a
        # warning (the server's default), so the pool says TemplateInvalid instead of running pods
        # that silently lack what the user wrote. A rollout only takes old pods away once new ones
        # exist (runnerpool.runners.retirement), so a refused template keeps the current pods.
        with self._expectations.creating(key) as created:
            answer = self._kube.create(PODS, pool.namespace, body, field_validation="Strict")
            created(str(answer["metadata"]["name"]))


def _refusal_of(failures: tuple[BaseException, ...]) -> ApiException:
    """The refusal a stopped batch reports: its first. Anything else fails the reconcile, as a
    pool being finalized does (its namespace is terminating: the reconcile ends quietly)."""
    for err in failures:
        if not isinstance(err, ApiException) or is_namespace_terminating(err):
            raise err
    first = failures[0]
    assert isinstance(first, ApiException)
    return first


def _after(counts: scaling.PodCounts, created: int) -> scaling.PodCounts:
    """``counts`` once ``created`` pods with the current template exist."""
    if not created:
        return counts
    return replace(counts, active=counts.active + created, updated=counts.updated + created)
