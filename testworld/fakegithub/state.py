"""Everything the fake GitHub knows, behind one lock, with no HTTP in sight.

The HTTP layer (`server.py`) and the tests' control calls both go through this
class, so a test can change the world (a runner goes busy, a token expires)
while the operator is in the middle of a request, and each side sees a
consistent picture.  Time comes from an injectable clock so expiry and
rate-limit resets can be tested without sleeping.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import string
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any, Literal

from testworld.fakegithub.appjwt import (
    NOT_DECODABLE,
    JWTRejectedError,
    check_app_jwt,
    looks_like_jwt,
    mint_jwt,
)
from testworld.fakegithub.jobs import Bases, Conclusion, Job, job_json, repository_json, run_json, user_json
from testworld.fakegithub.scopes import Scope, ScopeKind
from testworld.fakegithub.webhooks import WebhookSender, workflow_job_payload

DEFAULT_RATE_LIMIT = 5000
UNAUTHENTICATED_RATE_LIMIT = 60
RATE_WINDOW_SECONDS = 3600
TOKEN_LIFETIME_SECONDS = 3600.0
RUNNER_VERSION = "2.323.0"
# GitHub's refusal of a runner older than it accepts (``min_runner_version``): 403 on the
# listener's session, in the words the real runner then prints ("An error occurred: Runner
# version v2.291.1 is deprecated and cannot receive messages.": actions/runner#1991, #2246,
# #3658; "Error: Forbidden Runner version v2.336.0 is deprecated ...": #4613). GitHub refuses
# a runner started with --disableupdate once it is 30 days behind a release.
RUNNER_DEPRECATED = "Runner version v{version} is deprecated and cannot receive messages."
# Registration tokens come back with a Pacific-time offset and milliseconds
# (see the description's example); clients must parse offsets, not assume "Z".
GITHUB_TZ: tzinfo = timezone(timedelta(hours=-8))
# Search has its own small budget; /rate_limit must report it (it is required).
SEARCH_LIMIT = 30
# A listener that has not polled for this long is offline, as GitHub marks a runner
# whose process died without closing its session.
LISTENER_TIMEOUT_SECONDS = 60.0
# The longest a runner's poll for a job is held before "nothing yet" (GitHub holds ~50 s).
MAX_POLL_SECONDS = 50.0
# A job in progress whose runner has not renewed its lock for this long is failed, the
# runner shown offline and idle: GitHub's lock lasts 10 minutes from each renewal, which
# the real runner makes every 60 s (sources: the docstring of `testworld.fakegithub`).
LOST_CONTACT_SECONDS = 600.0
# The runner renews every 60 s of a 600 s lock; the fake tells its stand-ins the same share
# of its own `lost_contact_seconds`, so a healthy stand-in keeps its job under any setting.
RENEWALS_PER_LOCK = 10
LOST_CONTACT_ANNOTATION = (
    "The self-hosted runner: {name} lost communication with the server. Verify the machine is "
    "running and has a healthy network connection. Anything in your workflow that terminates the "
    "runner process, starves it for CPU/Memory, or blocks its network access can cause this error."
)
CONCLUSIONS: tuple[Conclusion, ...] = ("success", "failure", "cancelled")

DeleteOutcome = Literal["deleted", "missing", "busy"]
FaultKind = Literal["fail", "hang", "secondary"]

_OS_LABELS = {"linux": "Linux", "macos": "macOS", "windows": "Windows"}
#: The labels GitHub gives a runner itself (type ``read-only``), however they are spelled.
_BUILTIN_LABELS = ("self-hosted", *_OS_LABELS.values(), "X64", "ARM64", "ARM")
_BASE32 = string.ascii_uppercase + "234567"
#: Where the runner's service (`testworld.fakegithub.actions`) answers, below the web URL.
SERVICE_PATH = "/_actions"
_ALNUM = string.ascii_letters + string.digits


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _positive_seconds(name: str, seconds: float) -> float:
    if not float(seconds) > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.removeprefix("v").split(".") if part.isdigit())


def _older(version: str | None, floor: str | None) -> bool:
    """Whether a runner ``version`` is below ``floor`` (unknown versions and no floor: not)."""
    return bool(version and floor) and _version(str(version)) < _version(str(floor))


class FakeGitHubError(Exception):
    """Base for mistakes made through the control API (not HTTP answers)."""


class UnknownScopeError(FakeGitHubError, LookupError):
    """The organization or repository was never added to the fake."""


class UnknownRunnerError(FakeGitHubError, LookupError):
    """No runner with that id or name is registered in the scope."""


class RegistrationRejectedError(FakeGitHubError, ValueError):
    """The runner's config step would fail: bad, expired or foreign token, or a name clash."""


class AuthRejectedError(FakeGitHubError):
    """The request's credentials would get a 401; ``str(exc)`` is GitHub's message."""


class UnknownJobError(FakeGitHubError, LookupError):
    """No job with that id was queued."""


class ListenerError(FakeGitHubError):
    """A runner's registration or listener call is refused; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _RunnerGroup:
    id: int
    name: str
    visibility: str
    members: tuple[str, ...] = ()
    #: GitHub's default for a new group (and its Default group): public repositories may not.
    allows_public: bool = False


def _default_group() -> _RunnerGroup:
    return _RunnerGroup(1, "Default", "all")


def _group_json(scope: Scope, group: _RunnerGroup, bases: Bases) -> dict[str, Any]:
    """The description's runner group object (organization or enterprise flavour)."""
    url = f"{bases.api}{scope.api_path}/actions/runner_groups/{group.id}"
    out: dict[str, Any] = {
        "id": group.id,
        "name": group.name,
        "visibility": group.visibility,
        "default": group.id == 1,
        "runners_url": f"{url}/runners",
        "allows_public_repositories": group.allows_public,
        "restricted_to_workflows": False,
        "selected_workflows": [],
        "workflow_restrictions_read_only": False,
    }
    if group.visibility == "selected":
        member = "repositories" if scope.kind == "org" else "organizations"
        out[f"selected_{member}_url"] = f"{url}/{member}"
    if scope.kind == "org":
        out["inherited"] = False
    return out


def _organization(login: str, bases: Bases) -> dict[str, Any]:
    """The description's ``Organization Simple``."""
    user = user_json(bases, login)
    url = f"{bases.api}/orgs/{login}"
    return {
        "login": login,
        "id": user["id"],
        "node_id": user["node_id"],
        "url": url,
        "repos_url": f"{url}/repos",
        "events_url": f"{url}/events",
        "hooks_url": f"{url}/hooks",
        "issues_url": f"{url}/issues",
        "members_url": f"{url}/members{{/member}}",
        "public_members_url": f"{url}/public_members{{/member}}",
        "avatar_url": user["avatar_url"],
        "description": None,
    }


@dataclass
class _Runner:
    id: int
    name: str
    scope: Scope
    labels: list[tuple[str, str]]
    os: str
    status: str
    busy: bool
    ephemeral: bool
    version: str | None
    runner_group_id: int
    # Set for runners a runner process registered (config.sh): online only while its
    # listener holds a session, and it starts and completes its jobs itself.  Runners
    # made through the control API have no process, so the fake plays their jobs.
    listener: bool = False
    session: str | None = None
    last_seen: float = 0.0
    polls: int = 0
    job_id: int | None = None
    # A just-in-time runner (generate-jitconfig): its config opens one listener session, ever.
    jit: bool = False
    jit_used: bool = False
    # A runner of a runner scale set (its ``generatejitconfig``): the scale set's jobs only.
    scale_set_id: int | None = None


