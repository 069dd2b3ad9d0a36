"""Polling: the repair for lost deliveries, and the whole mechanism without a webhook.

GitHub does not redeliver a failed webhook delivery by itself, so a delivery lost to a
restart, a network fault or a bad secret would leave a job queued (a runner too many, for
ever) or unseen (a job waiting for nothing). Each poll asks GitHub for the active jobs of
every repository an autoscaling pool depends on - its own repository; for an organization
pool, ``spec.autoscaling.repositories`` plus the repositories of jobs it is tracking - and
hands each pool what it saw (``rules.repair``; a queued job only to the one pool per namespace
that counts it, ``matching.recording_pools``): new jobs are counted, tracked ones that
moved on are updated, and tracked ones GitHub no longer shows as active have ended: at once
if an earlier poll with the same credential listed them, after a grace period if not (a job
just queued may not be listed yet). A repository that answers 404 ends only the jobs listed
before (``rules.repair``'s ``hidden``): the credential may just not see it, while its
deliveries come. Which jobs each credential listed is kept in memory, so a new leader's first
polls fall back on the grace.

**Each credential lists for its own pools.** A repository is listed once per credential
Secret (namespace, Secret, GitHub host) that a pool polling it uses, with that Secret's
client, and a pool hears only of jobs its own credential listed. So a Secret GitHub refuses
(401), or one missing, costs only the pools that use it their poll; and a pool without a
working credential of its own never holds a job learnt with another tenant's token
(docs/security.md, "A tenant takes another's demand"). Per credential rather than per pool:
the pools of one namespace sharing a Secret share its listing, which is what the budget is
counted against anyway.

Budget: one poll per ``interval``, each repository listed once per credential, conditional
requests throughout (``GitHubClient.active_jobs``), and the runner listing's slowdown rule
(``github.budget.next_listing_delay``) per credential on the requests its listings spent,
so the polls use at most half of what is left when a credential's budget runs low, and a
credential that runs low (or that GitHub tells to wait) slows down alone. Runs on the
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
from runnerpool.demand.matching import job_matches, listed_repositories, recording_pools
from runnerpool.demand.rules import ACTIVE
from runnerpool.demand.writer import DemandWriteFailed, DemandWriter
from runnerpool.domain import api_url_key, utcnow
from runnerpool.github.budget import next_listing_delay
from runnerpool.github.errors import BadCredentials, GitHubError, NotFound
from runnerpool.github.jobs import ActiveJobs, Job
from runnerpool.github.protocol import GitHubClient, RateLimitAware
from runnerpool.github.types import RateLimit
from runnerpool.reads import Reads

__all__ = ["DemandPoller", "poll_problem", "polled_repositories"]

#: How long a listed job is remembered after the last poll that listed it: longer than any
#: interval between two polls, so a job that ends between them is known as listed.
LISTED_TTL = timedelta(hours=1)

log = logging.getLogger(__name__)


def poll_problem(repository: str, err: GitHubError) -> api.Problem | None:
    """What to fix when GitHub refuses a listing for good: a credential that may not read the
    repository's Actions (401, 403) or cannot see the repository (404). ``None``: a rate limit
    or an outage, which the next polls retry."""
    if isinstance(err, BadCredentials):
        said = (
            f"GitHub refuses to list the workflow runs of {repository}: {err.message}. The pool's "
            'credential needs read access to Actions ("Actions: read" for a GitHub App or a '
            "fine-grained token; the repo scope for a classic PAT and a private repository)"
        )
    elif isinstance(err, NotFound):
        said = (
            f"{repository} is not found with the pool's credential: it does not exist, or the "
            f"credential cannot see it ({err.message})"
        )
    else:
        return None
    return api.Problem(reason=str(err.reason), message=said[: api.PROBLEM_MESSAGE_MAX])


def polled_repositories(pool: api.RunnerPool) -> list[str]:
    """``owner/name`` of every repository whose jobs the pool's demand depends on."""
    if pool.spec.autoscaling is None:
        return []
    named = listed_repositories(pool)
    if pool.spec.repository is not None:
        return named
    tracked = [
        job.repository
        for job in (pool.status.demand.jobs.values() if pool.status.demand else ())
        if job.state != "completed"
    ]
    unique: dict[str, str] = {}
    for repo in [*named, *tracked]:
        unique.setdefault(repo.lower(), repo)
    return list(unique.values())


#: Whose credential a listing is made with: the pool's GitHub host, namespace and credential
#: Secret (``ClientCache`` keeps one client per such Secret and host).
CredentialKey = tuple[str, str, str]


