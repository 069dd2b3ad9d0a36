"""One runner listing per scope and credential, shared by every pool that lists with it.

GitHub only lists runners per repository or organization, and tells pools apart by the
``<namespace>/<pool>`` label every runner of a pool carries. meows lists the whole scope once
per pool, so M pools in one organization list it M times a minute; here the latest listing
of each scope is kept and every pool reads its own runners out of it. The runner managers
refresh it once per interval; the reconciler reads it for ``status.runners`` without any
request, and the finalizer refreshes it (cheaply: the client revalidates pages with their
ETags, so an unchanged listing costs no budget).

Concurrent refreshes of one scope are folded into one request: a caller that finds another
refresh in flight waits for it and takes its result. Callers that only need a listing recent
enough (the finalizers of many pools of one scope, deleted at once) ask ``recent``: it serves
the latest listing if it started late enough, lists at most once per ``gap`` otherwise, and
tells the others how long to wait, so deleting a hundred pools of a scope no longer lists
it a hundred times (twice: once to deregister, once to confirm).

A listing is shared only by pools that would make it with the same credential: one namespace,
one credential Secret, one route (``spec.proxy``, ``spec.githubServerTLS``). A pool acts on its
listing with its own credential (deletes runners, marks pods busy), so a listing made by
another tenant's credential and route, which that tenant controls (a proxy and a CA of their
own answer for api.github.com), must never be what a pool acts on; nor may another tenant's
failing credential or stalling proxy leave a pool without any listing.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from runnerpool import api, naming
from runnerpool.domain import Connection, PoolRef, Scope, api_url_key, pool_key, utcnow
from runnerpool.github.protocol import GitHubClient, RateLimitAware
from runnerpool.github.types import Runner

__all__ = ["ListingKey", "SharedListing", "Snapshot", "pool_runners", "runner_counts"]


@dataclass(frozen=True)
class ListingKey:
    """Which listing: a scope on one GitHub host, as one namespace's credential Secret sees it
    over one route (see the module docstring). The same organization on github.com and on a
    GHES host are two; so are two namespaces' pools of one organization."""

    api_url: str
    scope_key: str
    #: ``namespace/secret`` of the credential the listing is made with.
    credential: str
    connection: Connection | None = None

    @classmethod
    def of(cls, pool: PoolRef) -> ListingKey:
        return cls(
            api_url_key(pool.api_url),
            pool.scope.key,
            pool_key(pool.namespace, pool.credential_secret_name),
            pool.connection,
        )

    def __str__(self) -> str:
        """Unique per key: job ids and metric labels."""
        route = "" if self.connection is None else f" via {_digest(repr(self.connection))}"
        return f"{self.scope_key}@{self.api_url} as {self.credential}{route}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Snapshot:
    """A scope's runners as one listing saw them, and whose credential listed them.

    ``started_at``: when its first request went; every runner registered before then is in it.
    """

    runners: tuple[Runner, ...]
    fetched_at: datetime
    credential: str
    started_at: datetime

    def of_pool(self, namespace: str, pool: str) -> list[Runner]:
        """``pool_runners`` of this listing, from an index built once per listing: a scope's
        round asks for each of its pools, and scanning every runner for each pool was
        pools x runners label comparisons per round (a million per scope at N=10,000)."""
        return self._by_label.get(naming.pool_runner_label(namespace, pool).lower(), [])

    def of_scale_set_pool(
        self,
        namespace: str,
        pool: str,
        scale_set: str,
        pod_names: Iterable[str],
        named_like_no_other: Callable[[], bool],
    ) -> list[Runner]:
        """A scale-set pool's runners: by the pool's label, and those labelled with the scale
        set's name and no pool's label that are named after one of the pool's pods or, when
        ``named_like_no_other()`` says no other pool's runners could have that label and name
        (asked only when such a runner is listed), named as the pool's pods are
        (``naming.runner_pod_name_pattern``).

        A GitHub Enterprise Server before 3.18 keeps only the scale set's name as its runners'
        label (docs/scale-sets.md): without the pod names its runners were invisible, and a busy
        one's pod was neither marked busy nor kept by a deletion's drain; without the name's
        shape, a runner whose pod vanished (force-deleted, its node lost) stayed registered,
        offline, for good, since no pod of its name was left to find it by. Both kinds at once
        (the server upgraded while the pool ran): the older runners were hidden as soon as one
        labelled runner was listed, a busy one's pod unmarked."""
        own = self.of_pool(namespace, pool)
        names = set(pod_names)
        labelled = [
            r
            for r in self._by_label.get(scale_set.lower(), [])
            if not any(naming.is_pool_runner_label(label) for label in r.labels)
        ]
        shape = naming.runner_pod_name_pattern(pool)
        orphans = {r.id for r in labelled if r.name not in names and shape.fullmatch(r.name)}
        if orphans and not named_like_no_other():
            orphans = set()
        return [*own, *(r for r in labelled if r.name in names or r.id in orphans)]

    @functools.cached_property
    def _by_label(self) -> dict[str, list[Runner]]:
        index: dict[str, list[Runner]] = {}
        for runner in self.runners:
            for label in {own.lower() for own in runner.labels}:
                index.setdefault(label, []).append(runner)
        return index


