"""The small interface the operator sees GitHub through.

The reconciler, the runner managers and the secret updater only need a few calls: mint a
registration token (or, for a pool registering just in time, one runner's JIT config), list a
scope's runners (or look one up by name) and delete a runner; the demand poller
(``runnerpool.demand.polling``) adds a fourth, a repository's queued and running jobs, and
the runner-group check (``runnerpool.github.groups``) two more: an organization's or
enterprise's runner groups, and which repositories or organizations a group admits. Keeping them behind
``GitHubClient`` lets tests substitute ``runnerpool.github.fake.FakeGitHub`` without HTTP, and
keeps every PyGithub and ``requests`` exception out of the callers: they only ever see
``GitHubError`` subclasses.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from runnerpool.domain import Connection, Scope
from runnerpool.github.jobs import ActiveJobs
from runnerpool.github.types import (
    DeleteOutcome,
    JitConfig,
    JitRequest,
    RateLimit,
    RegistrationToken,
    Runner,
    RunnerGroup,
)

__all__ = ["GitHubClient", "GitHubClients", "RateLimitAware"]


class GitHubClient(Protocol):
    """The GitHub calls the operator makes. Implementations raise only ``GitHubError``."""

    def registration_token(self, scope: Scope) -> RegistrationToken: ...

    def generate_jitconfig(self, scope: Scope, request: JitRequest) -> JitConfig: ...

    def list_runners(self, scope: Scope) -> list[Runner]: ...

    def runners_named(self, scope: Scope, name: str) -> list[Runner]:
        """The scope's runners called ``name``: one runner looked up without a whole listing."""
        ...

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome: ...

    def active_jobs(self, repository: str) -> ActiveJobs: ...

    def runner_groups(self, scope: Scope) -> list[RunnerGroup]:
        """Every runner group of an organization or enterprise scope (all pages)."""
        ...

    def runner_group_members(self, scope: Scope, group_id: int) -> list[str]:
        """Who may use a ``selected`` group: repositories (``owner/name``) for an organization's
        group, organization logins for an enterprise's."""
        ...

    def repository_public(self, repository: str) -> bool:
        """Whether ``owner/name`` is public (a runner group may refuse public repositories)."""
        ...


@runtime_checkable
class RateLimitAware(Protocol):
    """What a client can tell about its budget; kept out of ``GitHubClient`` so that simple
    stand-ins for the calls stay valid clients."""

    @property
    def credential(self) -> str: ...

    def rate_limit(self) -> RateLimit | None: ...


class GitHubClients(Protocol):
    """One client per credential Secret (``runnerpool.github.credentials.ClientCache``)."""

    def get(
        self, namespace: str, secret_name: str, base_url: str, connection: Connection | None = None
    ) -> GitHubClient: ...
