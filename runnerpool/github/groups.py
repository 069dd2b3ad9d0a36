"""Runner groups by name: resolved to GitHub's id, checked against what a pool serves, cached.

A pool names its runner group (``spec.runnerGroup``); GitHub knows groups by id (a JIT config
names the id, ``config.sh --runnergroup`` the name). A name that names no group, or a group
open to ``selected`` repositories (organization group) or organizations (enterprise group)
that leaves out one the pool serves, or a group closed to public repositories (GitHub's
default: "Allow public repositories" off) that serves a public one, would register runners
that never get those jobs; the reconciler says so in a condition instead and makes no runner
pod. A pool that names no group registers in the scope's default group (``check_default``),
which can refuse the same way.

Budget (docs/github-api-budget.md): a check costs one listing of the scope's groups and, for a
``selected`` group, one of its members; for a group closed to public repositories, one read
of each repository the pool serves; all are conditional (an unchanged page is a free 304)
and cached: a found group for ``ttl`` (10 minutes), a missing one or a refusal for
``missing_ttl`` (one minute: the user is probably fixing it; a refusal also ages the group,
members and visibilities it came from to that minute). The cache is an LRU of at most
``max_entries`` answers (groups keyed by credential, API base, scope and name,
case-insensitive as the runner's own configuration compares names; members by group;
visibility by repository). After a failed call (GitHub down, rate
limited) the scope gets no call until ``ScopeBackoff`` allows one; meanwhile the last failure
is raised again, unless an earlier call found the group (and its members): that answer is
served, however old, until GitHub answers again.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from runnerpool.domain import Scope
from runnerpool.github.budget import ScopeBackoff
from runnerpool.github.errors import GitHubError, NotFound, RateLimited, Unavailable
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import PRIVATE, RunnerGroup
from runnerpool.reasons import Reason

__all__ = [
    "GROUP_TTL",
    "MAX_GROUPS",
    "MISSING_TTL",
    "RepositoryNotAllowed",
    "RunnerGroupNotFound",
    "RunnerGroups",
]

GROUP_TTL = 600.0
MISSING_TTL = 60.0
#: Cached answers at most: groups, their members and the visibility of repositories pools
#: serve (a pool may list a hundred).
MAX_GROUPS = 4096
#: The longest wait a failure earns before the scope's groups are asked for again.
BACKOFF_CAP = 60.0


class RunnerGroupNotFound(NotFound):
    """The scope has no runner group of that name (or the credential cannot see it)."""

    default_reason = Reason.RUNNER_GROUP_NOT_FOUND


class RepositoryNotAllowed(GitHubError):  # noqa: N818 - named like the other GitHubError kinds
    """A ``selected`` group that leaves out repositories (or their organizations) the pool serves."""

    default_reason = Reason.REPOSITORY_NOT_ALLOWED


@dataclass(frozen=True)
class _Entry:
    expires: float
    group: RunnerGroup | None = None
    members: frozenset[str] | None = None
    public: bool | None = None
    error: GitHubError | None = None


def _client_key(client: GitHubClient) -> Hashable:
    """Whose view the answer is: a credential's name and API base when the client has them."""
    credential = getattr(client, "credential", None)
    base_url = getattr(client, "base_url", None)
    if isinstance(credential, str) and isinstance(base_url, str):
        return (credential, base_url.lower())
    return id(client)


def _whose(client: GitHubClient, scope: Scope) -> tuple[Hashable, str]:
    """Whose answers a cache entry holds: the client's (its credential and server) and the
    scope's."""
    return (_client_key(client), scope.key)


def _group_key(whose: tuple[Hashable, str], name: str) -> Hashable:
    """The cache key of the group ``name`` (GitHub's group names ignore case) of ``whose``
    (the client's key, the scope's)."""
    return ("group", *whose, name.lower())