def credential_key(pool: api.RunnerPool, api_url: str) -> CredentialKey:
    return (api_url_key(api_url), pool.namespace, pool.spec.credential_secret_name)


@dataclass
class _Target:
    """One repository, listed with one credential, for the pools that use that credential."""

    repository: str
    credential: CredentialKey
    client: GitHubClient
    pools: list[api.RunnerPool] = field(default_factory=list)


@dataclass
class _Heard:
    """What one poll tells one pool."""

    pool: api.RunnerPool
    #: The jobs its own credential listed that it hears of (``recording_pools``).
    jobs: list[Job] = field(default_factory=list)
    #: Repositories listed: a tracked job of theirs that no listing showed has ended.
    repos: list[str] = field(default_factory=list)
    #: Repositories that answered 404: only their jobs listed before have ended.
    hidden: list[str] = field(default_factory=list)


@dataclass
class _Spend:
    """What one credential's listings of one poll cost, for its own next-poll delay."""

    spent: int = 0
    retry_after: float = 0.0
    budget: RateLimit | None = None


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
        """``clients(pool)``: the client of the pool's own credential, one per credential
        Secret (raises when the Secret is missing or unusable)."""
        self._pools = pools
        # A pool the allow-lists (--allow) refuse costs no GitHub call, not even a poll.
        self._allowed = allowed
        self._writer = writer
        self._clients = clients
        self._api_url_of = api_url_of
        self._interval = interval
        self._clock = clock
        self.grace = timedelta(seconds=max(60.0, 2 * interval))
        #: Per credential, ids of jobs its polls listed as active -> when one last did; forgotten
        #: after `LISTED_TTL`. Per credential: a 404 ends only what the same credential saw.
        self._listed: dict[CredentialKey, dict[str, datetime]] = {}
        #: Credentials slowed down (a low budget, GitHub's Retry-After) -> when they may list again.
        self._not_before: dict[CredentialKey, float] = {}
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

    def _targets(self, now: float) -> list[_Target]:
        """Each repository once per credential that a pool polling it uses, skipping the
        credentials that are slowed down until later than ``now``."""
        targets: dict[tuple[CredentialKey, str], _Target] = {}
        clients: dict[CredentialKey, GitHubClient | None] = {}
        for pool in self._pools.autoscaling_pools():  # valid, autoscaling, not being deleted
            if not self._allowed(pool):
                continue
            credential = credential_key(pool, self._api_url_of(pool))
            if self._not_before.get(credential, 0.0) > now:
                continue
            if credential not in clients:
                clients[credential] = self._client(pool)
            github = clients[credential]
            if github is None:
                continue  # its Secret is missing or unusable: only its own pools go unpolled
            for repo in polled_repositories(pool):
                key = (credential, repo.lower())
                targets.setdefault(key, _Target(repo, credential, github)).pools.append(pool)
        return list(targets.values())

    def _client(self, pool: api.RunnerPool) -> GitHubClient | None:
        try:
            return self._clients(pool)
        except Exception as err:  # a missing credential Secret, say: the others go on
            log.warning(
                "cannot poll for %s/%s with credential Secret %s: %s",
                pool.namespace,
                pool.name,
                pool.spec.credential_secret_name,
                describe(err),
            )
            return None

    def _remember_listed(self, heard: Iterable[_Heard]) -> None:
        now = self._clock()
        for pool_heard in heard:
            credential = credential_key(pool_heard.pool, self._api_url_of(pool_heard.pool))
            listed = self._listed.setdefault(credential, {})
            listed.update((str(job.id), now) for job in pool_heard.jobs if job.state in ACTIVE)
        for credential, listed in list(self._listed.items()):
            self._listed[credential] = {key: at for key, at in listed.items() if now - at <= LISTED_TTL}
            if not self._listed[credential]:
                del self._listed[credential]

    def poll_once(self) -> float:
        """Poll every repository once per credential and record what was seen; seconds until
        the next poll.

        A job counts for a pool only when the pool's own credential listed it: each pool
        hears what its credential's listing showed (``recording_pools`` over every pool with
        such evidence, so a queued job still counts once per namespace), and a credential
        GitHub refuses, or that is rate-limited, costs only its own pools their poll.
        """
        now = self._clock().timestamp()
        spends: dict[CredentialKey, _Spend] = {}
        seen: dict[tuple[str, str], _Heard] = {}
        #: Job id -> each pool whose own credential listed it matching, with its listing of it.
        evidence: dict[int, list[tuple[api.RunnerPool, Job]]] = {}
        unsure: set[tuple[str, str]] = set()
        #: Pools a listing was refused for (a credential without Actions read access, a repository
        #: it cannot see), with GitHub's words: ``status.demand.pollProblem``, ``DemandVisible``.
        refused: dict[tuple[str, str], api.Problem] = {}
        for target in self._targets(now):
            spend = spends.setdefault(target.credential, _Spend())
            active, error = self._list(target, spend)
            problem = None if error is None else poll_problem(target.repository, error)
            for pool in target.pools:
                key = (pool.namespace, pool.name)
                if problem is not None:
                    refused.setdefault(key, problem)
                if active is None and problem is None:
                    unsure.add(key)  # a rate limit, an outage: says nothing of the credential
                    continue
                heard = seen.setdefault(key, _Heard(pool))
                if active is not None:
                    heard.repos.append(target.repository)
                elif error is not None and error.status == 404:
                    heard.hidden.append(target.repository)
            if active is None:
                continue
            for job in active.jobs:
                # A job no pool here can take (one for GitHub-hosted runners, or a deleted pool's)
                # is no evidence: it must not reach ``recording_pools`` with no pool to pick.
                matched = [pool for pool in target.pools if job_matches(pool, job, self._api_url_of(pool))]
                if matched:
                    evidence.setdefault(job.id, []).extend((pool, job) for pool in matched)
        for listings in evidence.values():
            own = {(pool.namespace, pool.name): job for pool, job in listings}
            # A queued job goes to one pool per namespace (``matching.recording_pools``).
            for pool in recording_pools(listings[0][1], [pool for pool, _ in listings]):
                seen[(pool.namespace, pool.name)].jobs.append(own[(pool.namespace, pool.name)])
        self._repair(seen, unsure, refused)
        self._remember_listed(seen.values())
        return self._next_delay(spends, now)

    def _repair(
        self,
        seen: dict[tuple[str, str], _Heard],
        unsure: set[tuple[str, str]],
        refused: dict[tuple[str, str], api.Problem],
    ) -> None:
        """Hand each pool what the poll told it (``rules.repair``), with the jobs its own
        credential listed before."""
        listed_before = {credential: frozenset(listed) for credential, listed in self._listed.items()}
        for key, heard in seen.items():
            pool = heard.pool
            # A listing that failed for a while says nothing: the problem known stays as it was,
            # unless another of the pool's listings went through (then what was refused is known).
            unknown = key in unsure and not heard.repos
            kept = pool.status.demand.poll_problem if unknown and pool.status.demand else None
            before = listed_before.get(credential_key(pool, self._api_url_of(pool)), frozenset())
            try:
                self._writer.repair(
                    pool,
                    heard.jobs,
                    heard.repos,
                    self.grace,
                    before,
                    hidden=heard.hidden,
                    refused=refused.get(key, kept),
                )
            except DemandWriteFailed as err:
                log.warning("%s", err)

    def _list(self, target: _Target, spend: _Spend) -> tuple[ActiveJobs | None, GitHubError | None]:
        """One listing with the target's credential, or how GitHub refused it (the caller tells
        what a human must fix, :func:`poll_problem`, and a 404's repository from the others)."""
        failed = None
        try:
            active: ActiveJobs | None = target.client.active_jobs(target.repository)
        except GitHubError as err:
            log.warning(
                "polling jobs of %s with credential Secret %s/%s failed: %s",
                target.repository,
                target.credential[1],
                target.credential[2],
                err.message,
            )
            spend.retry_after = max(spend.retry_after, err.retry_after or 0.0)
            spend.spent += 1 if err.status is not None else 0  # GitHub answered: a request spent
            active, failed = None, err
        finally:
            budget = target.client.rate_limit() if isinstance(target.client, RateLimitAware) else None
            if budget is not None:
                spend.budget = budget
        if active is not None:
            spend.spent += active.spent
        return active, failed

    def _next_delay(self, spends: dict[CredentialKey, _Spend], now: float) -> float:
        """Each credential's own slowdown (``next_listing_delay`` on what its listings spent):
        one whose budget runs low, or that GitHub told to wait, waits alone."""
        self._not_before = {key: until for key, until in self._not_before.items() if until > now}
        for credential, spend in spends.items():
            delay = next_listing_delay(
                self._interval,
                spend.budget,
                now,
                pages=max(1, spend.spent),
                retry_after=spend.retry_after or None,
            )
            if delay > self._interval:
                self._not_before[credential] = now + delay
            else:
                self._not_before.pop(credential, None)
        waits = [until - now for until in self._not_before.values() if until > now]
        return min([self._interval, *waits])
