"""The checks a pool must pass before anything is made for it or asked of GitHub.

Each gate answers with the condition it puts on the pool (:class:`Verdict`), or ``None`` when it
does not apply; the reconciler evaluates them in order and stops at the first closed one: the
pool gets that condition, ``Ready`` False with its message, and an Event, and nothing else is
written (no Secret, unless the gate asks for the pool's token to be withdrawn, no pod).  Adding
a check is adding a gate to the list the manager gives the reconciler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from runnerpool import api, children, conditions
from runnerpool.domain import Scope
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import GitHubError, NotFound
from runnerpool.github.groups import RepositoryNotAllowed, RunnerGroups
from runnerpool.github.protocol import GitHubClient, GitHubClients
from runnerpool.namespace_access import NamespaceAccess
from runnerpool.reasons import Reason
from runnerpool.tenants import AllowList, GitHubHosts

__all__ = [
    "RUNNER_GROUP_RECHECK",
    "Gate",
    "GitHubHostGate",
    "NamespaceGate",
    "RunnerGroupGate",
    "ScopeGate",
    "Verdict",
]

#: Seconds until a pool whose runner group could not be checked looks again (its answers are
#: cached, see ``runnerpool.github.groups``: most looks cost no request).
RUNNER_GROUP_RECHECK = 60.0


@dataclass(frozen=True)
class Verdict:
    """A gate's answer, as the pool's condition; a closed gate says when to look again
    (``None``: when something changes) and whether the pool's token is to be withdrawn (a gate
    that forbids the operator to write Secrets there says ``False``)."""

    condition: dict[str, Any]
    recheck: float | None = None
    withdraw: bool = True
    #: The id of the pool's runner group, once its gate found it (JIT runners are made in it).
    runner_group_id: int | None = None
    #: No new pod, but the pool's jobs run on: the gate's look-up failed (GitHub down, a
    #: credential refused), which says nothing against the runners that run (their busy pods
    #: are still to be marked).
    keep_jobs: bool = False

    @property
    def open(self) -> bool:
        return bool(self.condition["status"] == "True")


class Gate(Protocol):
    @property
    def on_deletion(self) -> bool:
        """Asked for a pool being deleted too, before its drain reads the caches (the others
        would strand its runners: a pool drains at any scope it once used)."""

    def check(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None: ...

    def refused(self, namespace: str) -> None:
        """The API server refused a write in ``namespace`` (403): forget what was known of it."""

    def released(self, namespace: str) -> None:
        """The namespace's last pool is gone: let go of what was kept for it."""