class RunnerGroups:
    """The cache and the check, shared by every pool (thread-safe)."""

    def __init__(
        self,
        *,
        ttl: float = GROUP_TTL,
        missing_ttl: float = MISSING_TTL,
        max_entries: int = MAX_GROUPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._missing_ttl = missing_ttl
        self._max = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._backoff = ScopeBackoff(BACKOFF_CAP, clock)

    def resolve(self, client: GitHubClient, scope: Scope, name: str) -> RunnerGroup:
        """The group called ``name`` in ``scope``, for its id (a JIT config names it).

        Raises ``RunnerGroupNotFound``, or the ``GitHubError`` the listing failed with.
        """
        whose = _whose(client, scope)
        entry = self._lookup(_group_key(whose, name), whose, lambda: self._find(client, scope, name))
        if entry.error is not None:
            raise entry.error
        assert entry.group is not None
        return entry.group

    def check(
        self, client: GitHubClient, scope: Scope, name: str, repositories: Sequence[str]
    ) -> RunnerGroup:
        """``resolve``, then whether the group admits every repository (``owner/name``) the
        pool serves: a ``selected`` organization group must list each of them, a ``selected``
        enterprise group each of their organizations, and a group that refuses public
        repositories (GitHub's default for a group) must serve none. Raises
        ``RepositoryNotAllowed``."""
        group = self.resolve(client, scope, name)
        self._admits(client, scope, group, _group_key(_whose(client, scope), name), repositories)
        return group

    def check_default(
        self, client: GitHubClient, scope: Scope, repositories: Sequence[str], *, refusing: bool = True
    ) -> RunnerGroup | None:
        """The scope's default group (GitHub's ``default: true``, where the runners of a pool
        that names no group go), checked as :meth:`check` checks a named one; None when the
        listing marks no group default. ``refusing``: a refusal closes the pool (its answers
        are then asked again within a minute, as the user is probably fixing it); False for
        a look that closes nothing, which keeps the answers for their ten minutes."""
        whose = _whose(client, scope)
        key: Hashable = ("default", *whose)
        entry = self._lookup(key, whose, lambda: self._find_default(client, scope))
        if entry.error is not None:
            raise entry.error
        if entry.group is not None:
            self._admits(client, scope, entry.group, key, repositories, refusing=refusing)
        return entry.group

    def _admits(
        self,
        client: GitHubClient,
        scope: Scope,
        group: RunnerGroup,
        key: Hashable,
        repositories: Sequence[str],
        *,
        refusing: bool = True,
    ) -> None:
        """Raises ``RepositoryNotAllowed`` unless ``group`` (found under ``key``) admits every
        one of ``repositories``."""
        if not repositories:
            return
        try:
            if group.selected:
                self._check_members(client, scope, group, repositories)
            if group.refuses_public:
                self._check_private(client, scope, group, repositories)
        except RepositoryNotAllowed:
            if not refusing:
                raise
            # The user is probably fixing it (on GitHub, or in the spec): ask again in a minute.
            whose = _whose(client, scope)
            keys: list[Hashable] = [key, ("members", *whose, group.id)]
            keys += [("public", _client_key(client), r.lower()) for r in repositories]
            self._expire_within(keys, self._missing_ttl)
            raise

    def _check_members(
        self, client: GitHubClient, scope: Scope, group: RunnerGroup, repositories: Sequence[str]
    ) -> None:
        whose = _whose(client, scope)
        entry = self._lookup(
            ("members", *whose, group.id),
            whose,
            lambda: _Entry(
                self._clock() + self._ttl,
                members=frozenset(m.lower() for m in client.runner_group_members(scope, group.id)),
            ),
        )
        if entry.error is not None:
            raise entry.error
        assert entry.members is not None
        wanted = (
            repositories if scope.organization is not None else [r.partition("/")[0] for r in repositories]
        )
        refused = sorted({w for w in wanted if w.lower() not in entry.members})
        if refused:
            what = "repositories" if scope.organization is not None else "organizations"
            raise RepositoryNotAllowed(
                f"runner group {group.name!r} of {scope.name} admits selected {what} only, and not "
                f"{', '.join(refused)}: add them to the group on GitHub or remove them from "
                "spec.autoscaling.repositories"
            )

    def _check_private(
        self, client: GitHubClient, scope: Scope, group: RunnerGroup, repositories: Sequence[str]
    ) -> None:
        """Each repository's visibility (one conditional GET each, cached like a group): the
        jobs of a public one never reach a group that refuses public repositories, so its
        runners would sit idle while those jobs queue."""
        whose = _whose(client, scope)
        public = []
        for repository in sorted(set(repositories)):
            entry = self._lookup(
                ("public", _client_key(client), repository.lower()),
                whose,
                functools.partial(self._visibility, client, repository),
            )
            if entry.error is not None:
                raise entry.error
            if entry.public:
                public.append(repository)
        if public:
            which = "private repositories only" if group.visibility == PRIVATE else "no public repository"
            raise RepositoryNotAllowed(
                f"runner group {group.name!r} of {scope.name} admits {which}, and {', '.join(public)} "
                f"{'is' if len(public) == 1 else 'are'} public: allow public repositories in the group's "
                "settings on GitHub, or remove them from spec.autoscaling.repositories"
            )

    def _visibility(self, client: GitHubClient, repository: str) -> _Entry:
        return _Entry(self._clock() + self._ttl, public=client.repository_public(repository))

    # -- the cache ---------------------------------------------------------------------------

    def _lookup(self, key: Hashable, whose: Hashable, fetch: Callable[[], _Entry]) -> _Entry:
        """The cached answer while fresh, else GitHub's; while GitHub is down or rate limits
        (``Unavailable``, ``RateLimited``, or the backoff that follows them), the last answer
        found, however old: the group did not go away because GitHub failed to say it is
        there, and a closed gate would take the pool's token and runners for a 502."""
        entry = self._cached(key)
        if entry is not None:
            return entry
        try:
            return self._ask(key, whose, fetch)
        except (Unavailable, RateLimited):
            known = self._last_known(key)
            if known is None:
                raise
            return known

    def _find(self, client: GitHubClient, scope: Scope, name: str) -> _Entry:
        groups = client.runner_groups(scope)
        exact = [g for g in groups if g.name == name] or [g for g in groups if g.name.lower() == name.lower()]
        if exact:
            return _Entry(self._clock() + self._ttl, group=exact[0])
        known = ", ".join(sorted(g.name for g in groups)) or "none"
        return _Entry(
            self._clock() + self._missing_ttl,
            error=RunnerGroupNotFound(
                f"{scope.name} has no runner group {name!r} that the pool's credentials can see "
                f"(groups: {known}): create it on GitHub or fix spec.runnerGroup"
            ),
        )

    def _find_default(self, client: GitHubClient, scope: Scope) -> _Entry:
        """The group marked default; an organization's own before one its enterprise shares."""
        marked = sorted((g for g in client.runner_groups(scope) if g.default), key=lambda g: g.inherited)
        return _Entry(self._clock() + self._ttl, group=marked[0] if marked else None)

    def _ask(self, key: Hashable, whose: Hashable, fetch: Callable[[], _Entry]) -> _Entry:
        """One GitHub look-up, unless ``whose`` (a credential's view of a scope) backs off; a 404
        on the scope is an answer. The backoff is per credential, not per scope: another
        tenant's failing credential or stalling proxy must not refuse this one's look-ups."""
        refusal = self._backoff.refusal(whose)
        if refusal is not None:
            raise refusal
        try:
            entry = fetch()
        except NotFound as err:
            entry = _Entry(self._clock() + self._missing_ttl, error=err)
        except GitHubError as err:
            self._backoff.failed(whose, err)
            raise
        self._backoff.succeeded(whose)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return entry

    def _cached(self, key: Hashable) -> _Entry | None:
        """The entry while fresh; an expired one stays (LRU-bounded) for :meth:`_last_known`."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.expires <= self._clock():
                return None
            self._entries.move_to_end(key)
            return entry

    def _expire_within(self, keys: Iterable[Hashable], seconds: float) -> None:
        latest = self._clock() + seconds
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                if entry is not None and entry.expires > latest:
                    self._entries[key] = dataclasses.replace(entry, expires=latest)

    def _last_known(self, key: Hashable) -> _Entry | None:
        """The last answer GitHub gave for ``key`` that found something, fresh or not."""
        with self._lock:
            entry = self._entries.get(key)
        return entry if entry is not None and entry.error is None else None
