"""Polling: the repair for lost deliveries, and the whole mechanism without a webhook.

GitHub does not redeliver a failed webhook delivery by itself, so a delivery lost to a
restart, a network fault or a bad secret would leave a job queued (a runner too many, for
ever) or unseen (a job waiting for nothing). Each poll asks GitHub for the active jobs of
every repository an autoscaling pool depends on - its own repository; for an organization
pool, ``spec.autoscaling.repositories`` plus the repositories of jobs it is tracking - and
hands each pool what it saw (``rules.repair``; a queued job only to the one pool that
counts it, ``matching.counting_pool``): new jobs are counted, tracked ones that
moved on are updated, and tracked ones GitHub no longer shows as active have ended: at once
if an earlier poll listed them, after a grace period if not (a job just queued may not be
listed yet). Which jobs were listed is kept in memory, so a new leader's first polls fall
back on the grace.

Budget: one poll per ``interval`` for all pools (a repository shared by several pools is
polled once), conditional requests throughout (``GitHubClient.active_jobs``), and the runner listing's
slowdown rule (``github.budget.next_listing_delay``) on the requests the poll spent, so the
polls use at most half of what is left when a credential's budget runs low. Runs on the
leader only, like the runner managers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runnerpool import api
from runnerpool.api_errors import describe, log_failure
from runnerpool.demand.matching import job_matches, recording_pools
from runnerpool.demand.rules import ACTIVE
from runnerpool.demand.writer import DemandWriteFailed, DemandWriter
from runnerpool.domain import api_url_key, utcnow
from runnerpool.github.budget import next_listing_delay
from runnerpool.github.errors import GitHubError
from runnerpool.github.jobs import ActiveJobs, Job
from runnerpool.github.protocol import GitHubClient, RateLimitAware
from runnerpool.github.types import RateLimit
from runnerpool.reads import Reads

__all__ = ["DemandPoller", "polled_repositories"]

#: How long a listed job is remembered after the last poll that listed it: longer than any
#: interval between two polls, so a job that ends between them is known as listed.
LISTED_TTL = timedelta(hours=1)

log = logging.getLogger(__name__)


def polled_repositories(pool: api.RunnerPool) -> list[str]:
    """``owner/name`` of every repository whose jobs the pool's demand depends on."""
    scaling = pool.spec.autoscaling
    if scaling is None:
        return []
    if pool.spec.repository is not None:
        return [pool.spec.repository]
    # An enterprise pool lists owner/name; an organization pool names within its organization.
    named = [name if "/" in name else f"{pool.spec.organization}/{name}" for name in scaling.repositories]
    tracked = [
        job.repository
        for job in (pool.status.demand.jobs.values() if pool.status.demand else ())
        if job.state != "completed"
    ]
    unique: dict[str, str] = {}
    for repo in [*named, *tracked]:
        unique.setdefault(repo.lower(), repo)
    return list(unique.values())


@dataclass
class _Target:
    repository: str
    client: GitHubClient
    pools: list[api.RunnerPool] = field(default_factory=list)


class DemandPoller:
    def __init__(
        self,
        pools: Reads,
        writer: DemandWriter,
        clients: Callable[[api.RunnerPool], GitHubClient],
        api_url_of: Callable[[api.RunnerPool], str],
        *,
        interval: float,
        clock: Callable[[], datetime] = utcnow,
        allowed: Callable[[api.RunnerPool], bool] = lambda pool: True,
    ) -> None:
        self._pools = pools
        # A pool the allow-lists (--allow) refuse costs no GitHub call, not even a poll.
        self._allowed = allowed
        self._writer = writer
        self._clients = clients
        self._api_url_of = api_url_of
        self._interval = interval
        self._clock = clock
        self.grace = timedelta(seconds=max(60.0, 2 * interval))
        #: Ids of jobs a poll listed as active -> when it last did; forgotten after `LISTED_TTL`.
        self._listed: dict[str, datetime] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Poll on a thread of its own until ``stop``: one poll covers every pool."""
        self._thread = threading.Thread(target=self._loop, name="demand-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.poll_once()
            except Exception as err:  # the next poll tries again; the poller must not die
                log_failure(log, logging.WARNING, "demand poll failed", err=err)
                delay = self._interval

    def _targets(self) -> list[_Target]:
        targets: dict[tuple[str, str], _Target] = {}
        for pool in self._pools.autoscaling_pools():  # valid, autoscaling, not being deleted
            if not self._allowed(pool):
                continue
            api_url = api_url_key(self._api_url_of(pool))
            for repo in polled_repositories(pool):
                key = (api_url, repo.lower())
                if key not in targets:
                    try:
                        targets[key] = _Target(repo, self._clients(pool))
                    except Exception as err:  # a missing credential Secret, say: the others go on
                        log.warning(
                            "cannot poll %s for %s/%s: %s", repo, pool.namespace, pool.name, describe(err)
                        )
                        continue
                targets[key].pools.append(pool)
        return list(targets.values())

    def _remember_listed(self, jobs: Iterable[Job]) -> None:
        now = self._clock()
        for job in jobs:
            if job.state in ACTIVE:
                self._listed[str(job.id)] = now
        for key in [k for k, at in self._listed.items() if now - at > LISTED_TTL]:
            del self._listed[key]

    def poll_once(self) -> float:
        """Poll every repository once and record what was seen; seconds until the next poll."""
        spent, retry_after = 0, 0.0
        lowest: RateLimit | None = None
        seen: dict[tuple[str, str], tuple[api.RunnerPool, list[Job], list[str]]] = {}
        for target in self._targets():
            try:
                active = target.client.active_jobs(target.repository)
            except GitHubError as err:
                log.warning("polling jobs of %s failed: %s", target.repository, err.message)
                retry_after = max(retry_after, err.retry_after or 0.0)
                if err.status != 404:
                    continue
                # Gone, or no longer visible to the credential: none of its jobs will ever be
                # listed again, so its tracked jobs end (``rules.repair``), as when none is listed.
                active = ActiveJobs(jobs=(), spent=1)
            finally:
                budget = target.client.rate_limit() if isinstance(target.client, RateLimitAware) else None
                if budget is not None and (lowest is None or budget.remaining < lowest.remaining):
                    lowest = budget
            spent += active.spent
            for pool in target.pools:
                seen.setdefault((pool.namespace, pool.name), (pool, [], []))[2].append(target.repository)
            for job in active.jobs:
                # A queued job goes to the one pool that counts it (``matching.counting_pool``).
                matching = [pool for pool in target.pools if job_matches(pool, job, self._api_url_of(pool))]
                for pool in recording_pools(job, matching):
                    seen[(pool.namespace, pool.name)][1].append(job)
        listed_before = frozenset(self._listed)
        for pool, jobs, repos in seen.values():
            try:
                self._writer.repair(pool, jobs, repos, self.grace, listed_before)
            except DemandWriteFailed as err:
                log.warning("%s", err)
        self._remember_listed(job for _, jobs, _ in seen.values() for job in jobs)
        now = self._clock().timestamp()
        return next_listing_delay(
            self._interval, lowest, now, pages=max(1, spent), retry_after=retry_after or None
        )