@dataclass(frozen=True)
class NamespaceGate:
    """The operator may write in the pool's namespace (``runnerpool.namespace_access``): the
    first gate. A namespace that is not enabled gets no Secret write either (``withdraw`` is
    False: the write would be refused), no token job, no runner manager, no GitHub call.

    Asked on deletion too: the check starts the namespace's informers, and a leader that
    starts with the pool already being deleted has none there until it asks; a drain reading
    "no pod" from a namespace not watched would let the pool go under its running runners.
    Where the operator may no longer write, the deletion waits (it could delete no pod)."""

    access: NamespaceAccess
    on_deletion = True

    def check(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None:
        found = self.access.check(pool.namespace)
        return Verdict(found.condition(stamp), recheck=found.recheck, withdraw=found.enabled)

    def refused(self, namespace: str) -> None:
        self.access.forget(namespace)  # enabled no longer? the next pass asks again

    def released(self, namespace: str) -> None:
        self.access.let_go(namespace)


class _NothingPerNamespace:
    """For a gate that keeps nothing per namespace and lets a deleted pool drain (the rules
    it checks may have changed since the pool made its runners)."""

    on_deletion = False

    def refused(self, namespace: str) -> None:
        """Nothing cached per namespace."""

    def released(self, namespace: str) -> None:
        """Nothing kept per namespace."""


@dataclass(frozen=True)
class ScopeGate(_NothingPerNamespace):
    """The namespace may use the pool's scope (``--allow``); no GitHub call at all otherwise."""

    allow: AllowList

    def check(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None:
        if not self.allow.enforced:
            return None
        refusal = self.allow.refusal(pool.namespace, pool.scope)
        if refusal is not None:
            return Verdict(
                stamp.condition(conditions.SCOPE_ALLOWED, False, Reason.SCOPE_NOT_ALLOWED, refusal)
            )
        allowed = f"--allow lets namespace {pool.namespace} use {pool.scope.kind} {pool.scope.name}"
        return Verdict(stamp.condition(conditions.SCOPE_ALLOWED, True, Reason.SCOPE_ALLOWED, allowed))


@dataclass(frozen=True)
class GitHubHostGate(_NothingPerNamespace):
    """The pool's GitHub API URL names a host the operator may call (``--github-api-host``);
    no GitHub call at all otherwise. Said in ``ScopeAllowed`` (where the pool may register);
    an allowed host adds no condition of its own."""

    hosts: GitHubHosts
    api_url_of: Callable[[api.RunnerPool], str]

    def check(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None:
        refusal = self.hosts.refusal(self.api_url_of(pool))
        if refusal is None:
            return None
        return Verdict(
            stamp.condition(conditions.SCOPE_ALLOWED, False, Reason.GITHUB_HOST_NOT_ALLOWED, refusal)
        )


@dataclass(frozen=True)
class RunnerGroupGate(_NothingPerNamespace):
    """``spec.runnerGroup`` exists in the pool's scope and may serve its repositories; a pool
    that names none: the scope's default group may serve them."""

    github: GitHubClients
    default_api_url: str
    #: The groups' answers, cached (most looks cost no request).
    groups: RunnerGroups = field(default_factory=RunnerGroups)

    def check(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None:
        name = pool.spec.runner_group
        if name is None:
            return self._check_default(pool, stamp)
        try:
            client = children.github_client(self.github, pool, self.default_api_url)
            group = self.groups.check(client, pool.scope, name, _served_repositories(pool))
        except (GitHubError, CredentialError) as err:
            wait = err.retry_after or RUNNER_GROUP_RECHECK
            condition = stamp.condition(conditions.RUNNER_GROUP_READY, False, err.reason, err.message)
            # Only GitHub's answer of the group (or of the scope: a 404) closes the pool. A look-up
            # that failed (a 502 or a rate limit with nothing cached, as after a restart or a
            # leader change; a credential refused or missing) stopped its runner manager and
            # emptied its token: the busy pods went unmarked, evictable, and registering pods
            # lost their token.
            answered = isinstance(err, NotFound | RepositoryNotAllowed)
            return Verdict(
                condition,
                recheck=max(wait, RUNNER_GROUP_RECHECK),
                withdraw=answered,
                keep_jobs=not answered,
            )
        message = f"runners join runner group {group.name!r} (id {group.id}) of {pool.scope.name}"
        found = stamp.condition(conditions.RUNNER_GROUP_READY, True, Reason.RUNNER_GROUP_FOUND, message)
        return Verdict(found, runner_group_id=group.id)

    def _check_default(self, pool: api.RunnerPool, stamp: conditions.Stamp) -> Verdict | None:
        """A pool that names no group registers in its scope's default group: closed only when
        GitHub says that group refuses every repository the pool serves (the Default group of
        an enterprise refuses public ones unless told otherwise). One it still serves keeps it
        open: such pools worked before this check, for the repositories the group admits. A
        look-up that fails says nothing: the pool named no group, and must not lose its
        runners to a group listing its credential may not be allowed, or GitHub fails to
        answer. Each repository is looked at alone first: the answers are cached, and a look that
        closes nothing keeps them for their ten minutes."""
        repositories = _served_repositories(pool)
        if pool.scope.repository is not None or not repositories:
            return None
        try:
            client = children.github_client(self.github, pool, self.default_api_url)
            if any(self._default_admits(client, pool.scope, repository) for repository in repositories):
                return None
            self.groups.check_default(client, pool.scope, repositories)  # raises: names them all
        except RepositoryNotAllowed as refused:
            condition = stamp.condition(conditions.RUNNER_GROUP_READY, False, refused.reason, refused.message)
            return Verdict(condition, recheck=RUNNER_GROUP_RECHECK)
        except (GitHubError, CredentialError):
            return None
        return None

    def _default_admits(self, client: GitHubClient, scope: Scope, repository: str) -> bool:
        """Whether the default group admits ``repository`` (a look that closes nothing)."""
        try:
            self.groups.check_default(client, scope, (repository,), refusing=False)
        except RepositoryNotAllowed:
            return False
        return True


def _served_repositories(pool: api.RunnerPool) -> tuple[str, ...]:
    """The repositories (``owner/name``) whose jobs the pool is for, as far as its spec says:
    those it polls; a pool without ``spec.autoscaling.repositories`` names none."""
    listed = pool.spec.autoscaling.repositories if pool.spec.autoscaling else []
    return tuple(repo if "/" in repo else f"{pool.spec.organization}/{repo}" for repo in listed)
