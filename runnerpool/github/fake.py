"""An in-memory ``GitHubClient``, beside the protocol it fakes, for tests of its callers.

It behaves as GitHub documents for the three calls (a busy runner answers "busy" to a
delete, an unknown one "already gone") and records what was asked, so a caller's test can
assert on the requests without HTTP. HTTP-level behaviour (pages, ETags, status codes) is
``runnerpool.github.pygithub``'s and is tested against ``responses`` and the fake server.
Never imported by the operator itself (an import-linter contract says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from runnerpool.domain import Connection, Scope
from runnerpool.github.errors import GitHubError, NotFound
from runnerpool.github.jobs import ActiveJobs, Job
from runnerpool.github.protocol import GitHubClient, GitHubClients
from runnerpool.github.types import (
    DeleteOutcome,
    JitConfig,
    JitRequest,
    RegistrationToken,
    Runner,
    RunnerGroup,
)

__all__ = ["FakeGitHubClient", "FakeGitHubClients"]

#: What ``registration_token`` hands out next: a token, an error to raise, or a callable
#: run at the moment of the request (to interleave something with it).
TokenResult = RegistrationToken | Exception | Callable[[], RegistrationToken]


@dataclass
class FakeGitHubClient:
    """Queued token answers; runners per scope; every request recorded in order."""

    tokens: list[TokenResult] = field(default_factory=list)
    runners: dict[Scope, list[Runner]] = field(default_factory=dict)
    token_requests: list[Scope] = field(default_factory=list)
    deleted: list[tuple[Scope, int]] = field(default_factory=list)
    #: Active jobs per repository (``owner/name``), as ``active_jobs`` lists them.
    jobs: dict[str, list[Job]] = field(default_factory=dict)
    jobs_requests: list[str] = field(default_factory=list)
    #: Runner groups per organization or enterprise scope; a scope not here answers 404.
    groups: dict[Scope, list[RunnerGroup]] = field(default_factory=dict)
    #: Who may use a selected group, by (scope, group id): repositories or organizations.
    members: dict[tuple[Scope, int], list[str]] = field(default_factory=dict)
    #: Every runner-group request: ("groups", scope), ("members", scope) or ("repository",
    #: the repository's scope: whether it is public).
    group_requests: list[tuple[str, Scope]] = field(default_factory=list)
    #: What every runner-group listing raises while set (GitHub down, say).
    groups_failure: GitHubError | None = None
    #: The public repositories (``owner/name``, lower case); every other one is private.
    public: set[str] = field(default_factory=set)
    #: Every generate-jitconfig request, in order; each makes an offline runner in ``runners``.
    jit_requests: list[tuple[Scope, JitRequest]] = field(default_factory=list)
    _next_runner_id: int = 1000

    def generate_jitconfig(self, scope: Scope, request: JitRequest) -> JitConfig:
        """As GitHub: the runner exists, offline, from now on; a name in use is a 409."""
        self.jit_requests.append((scope, request))
        listed = self.runners.setdefault(scope, [])
        if any(r.name == request.name for r in listed):
            raise GitHubError(f"POST generate-jitconfig: HTTP 409 (runner {request.name} exists)", status=409)
        self._next_runner_id += 1
        runner_id = self._next_runner_id
        listed.append(
            Runner(id=runner_id, name=request.name, status="offline", busy=False, labels=request.labels)
        )
        return JitConfig(runner_id=runner_id, encoded=f"jit-{scope}-{request.name}")

    def registration_token(self, scope: Scope) -> RegistrationToken:
        self.token_requests.append(scope)
        if not self.tokens:
            raise AssertionError(f"unexpected registration token request for {scope}")
        result = self.tokens.pop(0)
        if isinstance(result, Exception):
            raise result
        if callable(result):
            return result()
        return result

    def list_runners(self, scope: Scope) -> list[Runner]:
        return list(self.runners.get(scope, []))

    def runners_named(self, scope: Scope, name: str) -> list[Runner]:
        return [r for r in self.runners.get(scope, []) if r.name.lower() == name.lower()]

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome:
        self.deleted.append((scope, runner_id))
        listed = self.runners.get(scope, [])
        runner = next((r for r in listed if r.id == runner_id), None)
        if runner is None:
            return DeleteOutcome.ALREADY_GONE
        if runner.busy:
            return DeleteOutcome.BUSY
        listed.remove(runner)
        return DeleteOutcome.DELETED

    def active_jobs(self, repository: str) -> ActiveJobs:
        self.jobs_requests.append(repository)
        return ActiveJobs(jobs=tuple(self.jobs.get(repository, [])), spent=1)

    def runner_groups(self, scope: Scope) -> list[RunnerGroup]:
        self.group_requests.append(("groups", scope))
        if self.groups_failure is not None:
            raise self.groups_failure
        if scope not in self.groups:
            raise NotFound(f"GET /{scope.path}/actions/runner-groups: HTTP 404 (Not Found)", status=404)
        return list(self.groups[scope])

    def runner_group_members(self, scope: Scope, group_id: int) -> list[str]:
        self.group_requests.append(("members", scope))
        return list(self.members.get((scope, group_id), []))

    def repository_public(self, repository: str) -> bool:
        self.group_requests.append(("repository", Scope(repository=repository)))
        return repository.lower() in self.public


@dataclass
class FakeGitHubClients:
    """``GitHubClients`` handing out one client for every credential Secret."""

    client: GitHubClient = field(default_factory=FakeGitHubClient)
    asked: list[tuple[str, str, str]] = field(default_factory=list)

    def get(
        self, namespace: str, secret_name: str, base_url: str, connection: Connection | None = None
    ) -> GitHubClient:
        self.asked.append((namespace, secret_name, base_url))
        return self.client


def _conforms() -> None:
    """Checked by mypy, never run: the fakes satisfy the protocols they stand in for."""
    github: GitHubClient = FakeGitHubClient()
    clients: GitHubClients = FakeGitHubClients()
    del github, clients
