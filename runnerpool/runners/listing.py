"""One runner listing per scope, shared by every pool registered there.

GitHub only lists runners per repository or organization, and tells pools apart by the
``<namespace>/<pool>`` label every runner of a pool carries. meows lists the whole scope once
per pool, so M pools in one organization list it M times a minute; here the latest listing
of each scope is kept and every pool reads its own runners out of it. The runner managers
refresh it once per interval; the reconciler reads it for ``status.runners`` without any
request, and the finalizer refreshes it (cheaply: the client revalidates pages with their
ETags, so an unchanged listing costs no budget).

Concurrent refreshes of one scope are folded into one request: a caller that finds another
refresh in flight waits for it and takes its result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from runnerpool import api, naming
from runnerpool.domain import Scope, api_url_key, utcnow
from runnerpool.github.protocol import GitHubClient, RateLimitAware
from runnerpool.github.types import Runner

__all__ = ["ListingKey", "SharedListing", "Snapshot", "pool_runners", "runner_counts"]

#: GitHub's status of a runner whose listener is not connected.


@dataclass(frozen=True)
class ListingKey:
    """Which listing: the same organization on github.com and on a GHES host are two."""

    api_url: str
    scope_key: str

    @classmethod
    def of(cls, api_url: str, scope: Scope) -> ListingKey:
        return cls(api_url_key(api_url), scope.key)

    def __str__(self) -> str:
        return f"{self.scope_key}@{self.api_url}"


@dataclass(frozen=True)
class Snapshot:
    """A scope's runners as one listing saw them, and whose credential listed them."""

    runners: tuple[Runner, ...]
    fetched_at: datetime
    credential: str


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
        with fetching:
            with self._lock:
                done = self._snapshots.get(key)
                if done is not None and self._generations.get(key, 0) != generation:
                    return done
            runners = tuple(client.list_runners(scope))
            snapshot = Snapshot(runners=runners, fetched_at=self._clock(), credential=credential_of(client))
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
