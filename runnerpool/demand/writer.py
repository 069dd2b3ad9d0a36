"""Writes demand into ``status.demand`` of the pools a job counts for.

Where demand lives decides what two operator replicas do with a webhook delivery. GitHub's
webhook goes to a Service, i.e. to either replica; only the leader reconciles. Recording
on the RunnerPool itself means the receiving replica, leader or not, makes the delivery
take effect, the leader sees it through the informer it already has (the status write is
a watch event, so the pool is reconciled at once), a new leader starts with the demand its
predecessor knew, and ``kubectl get runnerpools`` shows it. ARC's answer, a single listener
pod, has no such failover; forwarding to the leader would lose deliveries during a failover.

Writes are read-modify-write with the object's ``resourceVersion`` as precondition (a merge
patch carrying ``metadata.resourceVersion`` is refused with 409 when someone else wrote in
between), re-read and retried on conflict, so two replicas recording at once never lose a
job. The read is the pool cache's (or, until the cache shows this writer's last write, what
that write answered): a GET only after a 409, so a delivery costs one request, not two, and
no parse of a fresh copy (measured in ``bench/webhook_load.py``'s full path, issue 32).
Within one replica, concurrent records for one pool are folded into one write (group
commit): the first starts the write; those arriving while it is in flight wait and are
written together by the next one; each returns (and the webhook answers 200) only once a
patch holding its change was taken, and each gets the error of a failed one (503, so GitHub
may redeliver). 50 jobs queued at once cost a few writes, not 50.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Container, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from runnerpool import api
from runnerpool import status as pool_status
from runnerpool.api_errors import describe
from runnerpool.demand import metrics, rules, runner_names
from runnerpool.demand.job_labels import JobLabels
from runnerpool.demand.matching import job_matches, job_scope_keys, listed_repositories, recording_pools
from runnerpool.demand.verification import ANY_POOL, Verdict
from runnerpool.domain import utcnow
from runnerpool.github.jobs import Job
from runnerpool.reads import PodsNotCachedError, Reads
from runnerpool.runtime.kube import RUNNER_POOLS, Kube

__all__ = ["DemandWriteFailed", "DemandWriter"]

log = logging.getLogger(__name__)

MAX_CONFLICTS = 8

PoolKey = tuple[str, str]
#: Turns a pool's tracked demand into the new one; pure (``rules.apply`` or ``rules.repair``).
#: Its arguments: the tracked demand, now, and the names of the pool's runners.
Change = Callable[[api.Demand | None, datetime, Container[str]], tuple[api.Demand, list[rules.Transition]]]


class DemandWriteFailed(Exception):  # noqa: N818 - reads as "recording failed"
    """The API server did not take the write; the caller answers GitHub with 503."""


@dataclass(frozen=True)
class _Base:
    """The pool a write starts from, at ``version``; ``replaced``: the older versions, made
    or read by this writer, that the cache may still show (oldest first)."""

    version: str
    pool: api.RunnerPool
    replaced: tuple[str, ...]


@dataclass(frozen=True)
class _Written:
    """A pool as this writer's last successful write of it left it, at ``version``;
    ``replaced``: the versions before it that the cache may still show, oldest first."""

    replaced: tuple[str, ...]
    version: str
    pool: api.RunnerPool


@dataclass
class _Pending:
    change: Change
    done: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None


def _pool(raw: dict[str, Any]) -> api.RunnerPool | None:
    try:
        return api.RunnerPool.model_validate(raw)
    except ValidationError:
        return None  # the CRD refuses such objects; an old stored one just gets no demand


def demand_patch(old: api.Demand | None, new: api.Demand) -> dict[str, Any]:
    """The merge patch (RFC 7386) from ``old`` to ``new``: only the fields and jobs that
    changed, so a pool tracking hundreds of jobs is not sent (and stored, and watched) whole
    for each delivery; null removes a key. Exact because the write is guarded by the
    resourceVersion ``old`` was read at."""
    before = old or api.Demand()
    body = _changed(
        _dumped(before.model_copy(update={"jobs": {}})), _dumped(new.model_copy(update={"jobs": {}}))
    )
    body.pop("jobs", None)
    jobs: dict[str, Any] = {}
    for key, job in new.jobs.items():
        was = before.jobs.get(key)
        if was != job:
            jobs[key] = _dumped(job) if was is None else _changed(_dumped(was), _dumped(job))
    jobs.update((key, None) for key in before.jobs if key not in new.jobs)
    if jobs:
        body["jobs"] = jobs
    return body


def _dumped(model: api.KubeModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True)


def _changed(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A flat merge patch: the keys whose value changed, and null for those gone."""
    body = {key: value for key, value in new.items() if old.get(key) != value}
    body.update((key, None) for key in old if key not in new)
    return body