def pool_runners(runners: Iterable[Runner], namespace: str, pool: str) -> list[Runner]:
    """The runners carrying the pool's label; GitHub compares labels case-insensitively."""
    label = naming.pool_runner_label(namespace, pool).lower()
    return [runner for runner in runners if label in (own.lower() for own in runner.labels)]


def runner_counts(runners: Iterable[Runner]) -> api.RunnerCounts:
    """Busy wins over offline: GitHub can report a runner as both for a moment while it loses
    a job's connection, and "busy" is what keeps it (and its pod) alive."""
    online = busy = offline = 0
    for runner in runners:
        if runner.busy:
            busy += 1
        elif runner.offline:
            offline += 1
        else:
            online += 1
    return api.RunnerCounts(online=online, busy=busy, offline=offline)


def credential_of(client: GitHubClient) -> str:
    return client.credential if isinstance(client, RateLimitAware) else "unknown"


class SharedListing:
    """The latest listing per scope, refreshed on demand with at most one request in flight."""

    def __init__(self, clock: Callable[[], datetime] = utcnow) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshots: dict[ListingKey, Snapshot] = {}
        self._generations: dict[ListingKey, int] = {}
        self._fetching: dict[ListingKey, threading.Lock] = {}
        #: When the listing in flight (if any) started.
        self._in_flight: dict[ListingKey, datetime] = {}

    def latest(self, key: ListingKey) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(key)

    def fetch(self, key: ListingKey, scope: Scope, client: GitHubClient) -> Snapshot:
        """List the scope now, or take the result of a listing that was in flight at the call.

        Raises whatever the client raises (``GitHubError``); the previous snapshot stays.
        """
        with self._lock:
            generation = self._generations.get(key, 0)
            fetching = self._fetching.setdefault(key, threading.Lock())
        return self._fetch(key, scope, client, generation, fetching)

    def recent(
        self, key: ListingKey, scope: Scope, client: GitHubClient, *, since: datetime, gap: float
    ) -> Snapshot | float:
        """A listing of the scope that started at ``since`` or later, or the seconds to wait
        for one.

        The latest listing if it started late enough; else the one in flight if it did; else
        a new one, unless the latest started less than ``gap`` seconds ago: then the seconds
        until it is ``gap`` old (a failed listing does not count: the caller's back-off
        covers failures). Raises what ``fetch`` raises.
        """
        with self._lock:
            latest = self._snapshots.get(key)
            if latest is not None and latest.started_at >= since:
                return latest
            in_flight = self._in_flight.get(key)
            if in_flight is None or in_flight < since:
                now = self._clock()
                if in_flight is not None:
                    return max(gap - (now - in_flight).total_seconds(), gap / 10)
                if latest is not None:
                    wait = (latest.started_at + timedelta(seconds=gap) - now).total_seconds()
                    if wait > 0:
                        return wait
            generation = self._generations.get(key, 0)
            fetching = self._fetching.setdefault(key, threading.Lock())
        snapshot = self._fetch(key, scope, client, generation, fetching)
        if snapshot.started_at < since:  # joined a listing that started a moment too early
            return gap
        return snapshot

    def _fetch(
        self, key: ListingKey, scope: Scope, client: GitHubClient, generation: int, fetching: threading.Lock
    ) -> Snapshot:
        with fetching:
            with self._lock:
                done = self._snapshots.get(key)
                if done is not None and self._generations.get(key, 0) != generation:
                    return done
                started = self._clock()
                self._in_flight[key] = started
            try:
                runners = tuple(client.list_runners(scope))
            finally:
                with self._lock:
                    if self._in_flight.get(key) == started:
                        del self._in_flight[key]
            snapshot = Snapshot(
                runners=runners,
                fetched_at=self._clock(),
                credential=credential_of(client),
                started_at=started,
            )
            with self._lock:
                if self._fetching.get(key) is not fetching:
                    # Forgotten meanwhile (the scope's job was replaced): a listing made since
                    # by the new job must not be overwritten with this older one.
                    return snapshot
                self._snapshots[key] = snapshot
                self._generations[key] = self._generations.get(key, 0) + 1
            return snapshot

    def forget(self, key: ListingKey) -> None:
        """Drop a scope no pool uses any more; a later ``fetch`` starts afresh."""
        with self._lock:
            self._snapshots.pop(key, None)
            self._generations.pop(key, None)
            self._fetching.pop(key, None)
            self._in_flight.pop(key, None)