@dataclass(frozen=True)
class RegistrationToken:
    """A token handed out by the registration-token endpoint, as the fake remembers it."""

    token: str
    scope: Scope
    issued_at: float
    expires_at: float

    def expires_at_text(self) -> str:
        return datetime.fromtimestamp(self.expires_at, GITHUB_TZ).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Installation:
    """A GitHub App installation that may mint tokens."""

    id: int
    app_id: str | None = None
    repository_selection: Literal["all", "selected"] = "all"
    permissions: Mapping[str, str] = field(
        default_factory=lambda: {
            "administration": "write",
            "metadata": "read",
            "organization_self_hosted_runners": "write",
        }
    )


@dataclass(frozen=True)
class InstallationToken:
    """An installation access token minted by ``POST /app/installations/{id}/access_tokens``."""

    token: str
    installation_id: int
    issued_at: float
    expires_at: float
    permissions: Mapping[str, str]
    repository_selection: str

    def expires_at_text(self) -> str:
        return datetime.fromtimestamp(self.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Credential:
    """Who is calling: ``key`` names the rate-limit budget, ``who`` goes in the 403 message.

    Installation tokens share their installation's budget, so refreshing the
    token does not refill it, as on GitHub.
    """

    key: str
    who: str


@dataclass
class RateWindow:
    """One credential's primary rate-limit window."""

    limit: int
    used: int
    reset: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


@dataclass(frozen=True)
class RequestRecord:
    """One API request as the fake answered it.

    ``status`` is 0 when the fake hung and never answered; ``counted`` says
    whether it spent rate-limit budget (304s and /rate_limit do not).
    """

    method: str
    path: str
    query: str
    endpoint: str
    status: int
    conditional: bool
    counted: bool
    credential: str | None
    at: float


@dataclass(frozen=True)
class ListenerRecord:
    """One request of a runner stand-in (the listener protocol), for a failing test to show.

    ``started``/``finished`` are clock times, so a long poll or a report that took
    long is visible; ``runner`` is the runner's name when the credential named one.
    """

    method: str
    path: str
    status: int
    runner: str | None
    started: float
    finished: float


@dataclass
class Fault:
    """A queued misbehaviour, consumed by the next matching request(s)."""

    kind: FaultKind
    remaining: int
    status: int = 502
    body: bytes | None = None
    max_seconds: float = 10.0
    retry_after: int = 60
    method: str | None = None
    path: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method.upper() != method:
            return False
        return self.path is None or self.path in path


class GitHubState:
    """The fake's world and its control API; `FakeGitHub` adds the HTTP server.

    Scopes must be added before the API knows them (GitHub answers 404 for an
    organization or repository that does not exist), unless ``auto_create``
    is set, which also makes any installation id valid.  ``tokens`` is the set
    of accepted PATs; ``None`` accepts any non-empty credential.  Installation
    tokens the fake minted are always accepted until they expire.
    """

    def __init__(
        self,
        *,
        scopes: Iterable[str] = (),
        installations: Iterable[int] = (),
        auto_create: bool = False,
        tokens: Iterable[str] | None = None,
        rate_limit: int = DEFAULT_RATE_LIMIT,
        rate_window: int = RATE_WINDOW_SECONDS,
        primary_limit_status: int = 403,
        registration_token_lifetime: float = TOKEN_LIFETIME_SECONDS,
        installation_token_lifetime: float = TOKEN_LIFETIME_SECONDS,
        app_keys: Mapping[str, str | bytes] | None = None,
        listener_timeout: float = LISTENER_TIMEOUT_SECONDS,
        lost_contact_seconds: float = LOST_CONTACT_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._initial_scopes = tuple(scopes)
        self._initial_installations = tuple(installations)
        self._initial_tokens = None if tokens is None else frozenset(tokens)
        self.auto_create = auto_create
        self.rate_window = rate_window
        self.primary_limit_status = primary_limit_status
        self.registration_token_lifetime = registration_token_lifetime
        self.installation_token_lifetime = installation_token_lifetime
        self.app_keys = None if app_keys is None else {str(k): v for k, v in app_keys.items()}
        self.clock = clock
        self.listener_timeout = listener_timeout
        self._lost_contact_seconds = _positive_seconds("lost_contact_seconds", lost_contact_seconds)
        #: The oldest runner version whose listener may open a session (``None``: any), as
        #: GitHub refuses outdated runners (`RUNNER_DEPRECATED`); set it at any time.
        self.min_runner_version: str | None = None
        self._initial_rate_limit = rate_limit
        # Bumped by reset() and stop() so hanging handlers let go.
        self._generation = 0
        # Webhooks outlive reset(), like a repository's hook settings outlive its jobs.
        self._webhooks: list[Callable[[dict[str, Any]], None]] = []
        #: ``send_webhooks``' hooks: signed deliveries over HTTP, one GUID per event for all.
        self._senders: list[WebhookSender] = []
        # What else forgets its world on reset() (the scale set service), called after it.
        self._reset_hooks: list[Callable[[], None]] = []
        # Told of every job change under the lock (the scale set service follows its jobs).
        self._job_hooks: list[Callable[[Job], None]] = []
        # Told (under the lock) when a runner process's listener asks for a job (the scale set
        # service then offers it one its scale set was assigned).
        self._poll_hooks: list[Callable[[_Runner], None]] = []
        # Told (under the lock) when held requests must let go (`release_hangs`, `stop`).
        self._release_hooks: list[Callable[[], None]] = []
        self._reset_state()

    def _reset_state(self) -> None:
        self._scopes: dict[tuple[str, str], Scope] = {}
        self._runners: dict[int, _Runner] = {}
        self._runner_ids = itertools.count(1)
        self._label_ids: dict[str, int] = {}
        self._registration_tokens: dict[str, RegistrationToken] = {}
        self._token_uses: Counter[str] = Counter()
        self._installations: dict[int, Installation] = {}
        self._installation_tokens: dict[str, InstallationToken] = {}
        self._accepted: set[str] | None = None if self._initial_tokens is None else set(self._initial_tokens)
        self._default_limit = self._initial_rate_limit
        self._limits: dict[str, int] = {}
        self._windows: dict[str, RateWindow] = {}
        self._user_ids: dict[str, int] = {}
        self._faults: list[Fault] = []
        self._latency = 0.0
        self._hanging = 0
        self._log: list[RequestRecord] = []
        self._listener_log: list[ListenerRecord] = []
        self._jobs: dict[int, Job] = {}
        self._open_jobs: dict[int, Job] = {}
        # Ids in the ranges of the description's examples, so a run id is never a job id.
        self._job_ids = itertools.count(399444496)
        self._run_ids = itertools.count(30433642)
        self._run_numbers: Counter[tuple[str, str]] = Counter()
        self._tenants: dict[str, str] = {}
        self._credentials: dict[str, int] = {}
        self._sessions: dict[str, int] = {}
        self._groups: dict[tuple[str, str], list[_RunnerGroup]] = {}
        #: Public repositories (``owner/name``, lower case); every other one is private.
        self._public: set[str] = set()
        self._group_ids = itertools.count(2)
        for scope in self._initial_scopes:
            self.add_scope(scope)
        for installation_id in self._initial_installations:
            self.add_installation(installation_id)

    def _notify(self) -> None:
        self._changed.notify_all()

    @property
    def lost_contact_seconds(self) -> float:
        """How long a job in progress lives without a renewal of its lock (GitHub: 600 s).

        Settable at any time, also while jobs run; tests make it a few seconds.
        """
        return self._lost_contact_seconds

    @lost_contact_seconds.setter
    def lost_contact_seconds(self, seconds: float) -> None:
        checked = _positive_seconds("lost_contact_seconds", seconds)
        with self._lock:
            self._lost_contact_seconds = checked
            self._tick()
            self._notify()

    # ----------------------------------------------------------------- control: world

    def reset(self) -> None:
        """Forget runners, tokens, budgets, faults, the request log and scale sets; keep
        constructor settings."""
        with self._lock:
            self._generation += 1
            self._reset_state()
            self._notify()
            hooks = list(self._reset_hooks)
        # Outside the lock: the scale set service takes its own lock first, then this one.
        for hook in hooks:
            hook()

    def on_reset(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` after every `reset` (without the fake's lock held)."""
        with self._lock:
            self._reset_hooks.append(hook)

    def add_scope(
        self,
        scope: str | None = None,
        *,
        org: str | None = None,
        repo: str | None = None,
        enterprise: str | None = None,
    ) -> Scope:
        """Make an organization, repository or enterprise exist; adding it twice is harmless."""
        given = [value for value in (scope, org, repo) if value is not None]
        if enterprise is not None:
            given.append(f"enterprises/{enterprise}")
        if len(given) != 1:
            raise ValueError("give exactly one of scope, org=, repo= or enterprise=")
        parsed = Scope.parse(given[0])
        if org is not None and parsed.kind != "org":
            raise ValueError(f"not an organization: {org!r}")
        if repo is not None and parsed.kind != "repo":
            raise ValueError(f"not owner/repo: {repo!r}")
        with self._lock:
            existing = self._scopes.setdefault(parsed.key, parsed)
            self._notify()
            return existing

    def add_runner_group(
        self,
        scope: str | Scope,
        name: str,
        *,
        visibility: str = "all",
        members: Iterable[str] = (),
        allows_public: bool = False,
    ) -> int:
        """A runner group of an organization or enterprise (scope as ``add_scope`` made it);
        ``members``: the repositories (``owner/name``) or organizations a ``selected`` group
        admits; ``allows_public``: its "Allow public repositories" (off, as on GitHub). Returns
        the group's id (1 is every scope's ``Default`` group)."""
        with self._lock:
            found = self._scope(scope)
            if found.kind == "repo":
                raise ValueError(f"a repository has no runner groups: {found.name!r}")
            groups = self._groups.setdefault(found.key, [_default_group()])
            group = _RunnerGroup(next(self._group_ids), name, visibility, tuple(members), allows_public)
            groups.append(group)
            self._notify()
            return group.id

    def make_public(self, repository: str) -> None:
        """``owner/name`` is public from now on (a repository is private unless made so)."""
        with self._lock:
            self._public.add(repository.lower())

    def scopes(self) -> list[Scope]:
        with self._lock:
            return list(self._scopes.values())

    def _scope(self, scope: str | Scope) -> Scope:
        parsed = Scope.parse(scope)
        found = self._scopes.get(parsed.key)
        if found is None:
            raise UnknownScopeError(f"scope {parsed.name!r} was not added to the fake")
        return found

    def _label_id(self, name: str) -> int:
        return self._label_ids.setdefault(name.lower(), len(self._label_ids) + 1)

    def _find_runner(self, scope: Scope, runner: int | str) -> _Runner:
        for candidate in self._runners.values():
            if candidate.scope.key != scope.key:
                continue
            if isinstance(runner, int) and candidate.id == runner:
                return candidate
            if isinstance(runner, str) and candidate.name.lower() == runner.lower():
                return candidate
        raise UnknownRunnerError(f"no runner {runner!r} in {scope.name}")

    def _runner_json(self, runner: _Runner) -> dict[str, Any]:
        return {
            "id": runner.id,
            "name": runner.name,
            "os": runner.os,
            "status": runner.status,
            "busy": runner.busy,
            "ephemeral": runner.ephemeral,
            "runner_group_id": runner.runner_group_id,
            "version": runner.version,
            "labels": [
                {"id": self._label_id(name), "name": name, "type": kind} for name, kind in runner.labels
            ],
        }

    def register_runner(
        self,
        scope: str | Scope,
        name: str,
        labels: Iterable[str] = (),
        *,
        status: Literal["online", "offline"] = "online",
        busy: bool = False,
        ephemeral: bool = False,
        os: str = "linux",
        version: str | None = RUNNER_VERSION,
        replace: bool = True,
        default_labels: bool = True,
    ) -> int:
        """Add a runner as ``config.sh`` would; returns its id.

        ``config.sh`` adds ``self-hosted`` and the OS and architecture labels to the ones it is
        given; a JIT runner (``default_labels=False``) has the labels it was made with only, as
        generate-jitconfig's ``labels`` ("the custom labels to add", whose documented example
        names ``self-hosted`` and ``X64`` itself) says. Those names are ``read-only`` labels.

        With ``replace`` (what ``config.sh --replace`` does) a runner with the
        same name is removed and the new one gets a fresh id; without it the
        clash is refused like the real config step refuses it.
        """
        with self._lock:
            found = self._scope(scope)
            try:
                old = self._find_runner(found, name)
            except UnknownRunnerError:
                pass
            else:
                if not replace:
                    raise RegistrationRejectedError(f"A runner exists with the same name {name!r}.")
                self._forget_runner(old)
            builtin = ["self-hosted", _OS_LABELS.get(os.lower(), os), "X64"]
            if not default_labels:
                given = {label.lower() for label in labels}
                builtin = [b for b in _BUILTIN_LABELS if b.lower() in given]
            seen = {label.lower() for label in builtin}
            custom: list[str] = []
            for label in labels:
                if label.lower() not in seen:
                    seen.add(label.lower())
                    custom.append(label)
            runner = _Runner(
                id=next(self._runner_ids),
                name=name,
                scope=found,
                labels=[(label, "read-only") for label in builtin] + [(label, "custom") for label in custom],
                os=os.lower(),
                status=status,
                busy=busy,
                ephemeral=ephemeral,
                version=version,
                runner_group_id=1,
            )
            self._runners[runner.id] = runner
            self._notify()
            return runner.id

    def register_runner_with_token(
        self,
        scope: str | Scope,
        token: str,
        name: str,
        labels: Iterable[str] = (),
        *,
        ephemeral: bool = False,
        replace: bool = True,
    ) -> int:
        """Register the way a runner pod does: only with a live token issued for this scope.

        End-to-end tests call this (or ``POST /_fake/register``) with whatever
        token the operator delivered, which proves the delivery worked.
        Tokens stay reusable until they expire, like GitHub's.
        """
        with self._lock:
            found = self._scope(scope)
            issued = self._registration_tokens.get(token)
            if issued is None:
                raise RegistrationRejectedError("registration token is not one the fake issued")
            if issued.scope.key != found.key:
                raise RegistrationRejectedError(
                    f"registration token was issued for {issued.scope.name}, not {found.name}"
                )
            if self.clock() >= issued.expires_at:
                raise RegistrationRejectedError(f"registration token expired at {issued.expires_at_text()}")
            runner_id = self.register_runner(found, name, labels, ephemeral=ephemeral, replace=replace)
            self._token_uses[token] += 1
            return runner_id

    def set_runner(
        self,
        scope: str | Scope,
        runner: int | str,
        *,
        status: Literal["online", "offline"] | None = None,
        busy: bool | None = None,
    ) -> dict[str, Any]:
        """Change what GitHub reports for a runner (it went offline, picked up a job...)."""
        with self._lock:
            found = self._find_runner(self._scope(scope), runner)
            if status is not None:
                found.status = status
            if busy is not None:
                found.busy = busy
            self._notify()
            return self._runner_json(found)

    def complete_job(self, scope: str | Scope, runner: int | str) -> None:
        """End the runner's job: it goes idle, or disappears if it was ephemeral (as on GitHub).

        A queued job the runner took completes with ``success``.
        """
        with self._lock:
            found = self._find_runner(self._scope(scope), runner)
            if found.job_id is not None:
                self._finish(self._jobs[found.job_id], "success")
            elif found.ephemeral:
                self._forget_runner(found)
            else:
                found.busy = False
            self._notify()

    def remove_runner(self, scope: str | Scope, runner: int | str) -> None:
        """Drop a runner without an API call, like GitHub's own clean-up of stale runners."""
        with self._lock:
            self._forget_runner(self._find_runner(self._scope(scope), runner))
            self._notify()

    def runners(self, scope: str | Scope) -> list[dict[str, Any]]:
        """The scope's runners, shaped exactly as the list endpoint returns them."""
        with self._lock:
            self._tick()
            found = self._scope(scope)
            return [self._runner_json(r) for r in self._runners.values() if r.scope.key == found.key]

    def runner(self, scope: str | Scope, runner: int | str) -> dict[str, Any]:
        with self._lock:
            self._tick()
            return self._runner_json(self._find_runner(self._scope(scope), runner))

    def tokens_issued(self, scope: str | Scope) -> list[RegistrationToken]:
        """Registration tokens handed out for the scope, oldest first."""
        with self._lock:
            key = Scope.parse(scope).key
            return [t for t in self._registration_tokens.values() if t.scope.key == key]

    def token_uses(self, token: str) -> int:
        """How many runners registered with this registration token."""
        with self._lock:
            return self._token_uses[token]

    def add_installation(
        self,
        installation_id: int,
        *,
        app_id: str | int | None = None,
        repository_selection: Literal["all", "selected"] = "all",
        permissions: Mapping[str, str] | None = None,
    ) -> Installation:
        """Let an App installation mint tokens; with ``app_id``, only that App's JWTs may."""
        installation = Installation(
            id=installation_id,
            app_id=None if app_id is None else str(app_id),
            repository_selection=repository_selection,
        )
        if permissions is not None:
            installation = replace(installation, permissions=dict(permissions))
        with self._lock:
            self._installations[installation_id] = installation
            self._notify()
            return installation

    def installation_tokens(self, installation_id: int | None = None) -> list[InstallationToken]:
        with self._lock:
            return [
                t
                for t in self._installation_tokens.values()
                if installation_id is None or t.installation_id == installation_id
            ]

    def accept_token(self, token: str) -> None:
        """Add a PAT to the accepted set (switching from accept-any to a fixed set if needed)."""
        with self._lock:
            if self._accepted is None:
                self._accepted = set()
            self._accepted.add(token)

    def revoke_token(self, token: str) -> None:
        """Make a PAT or minted installation token answer 401 from now on."""
        with self._lock:
            if self._accepted is None:
                self._accepted = set()
            self._accepted.discard(token)
            self._installation_tokens.pop(token, None)

    # ----------------------------------------------------------------- control: jobs

    def queue_job(
        self,
        scope: str | Scope,
        labels: Iterable[str],
        duration_s: float,
        *,
        name: str = "build",
        workflow_name: str = "CI",
        script: str | None = None,
    ) -> int:
        """Queue a ``workflow_job`` with these ``runs-on`` labels in a repository; returns its id.

        A job always belongs to a repository (``owner/repo``, added to the fake if it
        was not), so the repository's runners and those of its owner organization can
        take it.  It is offered to the first idle online runner whose labels contain
        all of the job's (ignoring case), runs ``duration_s`` seconds and completes
        with ``success``; a runner process (see ``actions.py``) starts and completes it
        itself, a runner made through the control API has it played by the fake.
        ``script`` (one line of shell) is what a runner process runs as the job's steps.
        """
        parsed = Scope.parse(scope)
        if script is not None and ("\n" in script or not script.strip()):
            raise ValueError(f"a job's script is one non-empty line of shell, got {script!r}")
        if parsed.kind != "repo":
            raise ValueError(f"a job belongs to a repository (owner/repo), not {parsed.name!r}")
        wanted = [str(label) for label in labels]
        if not wanted or not all(label.strip() for label in wanted):
            raise ValueError(f"a job needs non-empty runs-on labels, got {wanted!r}")
        if duration_s < 0:
            raise ValueError(f"duration_s must not be negative, got {duration_s}")
        with self._lock:
            repo = self.add_scope(repo=parsed.name)
            self._run_numbers[repo.key] += 1
            job = Job(
                id=next(self._job_ids),
                run_id=next(self._run_ids),
                run_number=self._run_numbers[repo.key],
                repo=repo,
                labels=wanted,
                duration_s=float(duration_s),
                name=name,
                workflow_name=workflow_name,
                created_at=self.clock(),
                script=script,
            )
            self._jobs[job.id] = job
            self._open_jobs[job.id] = job
            self._job_event(job)
            self._tick()
            self._notify()
            return job.id

    def job(self, job_id: int) -> dict[str, Any]:
        """The job as ``GET /repos/{owner}/{repo}/actions/jobs/{job_id}`` shows it."""
        with self._lock:
            self._tick()
            found = self._jobs.get(job_id)
            if found is None:
                raise UnknownJobError(f"no job {job_id} was queued")
            return job_json(self._bases(), found)

    def jobs(self, scope: str | Scope | None = None) -> list[dict[str, Any]]:
        """Every job, or a repository's, oldest first."""
        with self._lock:
            self._tick()
            key = None if scope is None else Scope.parse(scope).key
            bases = self._bases()
            return [job_json(bases, j) for j in self._jobs.values() if key is None or j.repo.key == key]

    def listening(self, scope: str | Scope, runner: int | str) -> bool:
        """Whether the runner's process is in a long poll for a job right now."""
        with self._lock:
            return self._find_runner(self._scope(scope), runner).polls > 0

    def on_job_event(self, hook: Callable[[dict[str, Any]], None]) -> None:
        """Call ``hook`` with the ``workflow_job`` payload whenever a job is queued, starts or
        completes; it runs under the fake's lock, at the moment of the change, and must not block."""
        with self._lock:
            self._webhooks.append(hook)

    def remove_job_event(self, hook: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            if hook in self._webhooks:
                self._webhooks.remove(hook)

    def send_webhooks(self, url: str, secret: bytes) -> WebhookSender:
        """From now on, deliver a signed ``workflow_job`` event to ``url`` whenever a job is
        queued, starts or completes (see ``webhooks``); ``stop_webhooks`` ends it."""
        sender = WebhookSender(url, secret)
        with self._lock:
            self._senders.append(sender)
        return sender

    def stop_webhooks(self, sender: WebhookSender) -> None:
        with self._lock:
            if sender in self._senders:
                self._senders.remove(sender)
        sender.close()

    def _job_event(self, job: Job) -> None:
        """A job changed state (under the lock): queue its delivery to every webhook."""
        for follow in self._job_hooks:
            follow(job)
        if not self._webhooks and not self._senders:
            return
        bases = self._bases()
        repository = repository_json(bases, job.repo)
        sender = {**repository["owner"], "type": "User"}
        payload = workflow_job_payload(job.status, job_json(bases, job), repository, sender)
        for hook in self._webhooks:
            hook(payload)
        event = str(uuid.uuid4())  # one GUID per event, every hook's delivery of it
        for webhook in self._senders:
            webhook(payload, event)

    def _bases(self) -> Bases:
        """Where links in job and run bodies point; `FakeGitHub` points them at itself."""
        return Bases(api="https://api.github.com", web="https://github.com")

    # ----------------------------------------------------------------- jobs: the lifecycle

    def _tick(self) -> None:
        """Bring the world up to the clock: jobs whose runner went silent fail, stale listeners go
        offline, played jobs end, jobs get runners.

        Called (under the lock) by every read and write that can see jobs or runners,
        so time-driven changes need no thread and follow an injected clock.
        """
        now = self.clock()
        changed = False
        for job in list(self._open_jobs.values()):
            if job.status != "in_progress" or job.started_at is None:
                continue
            runner = self._runners.get(job.assigned_to or 0)
            if runner is None:
                continue
            if not runner.listener and now >= job.started_at + job.duration_s:
                self._finish(job, "success")
                changed = True
            elif runner.listener and now >= self._lock_expiry(job):
                self._lose_contact(job, runner)
                changed = True
        for runner_id in list(self._sessions.values()):
            runner = self._runners.get(runner_id)
            if runner is not None and self._listener_silent(runner, now):
                self._go_offline(runner)
                changed = True
        if self._assign(now) or changed:
            self._notify()

    def _lock_expiry(self, job: Job) -> float:
        return (job.renewed_at or job.started_at or job.created_at) + self._lost_contact_seconds

    def _listener_silent(self, runner: _Runner, now: float) -> bool:
        """An idle listener that stopped polling is offline; a busy one is judged by its job's lock."""
        if runner.polls > 0 or now - runner.last_seen <= self.listener_timeout:
            return False
        job = None if runner.job_id is None else self._jobs.get(runner.job_id)
        return job is None or job.status != "in_progress"

    def _lose_contact(self, job: Job, runner: _Runner) -> None:
        """GitHub gave up on the job's runner: the job fails when its lock ran out, the runner is
        offline and idle, and stays registered (ephemeral or not) until someone deletes it."""
        runner.job_id, runner.busy = None, False
        self._go_offline(runner)
        job.annotations.append(LOST_CONTACT_ANNOTATION.format(name=runner.name))
        self._finish(job, "failure", at=self._lock_expiry(job))

    def _assign(self, now: float) -> bool:
        assigned = False
        for job in self._open_jobs.values():
            if job.assigned_to is not None:
                continue
            runner = next((r for r in self._runners.values() if self._can_take(r, job)), None)
            if runner is None:
                continue
            job.assigned_to, runner.job_id = runner.id, job.id
            if not runner.listener:
                self._start(job, runner, now)
            assigned = True
        return assigned

    @staticmethod
    def _can_take(runner: _Runner, job: Job) -> bool:
        if runner.status != "online" or runner.busy or runner.job_id is not None:
            return False
        if runner.scale_set_id is not None:  # takes only what its scale set assigns
            return False
        if runner.scope.kind == "repo":
            in_scope = runner.scope.key == job.repo.key
        else:
            in_scope = job.repo.name.split("/")[0].lower() == runner.scope.name.lower()
        return in_scope and job.wants([name for name, _kind in runner.labels])

    def _start(self, job: Job, runner: _Runner, now: float) -> None:
        job.status, job.started_at, job.renewed_at = "in_progress", now, now
        job.runner_id, job.runner_name, job.runner_group_id = runner.id, runner.name, runner.runner_group_id
        runner.busy = True
        self._job_event(job)

    def _finish(self, job: Job, conclusion: Conclusion, *, at: float | None = None) -> None:
        """Complete a job (now, or ``at``); its runner goes idle, or is removed if ephemeral, as
        GitHub does."""
        job.status, job.conclusion = "completed", conclusion
        job.completed_at = self.clock() if at is None else at
        self._open_jobs.pop(job.id, None)
        self._job_event(job)
        runner = self._runners.get(job.assigned_to or 0)
        if runner is None or runner.job_id != job.id:
            return
        runner.job_id, runner.busy = None, False
        if runner.ephemeral:
            self._forget_runner(runner)

    def _release(self, runner: _Runner) -> None:
        """The runner will not run its job: an offered job is queued again, a running one fails."""
        if runner.job_id is None:
            return
        job = self._jobs[runner.job_id]
        if job.status == "queued":
            job.assigned_to, runner.job_id = None, None
        else:
            # GitHub fails a job whose runner lost communication.
            self._finish(job, "failure")

    def _go_offline(self, runner: _Runner) -> None:
        if runner.session is not None:
            self._sessions.pop(runner.session, None)
        runner.session, runner.status = None, "offline"
        if runner.job_id is not None and self._jobs[runner.job_id].status == "queued":
            self._release(runner)

    def _forget_runner(self, runner: _Runner) -> None:
        self._runners.pop(runner.id, None)
        if runner.session is not None:
            self._sessions.pop(runner.session, None)
            runner.session = None
        self._release(runner)

    # ----------------------------------------------------------------- jobs: the REST listings

    def api_list_runs(self, repo: Scope, bases: Bases, status: str | None = None) -> list[dict[str, Any]]:
        """Newest first, as GitHub lists runs; ``status`` matches a status or a conclusion."""
        with self._lock:
            self._tick()
            runs = [
                run_json(bases, job)
                for job in reversed(self._jobs.values())
                if job.repo.key == repo.key and status in (None, job.status, job.conclusion)
            ]
            return runs

    def api_run_jobs(self, repo: Scope, bases: Bases, run_id: int) -> list[dict[str, Any]] | None:
        with self._lock:
            self._tick()
            found = [
                job_json(bases, j)
                for j in self._jobs.values()
                if j.run_id == run_id and j.repo.key == repo.key
            ]
            return found or None

    def api_repository(self, owner: str, name: str, bases: Bases) -> dict[str, Any] | None:
        """``GET /repos/{owner}/{repo}``: the repository object (the fields the operator reads,
        and its identity); ``None`` (404) unless the repository or its organization was added."""
        full = f"{owner}/{name}"
        if self.api_scope("repo", full) is None and self.api_scope("org", owner) is None:
            return None
        with self._lock:
            public = full.lower() in self._public
        return {
            "id": zlib.crc32(full.lower().encode()),
            "name": name,
            "full_name": full,
            "owner": {"login": owner},
            "private": not public,
            "visibility": "public" if public else "private",
            "url": f"{bases.api}/repos/{full}",
            "html_url": f"{bases.web}/{full}",
        }

    def api_get_job(self, repo: Scope, bases: Bases, job_id: int) -> dict[str, Any] | None:
        with self._lock:
            self._tick()
            job = self._jobs.get(job_id)
            return None if job is None or job.repo.key != repo.key else job_json(bases, job)

    # ----------------------------------------------------------------- jobs: runner processes

    def runner_registration(self, authorization: str | None, url: str) -> str:
        """``POST /actions/runner-registration``: trade a registration token for a tenant credential.

        Refused as GitHub refuses it: 401 without ``RemoteAuth``, 404 for a token that
        is unknown, expired, or issued for another repository or organization.
        """
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "remoteauth" or not token.strip():
            raise ListenerError(401, "Requires authentication")
        token = token.strip()
        with self._lock:
            issued = self._registration_tokens.get(token)
            try:
                wanted = Scope.parse(url)
            except ValueError:
                raise ListenerError(404, "Not Found") from None
            if issued is None or issued.scope.key != wanted.key or self.clock() >= issued.expires_at:
                raise ListenerError(404, "Not Found")
            # GitHub's tenant credential is a JWT whose ``exp`` the scale set client reads; here
            # it lasts as long as the registration token it was traded for.
            tenant = mint_jwt({"exp": int(issued.expires_at), "jti": secrets.token_urlsafe(12)})
            self._tenants[tenant] = token
            return tenant

    def listener_register(
        self,
        tenant: str,
        name: str,
        labels: Iterable[str],
        *,
        ephemeral: bool,
        replace: bool,
        runner_group: str = "",
        version: str = "",
    ) -> tuple[int, str]:
        """Add the runner of a configured runner process; it stays offline until a session opens.

        ``runner_group`` (``config.sh --runnergroup``): the group it joins, by name compared
        case-insensitively as the runner does; a name the scope has no group of fails as the
        real runner's configuration fails. Empty: the default group."""
        with self._lock:
            token = self._tenants.get(tenant)
            if token is None:
                raise ListenerError(401, "unknown tenant credential")
            if not name:
                raise ValueError("a runner needs a name")
            scope = self._registration_tokens[token].scope
            groups = self._groups.get(scope.key) or [_default_group()]
            group = next((g for g in groups if g.name.lower() == runner_group.lower()), None)
            if runner_group and group is None:
                raise ListenerError(
                    404, f"Could not find any self-hosted runner group named {runner_group!r}."
                )
            try:
                runner_id = self.register_runner_with_token(
                    scope, token, name, labels, ephemeral=ephemeral, replace=replace
                )
            except RegistrationRejectedError as exc:
                raise ListenerError(409 if "same name" in str(exc) else 401, str(exc)) from None
            runner = self._runners[runner_id]
            runner.listener, runner.status = True, "offline"
            runner.runner_group_id = group.id if group is not None else 1
            runner.version = version or runner.version
            credential = secrets.token_urlsafe(24)
            self._credentials[credential] = runner_id
            self._notify()
            return runner_id, credential

    def _listener(self, credential: str) -> _Runner:
        runner = self._runners.get(self._credentials.get(credential, 0))
        if runner is None:
            # GitHub revokes a deleted runner's credentials.
            raise ListenerError(401, "runner credential is not valid (the runner is not registered)")
        return runner

    def listener_open_session(self, credential: str, version: str = "") -> str:
        """The runner's listener starts: the runner is online and may be offered jobs.

        A JIT runner's config is single-use: its first listener opens a session, a second run
        with the same config is refused (409), whether or not the first is still running.
        A runner older than ``min_runner_version`` (the ``version`` it reports, else the one
        it registered with) is refused with 403 and GitHub's words, and stays offline.
        """
        with self._lock:
            runner = self._listener(credential)
            runner.version = version or runner.version
            if _older(runner.version, self.min_runner_version):
                raise ListenerError(403, RUNNER_DEPRECATED.format(version=runner.version))
            if runner.jit:
                if runner.jit_used:
                    raise ListenerError(
                        409, f"the JIT config of runner {runner.name!r} has been used already"
                    )
                runner.jit_used = True
            if runner.session is not None:
                self._sessions.pop(runner.session, None)
            runner.session = secrets.token_urlsafe(16)
            self._sessions[runner.session] = runner.id
            runner.status, runner.last_seen = "online", self.clock()
            self._tick()
            self._notify()
            return runner.session

    def listener_close_session(self, credential: str, session: str) -> None:
        """The listener stops: the runner is offline (still registered, as with the real runner)."""
        with self._lock:
            runner = self._listener(credential)
            if runner.session != session:
                raise ListenerError(404, "no such session")
            self._go_offline(runner)
            self._tick()
            self._notify()

    def listener_poll(self, credential: str, session: str, wait: float) -> Job | None:
        """Hold the listener's poll until a job is offered to it, or ``wait`` seconds pass.

        Returns a copy of the offered job.  `reset`/`stop` let go of polls at once.
        """
        deadline = time.monotonic() + min(max(wait, 0.0), MAX_POLL_SECONDS)
        with self._changed:
            runner = self._listener(credential)
            if runner.session != session:
                raise ListenerError(404, "no such session")
            generation = self._generation
            runner.polls += 1
            try:
                while True:
                    self._tick()
                    if runner.session != session or self._runners.get(runner.id) is not runner:
                        raise ListenerError(404, "the session ended")
                    for hook in self._poll_hooks:
                        hook(runner)
                    job = None if runner.job_id is None else self._jobs[runner.job_id]
                    if job is not None and job.status == "queued":
                        return replace(job, labels=list(job.labels), annotations=[])
                    left = deadline - time.monotonic()
                    if left <= 0 or generation != self._generation:
                        return None
                    self._changed.wait(min(left, 0.5))
            finally:
                runner.polls -= 1
                runner.last_seen = self.clock()

    def _listener_job(self, credential: str, job_id: int) -> tuple[_Runner, Job]:
        runner = self._listener(credential)
        job = self._jobs.get(job_id)
        if job is None or job.assigned_to != runner.id or runner.job_id != job_id:
            raise ListenerError(404, f"job {job_id} is not assigned to runner {runner.name}")
        return runner, job

    def listener_job_started(self, credential: str, job_id: int) -> None:
        """The runner took its offered job: the job is in_progress and the runner busy."""
        with self._lock:
            self._tick()
            runner, job = self._listener_job(credential, job_id)
            if job.status == "queued":
                self._start(job, runner, self.clock())
                self._notify()

    def listener_renew_job(self, credential: str, job_id: int) -> tuple[float, float]:
        """The runner renews its running job's lock (the real runner's ``renewjob``).

        Returns when the lock now runs out and how soon to renew again.  A job that is not
        the runner's running one (completed, failed for lost contact, never started) is a
        404, on which the real runner stops renewing.
        """
        with self._lock:
            self._tick()
            runner, job = self._listener_job(credential, job_id)
            if job.status != "in_progress":
                raise ListenerError(404, f"job {job_id} is not running")
            now = self.clock()
            job.renewed_at = runner.last_seen = now
            self._notify()
            return self._lock_expiry(job), self._lost_contact_seconds / RENEWALS_PER_LOCK

    def annotations(self, job_id: int) -> list[str]:
        """What GitHub's page of the job shows above its log (why GitHub failed it)."""
        with self._lock:
            self._tick()
            found = self._jobs.get(job_id)
            if found is None:
                raise UnknownJobError(f"no job {job_id} was queued")
            return list(found.annotations)

    def summary(self, job_id: int) -> str:
        """The job's summary (what its steps wrote to ``$GITHUB_STEP_SUMMARY``), empty without one."""
        with self._lock:
            found = self._jobs.get(job_id)
            if found is None:
                raise UnknownJobError(f"no job {job_id} was queued")
            return found.summary

    def listener_job_completed(
        self, credential: str, job_id: int, conclusion: str, summary: str = ""
    ) -> None:
        """The runner finished its job; an ephemeral runner is removed, as GitHub does."""
        if conclusion not in CONCLUSIONS:
            raise ValueError(f"conclusion must be one of {', '.join(CONCLUSIONS)}, got {conclusion!r}")
        with self._lock:
            self._tick()
            runner, job = self._listener_job(credential, job_id)
            if job.status == "queued":
                self._start(job, runner, self.clock())
            runner.last_seen = self.clock()
            job.summary = summary
            self._finish(job, conclusion)
            self._tick()
            self._notify()

    # ----------------------------------------------------------------- control: rate limits

    def _budget_key(self, token: str) -> str:
        installation = self._installation_tokens.get(token)
        return f"installation:{installation.installation_id}" if installation else f"token:{token}"

    def set_rate_limit(self, limit: int, *, token: str | None = None) -> None:
        """Change the hourly budget of one credential, or the default and every current window."""
        with self._lock:
            if token is None:
                self._default_limit = limit
                for window in self._windows.values():
                    window.limit = limit
            else:
                key = self._budget_key(token)
                self._limits[key] = limit
                if key in self._windows:
                    self._windows[key].limit = limit
            self._notify()

    def set_remaining(self, remaining: int, *, token: str | None = None) -> None:
        """Pretend part of the budget is spent: for one credential, or every one seen so far."""
        with self._lock:
            keys = list(self._windows) if token is None else [self._budget_key(token)]
            for key in keys:
                window = self._window(key)
                window.used = max(0, window.limit - remaining)
            self._notify()

    def rate_limit_status(self, token: str) -> RateWindow:
        """A copy of the credential's current window (what ``x-ratelimit-*`` would say)."""
        with self._lock:
            return replace(self._window(self._budget_key(token)))

    def _window(self, key: str) -> RateWindow:
        now = self.clock()
        window = self._windows.get(key)
        if window is None or now >= window.reset:
            window = RateWindow(
                limit=self._limits.get(key, self._default_limit), used=0, reset=int(now) + self.rate_window
            )
            self._windows[key] = window
        return window

    # ----------------------------------------------------------------- control: faults

    def fail_next(
        self,
        n: int = 1,
        status: int = 502,
        *,
        body: bytes | str | None = None,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Answer the next ``n`` matching requests with ``status``, before auth or rate limiting.

        The failure models a proxy or load balancer in front of GitHub: no
        budget is spent and no ``x-ratelimit-*`` headers are sent.  ``path``
        matches as a substring of the request path.
        """
        data = body.encode() if isinstance(body, str) else body
        self._add_fault(Fault("fail", n, status=status, body=data, method=method, path=path))

    def hang_next(
        self, n: int = 1, *, max_seconds: float = 10.0, method: str | None = None, path: str | None = None
    ) -> None:
        """Never answer the next ``n`` matching requests.

        Each hung request is held until the client closes the connection (it
        gave up), ``max_seconds`` pass, or the fake is reset or stopped; then
        the connection is dropped without a response.
        """
        self._add_fault(Fault("hang", n, max_seconds=max_seconds, method=method, path=path))

    def secondary_limit_next(
        self,
        n: int = 1,
        *,
        retry_after: int = 60,
        status: int = 429,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Refuse the next ``n`` matching requests with a secondary rate limit and ``retry-after``."""
        self._add_fault(
            Fault("secondary", n, status=status, retry_after=retry_after, method=method, path=path)
        )

    def _add_fault(self, fault: Fault) -> None:
        if fault.remaining < 1:
            raise ValueError("n must be at least 1")
        with self._lock:
            self._faults.append(fault)
            self._notify()

    def set_latency(self, seconds: float) -> None:
        """Delay every API answer (faults included) by ``seconds``."""
        with self._lock:
            self._latency = max(0.0, seconds)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._latency = 0.0
            self._generation += 1
            self._notify()

    @property
    def latency(self) -> float:
        with self._lock:
            return self._latency

    @property
    def hanging(self) -> int:
        """How many requests are being held by `hang_next` right now."""
        with self._lock:
            return self._hanging

    # ----------------------------------------------------------------- control: observation

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of the request log, oldest first (control calls are not logged)."""
        with self._lock:
            return list(self._log)

    def request_counts(self) -> Counter[str]:
        """Requests per endpoint, keyed by GitHub's operation id (``unknown`` for anything else)."""
        with self._lock:
            return Counter(record.endpoint for record in self._log)

    def count(
        self,
        endpoint: str | None = None,
        *,
        method: str | None = None,
        status: int | None = None,
        conditional: bool | None = None,
    ) -> int:
        with self._lock:
            return sum(
                1
                for r in self._log
                if (endpoint is None or r.endpoint == endpoint)
                and (method is None or r.method == method.upper())
                and (status is None or r.status == status)
                and (conditional is None or r.conditional == conditional)
            )

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Block until ``predicate()`` holds (re-checked on every change); False on timeout.

        Tests wait on the operator's effects with this instead of sleeping.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    # ----------------------------------------------------------------- used by the HTTP layer

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return replace(fault)
            return None

    def hang_started(self) -> int:
        with self._lock:
            self._hanging += 1
            self._notify()
            return self._generation

    def hang_finished(self) -> None:
        with self._lock:
            self._hanging -= 1
            self._notify()

    def hang_released(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation

    def release_hangs(self) -> None:
        with self._lock:
            self._generation += 1
            self._notify()
            for hook in self._release_hooks:
                hook()

    def record(self, record: RequestRecord) -> None:
        with self._lock:
            self._log.append(record)
            self._notify()

    def runner_of(self, credential: str) -> str | None:
        """The name of the runner a listener credential belongs to, if it is still registered."""
        with self._lock:
            try:
                return self._listener(credential).name
            except ListenerError:
                return None

    def record_listener(self, record: ListenerRecord) -> None:
        with self._lock:
            self._listener_log.append(record)

    @property
    def listener_requests(self) -> list[ListenerRecord]:
        """What the runner stand-ins asked, oldest first: how a failing node test tells what a pod did."""
        with self._lock:
            return list(self._listener_log)

    def authenticate(self, authorization: str | None, *, app_endpoint: bool) -> Credential:
        """Map an ``Authorization`` header to a budget, or raise `AuthRejectedError` (→ 401).

        ``/app/...`` endpoints take only an App JWT; everything else takes a
        PAT or an installation token.
        """
        if not authorization or not authorization.strip():
            raise AuthRejectedError("Requires authentication")
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() not in ("token", "bearer") or not value:
            raise AuthRejectedError("Bad credentials")
        with self._lock:
            if app_endpoint:
                if not looks_like_jwt(value):
                    raise AuthRejectedError(NOT_DECODABLE)
                try:
                    claims = check_app_jwt(value, self.clock(), self.app_keys)
                except JWTRejectedError as exc:
                    raise AuthRejectedError(str(exc)) from exc
                return Credential(key=f"app:{claims.app_id}", who=f"app ID {claims.app_id}")
            installation = self._installation_tokens.get(value)
            if installation is not None:
                if self.clock() >= installation.expires_at:
                    raise AuthRejectedError("Bad credentials")
                return Credential(
                    key=f"installation:{installation.installation_id}",
                    who=f"installation ID {installation.installation_id}",
                )
            if self._accepted is not None and value not in self._accepted:
                raise AuthRejectedError("Bad credentials")
            key = f"token:{value}"
            user_id = self._user_ids.setdefault(key, len(self._user_ids) + 1)
            return Credential(key=key, who=f"user ID {user_id}")

    def rate_admit(self, credential: Credential, *, counts: bool) -> tuple[bool, RateWindow]:
        """Reserve one request of budget atomically; False (and nothing spent) when none is left."""
        with self._lock:
            window = self._window(credential.key)
            if counts and window.remaining == 0:
                return False, replace(window)
            if counts:
                window.used += 1
            return True, replace(window)

    def rate_refund(self, credential: Credential) -> RateWindow:
        """Give back a reserved request: the answer was a 304, which GitHub does not charge."""
        with self._lock:
            window = self._window(credential.key)
            window.used = max(0, window.used - 1)
            return replace(window)

    def anonymous_window(self, address: str) -> RateWindow:
        """The unauthenticated budget of a client address, reported on 401s (never spent here)."""
        with self._lock:
            key = f"ip:{address}"
            self._limits.setdefault(key, UNAUTHENTICATED_RATE_LIMIT)
            return replace(self._window(key))

    def rate_snapshot(self, credential: Credential) -> RateWindow:
        with self._lock:
            return replace(self._window(credential.key))

    def rate_limit_json(self, credential: Credential) -> dict[str, Any]:
        with self._lock:
            window = self._window(credential.key)
            core = {
                "limit": window.limit,
                "remaining": window.remaining,
                "reset": window.reset,
                "used": window.used,
            }
            search = {
                "limit": SEARCH_LIMIT,
                "remaining": SEARCH_LIMIT,
                "reset": int(self.clock()) + 60,
                "used": 0,
            }
            return {"resources": {"core": core, "search": search}, "rate": dict(core)}

    def api_scope(self, kind: ScopeKind, name: str) -> Scope | None:
        scope = Scope(kind, name)
        with self._lock:
            found = self._scopes.get(scope.key)
            if found is None and self.auto_create:
                found = self._scopes.setdefault(scope.key, scope)
                self._notify()
            return found

    def api_runner_groups(self, scope: Scope, bases: Bases) -> list[dict[str, Any]]:
        """``GET .../actions/runner-groups``: GitHub's runner group objects."""
        with self._lock:
            groups = self._groups.get(scope.key) or [_default_group()]
            return [_group_json(scope, group, bases) for group in groups]

    def api_runner_group_members(
        self, scope: Scope, bases: Bases, group_id: int
    ) -> list[dict[str, Any]] | None:
        """A ``selected`` group's repositories (organization) or organizations (enterprise);
        ``None`` for a group that does not exist (404)."""
        with self._lock:
            group = next((g for g in self._groups.get(scope.key, []) if g.id == group_id), None)
            if group is None:
                return None
            if scope.kind == "org":
                return [repository_json(bases, Scope("repo", name)) for name in group.members]
            return [_organization(login, bases) for login in group.members]

    def api_list_runners(self, scope: Scope, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            self._tick()
            return [
                self._runner_json(r)
                for r in self._runners.values()
                if r.scope.key == scope.key and (name is None or r.name.lower() == name.lower())
            ]

    def api_get_runner(self, scope: Scope, runner_id: int) -> dict[str, Any] | None:
        with self._lock:
            self._tick()
            runner = self._runners.get(runner_id)
            if runner is None or runner.scope.key != scope.key:
                return None
            return self._runner_json(runner)

    def api_delete_runner(self, scope: Scope, runner_id: int) -> tuple[DeleteOutcome, str]:
        with self._lock:
            runner = self._runners.get(runner_id)
            self._tick()
            if runner is None or runner.scope.key != scope.key:
                return "missing", ""
            if runner.busy:
                return "busy", runner.name
            self._forget_runner(runner)
            self._notify()
            return "deleted", runner.name

    def api_generate_jitconfig(
        self,
        scope: Scope,
        bases: Bases,
        *,
        name: str,
        labels: list[str],
        runner_group_id: int,
        work_folder: str,
    ) -> tuple[dict[str, Any], str]:
        """``POST .../actions/runners/generate-jitconfig``: the runner (offline) and its encoded config.

        The runner exists from now on, ephemeral and offline until a listener runs the config.
        A name already taken is refused (`RegistrationRejectedError`: GitHub's 409).  The
        config is what ``run.sh --jitconfig`` takes: base64 of a JSON object whose
        ``.runner`` and ``.credentials`` are base64 of the files config.sh would have written
        (here the stand-ins' key=value files; GitHub's also carry ``.credentials_rsaparams``).
        """
        with self._lock:
            runner, encoded = self._jit_runner(
                scope,
                bases,
                name=name,
                labels=labels,
                runner_group_id=runner_group_id,
                work_folder=work_folder,
            )
            return self._runner_json(runner), encoded

    def scale_set_jit_runner(
        self,
        scope: Scope,
        *,
        name: str,
        labels: list[tuple[str, str]],
        runner_group_id: int,
        scale_set_id: int,
        work_folder: str = "_work",
    ) -> tuple[int, str]:
        """A scale set's ``generatejitconfig``: a runner of the scale set, offline until its config
        runs, and the config (the same format as `api_generate_jitconfig`'s). Its labels are the
        scale set's (``(name, type)``, type ``read-only`` or ``custom``), without the
        ``self-hosted``/OS/architecture labels a config.sh runner gets: GitHub applies the scale
        set's labels to its runners (actions/scaleset#75, a maintainer's reply, 2026-04-22).
        Returns the runner's id (the Actions service's agent id is the REST runner id)."""
        with self._lock:
            runner, encoded = self._jit_runner(
                scope,
                self._bases(),
                name=name,
                labels=[],
                runner_group_id=runner_group_id,
                work_folder=work_folder,
            )
            runner.labels, runner.scale_set_id = list(labels), scale_set_id
            self._notify()
            return runner.id, encoded

    def _jit_runner(
        self,
        scope: Scope,
        bases: Bases,
        *,
        name: str,
        labels: list[str],
        runner_group_id: int,
        work_folder: str,
    ) -> tuple[_Runner, str]:
        self._tick()
        try:
            self._find_runner(scope, name)
        except UnknownRunnerError:
            pass
        else:
            raise RegistrationRejectedError(f"Already exists - A runner with the name {name} already exists.")
        runner_id = self.register_runner(
            scope, name, labels, status="offline", ephemeral=True, replace=False, default_labels=False
        )
        runner = self._runners[runner_id]
        runner.listener, runner.jit, runner.runner_group_id = True, True, runner_group_id
        credential = secrets.token_urlsafe(24)
        self._credentials[credential] = runner_id
        settings = (
            f"service={bases.web}{SERVICE_PATH}\nrunner_id={runner_id}\nrunner_name={name}\n"
            f"ephemeral=1\nwork={work_folder}\n"
        )
        files = {".runner": settings, ".credentials": f"credential={credential}\n"}
        encoded = json.dumps({key: base64.b64encode(text.encode()).decode() for key, text in files.items()})
        self._notify()
        return runner, _b64(encoded)

    def offer_to_runner(
        self, runner_id: int, repository: str, labels: list[str], duration_s: float, script: str | None
    ) -> int:
        """A job for one runner process (a scale set runner with a listener): queued, offered to
        that runner only; it starts and completes it through the listener protocol. Returns the
        job's id. Under the lock, by the scale set service."""
        runner = self._runners[runner_id]
        repo = self.add_scope(repo=repository)
        self._run_numbers[repo.key] += 1
        job = Job(
            id=next(self._job_ids),
            run_id=next(self._run_ids),
            run_number=self._run_numbers[repo.key],
            repo=repo,
            labels=list(labels),
            duration_s=float(duration_s),
            name="build",
            workflow_name="CI",
            created_at=self.clock(),
            script=script,
            assigned_to=runner.id,
        )
        runner.job_id = job.id
        self._jobs[job.id] = job
        self._open_jobs[job.id] = job
        self._job_event(job)
        self._notify()
        return job.id

    def run_jit_config(self, encoded: str) -> int:
        """A runner pod's stand-in runs ``run.sh --jitconfig <encoded>`` without a process: the
        runner is online (and stays so: no listener to go silent) and, if a REST JIT runner,
        its jobs are played by the fake like a control-API runner's. Returns the runner's id.

        Refused as the real runner fails (`RegistrationRejectedError`): a config that does not
        decode, whose runner was deleted (its credential is revoked), or that was used already
        (a JIT config is single-use)."""
        try:
            files = json.loads(base64.b64decode(encoded, validate=True))
            credentials = base64.b64decode(files[".credentials"]).decode()
            pairs = (line.split("=", 1) for line in credentials.splitlines() if "=" in line)
            credential = dict(pairs)["credential"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistrationRejectedError(f"not a JIT config: {type(exc).__name__}") from None
        with self._lock:
            try:
                runner = self._listener(credential)
            except ListenerError as exc:
                raise RegistrationRejectedError(str(exc)) from None
            if runner.jit_used:
                raise RegistrationRejectedError(
                    f"the JIT config of runner {runner.name!r} has been used already"
                )
            runner.jit_used, runner.listener, runner.status = True, False, "online"
            runner.last_seen = self.clock()
            self._tick()
            self._notify()
            return runner.id

    def api_registration_token(self, scope: Scope) -> RegistrationToken:
        with self._lock:
            now = self.clock()
            token = "".join(secrets.choice(_BASE32) for _ in range(29))
            issued = RegistrationToken(token, scope, now, now + self.registration_token_lifetime)
            self._registration_tokens[token] = issued
            self._notify()
            return issued

    def api_installation_token(
        self, installation_id: int, app_id: str, requested: Mapping[str, Any]
    ) -> InstallationToken | None:
        with self._lock:
            installation = self._installations.get(installation_id)
            if installation is None and self.auto_create:
                installation = Installation(installation_id)
                self._installations[installation_id] = installation
            if installation is None or installation.app_id not in (None, app_id):
                return None
            permissions = requested.get("permissions")
            narrowed = "repositories" in requested or "repository_ids" in requested
            now = self.clock()
            minted = InstallationToken(
                token="ghs_" + "".join(secrets.choice(_ALNUM) for _ in range(36)),
                installation_id=installation_id,
                issued_at=now,
                expires_at=now + self.installation_token_lifetime,
                permissions=dict(permissions)
                if isinstance(permissions, dict)
                else dict(installation.permissions),
                repository_selection="selected" if narrowed else installation.repository_selection,
            )
            self._installation_tokens[minted.token] = minted
            self._notify()
            return minted