class DemandWriter:
    def __init__(
        self,
        kube: Kube,
        pools: Reads,
        api_url_of: Callable[[api.RunnerPool], str],
        clock: Callable[[], datetime] = utcnow,
        *,
        runners: Callable[[str, str], Container[str]] | None = None,
        allowed: Callable[[api.RunnerPool], bool] = lambda pool: True,
        job_labels: JobLabels | None = None,
    ) -> None:
        """``runners(namespace, pool)``: the names of a pool's runners; default: its pods' names
        from the cache (the webhook receiver, which reads no pods, passes ``runner_names.by_name``).
        ``allowed``: whether the allow-list (``--allow``) lets the pool register at its scope; a
        delivery never moves a pool it refuses, as the poller never polls for one.
        ``job_labels``: the repository and workflow labels of the job metrics
        (``--job-metrics-labels``); default: both, capped."""
        self._kube = kube
        self._job_labels = job_labels or JobLabels()
        self._allowed = allowed
        self._runner_names = runners or self._pod_names
        self._pools = pools
        self._api_url_of = api_url_of
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[PoolKey, list[_Pending]] = {}
        self._writers: dict[PoolKey, threading.Lock] = {}
        self._written: dict[PoolKey, _Written] = {}

    # -- what callers use ------------------------------------------------------------------

    def matching_pools(self, job: Job) -> list[api.RunnerPool]:
        """Autoscaling pools, from the cache, that ``job`` counts for: those of the job's
        host and repository or owner (an index lookup) the allow-list allows, then the rest of
        ``job_matches``."""
        return self._matching(job, self._candidates(job))

    def _candidates(self, job: Job) -> list[api.RunnerPool]:
        """The autoscaling pools of the job's host and repository or owner (an index lookup)
        that the allow-list lets register at their scope."""
        return [pool for pool in self._pools.autoscaling_pools(job_scope_keys(job)) if self._allowed(pool)]

    def _matching(self, job: Job, candidates: list[api.RunnerPool]) -> list[api.RunnerPool]:
        return [pool for pool in candidates if job_matches(pool, job, self._api_url_of(pool))]

    def record_job(self, job: Job, verdict: Verdict = ANY_POOL) -> int:
        """Record one job on the pools it counts for (``matching.recording_pools``) among
        those ``verdict`` admits; the number of pools. Raises DemandWriteFailed.

        A delivery also marks, once, the demand-blind pools of its scope that it may move
        (``status.demand_blind``): the webhook is configured for them, whatever the job's labels.
        """
        candidates = self._candidates(job)
        matching = self._matching(job, candidates)
        admitted = [pool for pool in matching if verdict.admits(pool)]
        pools = recording_pools(job, admitted, lambda pool: self._concerns(pool, job))
        if job.unconfirmed:  # only where no poll would see it otherwise (``rules``)
            pools = [pool for pool in pools if not _lists(pool, job.repository)]
        chosen = {(pool.namespace, pool.name) for pool in pools}
        marked = [
            pool
            for pool in candidates
            if verdict.delivered
            and (pool.namespace, pool.name) not in chosen
            and pool_status.demand_blind(pool)
            and verdict.admits(pool)
        ]

        def recorded(
            d: api.Demand | None, now: datetime, runners: Container[str]
        ) -> tuple[api.Demand, list[rules.Transition]]:
            new, moved = rules.apply(d, [job], now, runners=runners)
            return (rules.delivered(new, now) if verdict.delivered else new), moved

        for pool in pools:
            self.change(pool, recorded)
        for pool in marked:
            self.change(pool, lambda d, now, runners: (rules.delivered(d, now), []))
        if verdict.delivered and not job.unconfirmed:
            metrics.DELIVERY_POOLS.observe(len(pools))
            if matching and not pools and job.state is not None:
                log.info(
                    "job %s of %s matches %d pool(s), none of which trusts the secret that signed "
                    "the delivery: recorded nowhere",
                    job.id,
                    job.repository,
                    len(matching),
                )
        log.debug(
            "job %s %s recorded on %d pool(s) of %d matching", job.id, job.state, len(pools), len(matching)
        )
        return len(pools)

    def _concerns(self, pool: api.RunnerPool, job: Job) -> bool:
        """Whether a started or ended job's news changes ``pool`` beyond what its namespace's
        counting pool gets (``matching.recording_pools``): the pool tracks the job, as the cache
        or this writer's last write of it shows, or its runner took it.

        A pool that counted the job queued is, but for a change of the pool set in between, the
        counting pool now too, so a cache that does not show that write yet costs nothing; if
        both came together, the job stays queued there until a poll ends it.
        """
        key = (pool.namespace, pool.name)
        written = self._written.get(key)
        for known in (pool, written.pool if written is not None else None):
            demand = known.status.demand if known is not None else None
            if demand is not None and str(job.id) in demand.jobs:
                return True
        return job.runner_name is not None and job.runner_name in self._runner_names(*key)

    def repair(
        self,
        pool: api.RunnerPool,
        seen: Iterable[Job],
        polled: Iterable[str],
        grace: timedelta,
        listed_before: Collection[str] = (),
        *,
        hidden: Iterable[str] = (),
        refused: api.Problem | None = None,
    ) -> None:
        """Apply a poll's view (jobs already filtered to ``pool``; ``hidden``: its repositories
        that answered 404; ``refused``: why GitHub refused the listing of one of its repositories,
        ``None`` when none was); raises DemandWriteFailed."""
        seen, polled, hidden = list(seen), list(polled), list(hidden)

        def change(
            d: api.Demand | None, now: datetime, runners: Container[str]
        ) -> tuple[api.Demand, list[rules.Transition]]:
            repaired, moved = rules.repair(
                d,
                seen,
                polled,
                now=now,
                grace=grace,
                runners=runners,
                listed_before=listed_before,
                hidden=hidden,
            )
            return rules.poll_refused(repaired, refused), moved

        self.change(pool, change)

    def change(self, pool: api.RunnerPool, change: Change) -> None:
        """Group commit: whoever holds the pool's writer lock writes every pending change."""
        key = (pool.namespace, pool.name)
        mine = _Pending(change)
        with self._lock:
            self._pending.setdefault(key, []).append(mine)
            writer = self._writers.setdefault(key, threading.Lock())
        with writer:
            if not mine.done.is_set():
                with self._lock:
                    batch = self._pending.pop(key, [])
                error: Exception | None = None
                try:
                    self._write(key, [item.change for item in batch])
                except Exception as err:
                    error = err
                for item in batch:
                    item.error = error
                    item.done.set()
        if mine.error is not None:
            raise DemandWriteFailed(
                f"could not record demand on {key[0]}/{key[1]}: {describe(mine.error)}"
            ) from mine.error

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._writers.pop((namespace, name), None)
            self._written.pop((namespace, name), None)
        metrics.forget_pool(namespace, name, self._job_labels)

    # -- the write -------------------------------------------------------------------------

    def _get(self, key: PoolKey) -> dict[str, Any] | None:
        """The pool as the API server has it; ``None`` once it is gone (a poll or a delivery
        racing the pool's deletion: its demand went with it, nothing to warn about)."""
        return self._kube.get_if_there(RUNNER_POOLS, key[0], key[1])

    def _pod_names(self, namespace: str, pool: str) -> Container[str]:
        """A pool's runners register under their pod's name (``runnerpool.pods.template``); where
        its pods are not cached yet (a leader's first moments), by their names' shape, as the
        receiver without a pod cache tells them."""
        try:
            pods = self._pools.list_pods(namespace, pool)
        except PodsNotCachedError:
            return runner_names.by_name(namespace, pool)
        return frozenset(str(pod["metadata"]["name"]) for pod in pods)

    def _base(self, key: PoolKey) -> _Base | None:
        """The pool to write over without a request when this replica knows it: the cached
        pool, or, while the cache shows one of the versions this writer's own writes have
        since replaced (their watch events come after the PATCH's answers), what the last of
        them left. A stale guess costs one 409 and a GET, as a write racing another replica
        always did. ``None``: the pool is gone or has no autoscaling (nothing to record)."""
        cached = self._pools.pool(*key)
        shown = None if cached is None else cached.raw["metadata"].get("resourceVersion")
        written = self._written.get(key)
        if written is not None and shown in written.replaced:
            index = written.replaced.index(shown)
            return _Base(written.version, written.pool, written.replaced[index:])
        self._written.pop(key, None)
        if cached is not None and cached.model is not None and shown:
            return _Base(str(shown), cached.model, ())
        return self._read(key)

    def _read(self, key: PoolKey) -> _Base | None:
        raw = self._get(key)
        pool = None if raw is None else _pool(raw)
        if raw is None or pool is None:
            return None
        cached = self._pools.pool(*key)
        shown = None if cached is None else cached.raw["metadata"].get("resourceVersion")
        return _Base(str(raw["metadata"]["resourceVersion"]), pool, (str(shown),) if shown else ())

    def _write(self, key: PoolKey, changes: list[Change]) -> None:
        """One merge patch for every change of the batch, over :meth:`_base`."""
        base = self._base(key)
        runners = self._runner_names(*key)
        for _ in range(MAX_CONFLICTS):
            if base is None or base.pool.spec.autoscaling is None:
                return
            version, pool = base.version, base.pool
            old = pool.status.demand
            now = self._clock()
            new, moved = old, []
            for change in changes:
                new, more = change(new, now, runners)
                moved.extend(more)
            assert new is not None
            if rules.same(old, new):
                return
            body = {
                "metadata": {"resourceVersion": version},
                "status": {"demand": demand_patch(old, new)},
            }
            try:
                answer = self._kube.patch(RUNNER_POOLS, key[0], key[1], body, subresource="status")
            except ApiException as err:
                if err.status == 404:
                    return  # the pool is gone: so is its demand
                if err.status != 409:
                    raise
                self._written.pop(key, None)
                base = self._read(key)
                continue
            self._remember(key, base, answer, new)
            metrics.observe(pool, new, moved, runners, self._job_labels)
            return
        raise DemandWriteFailed(f"{MAX_CONFLICTS} conflicting writes in a row")

    def _remember(self, key: PoolKey, base: _Base, answer: dict[str, Any], demand: api.Demand) -> None:
        """What this write left, for the next one while the cache shows an older version."""
        version = (answer.get("metadata") or {}).get("resourceVersion")
        if not version:
            return
        status = base.pool.status.model_copy(update={"demand": demand})
        pool = base.pool.model_copy(update={"status": status})
        self._written[key] = _Written((*base.replaced, base.version), str(version), pool)


def _lists(pool: api.RunnerPool, repository: str) -> bool:
    """Whether ``pool`` polls ``repository`` whatever it tracks (``matching.listed_repositories``)."""
    return repository.lower() in {repo.lower() for repo in listed_repositories(pool)}
