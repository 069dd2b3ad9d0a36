"""GitHub behind one small interface.

The reconciler, the runner manager and the token updater only need three calls: mint a
registration token, list a scope's runners and delete a runner. Keeping them behind the
``GitHubClient`` protocol lets tests substitute a fake without HTTP, and keeps every PyGithub
and ``requests`` exception out of the callers: they only ever see ``GitHubError`` subclasses
whose ``reason`` can go straight into a Kubernetes condition and whose ``retry_after`` tells
the caller's scheduler how long GitHub asked us to wait.

Retries are split on purpose. The transport retries a couple of times, quickly, for the
failures that a second attempt usually fixes (5xx, resets, timeouts). Anything that needs
waiting - rate limits above all - is raised at once so that the per-pool schedulers, which
can wait without holding a worker thread, stay in charge of the backoff.

Every answer also feeds the API budget bookkeeping, because the operator shares one budget
per credential between all the pools that use it: the ``x-ratelimit-*`` headers become
gauges labelled by the credential's identity (never the token) and are kept for the runner
managers' slowdown rule; each answer is counted by templated endpoint and status. Runner
listings are conditional (``If-None-Match`` with the ETag of the page's last answer): an
unchanged page comes back as a 304, which GitHub does not count against the budget.

PyGithub's ``requestJsonAndCheck`` treats a 304 as a success with a ``None`` body, which is
indistinguishable from an empty answer, so every call here goes through the raw
``Requester.requestJson`` (status, headers, body) and this module decides what a status
means.
"""

from __future__ import annotations

import contextlib
import email.utils
import enum
import functools
import json
import logging
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import requests
import urllib3.exceptions
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import (
    BadAttributeException,
    RateLimitExceededExceedsMaxWait,
    RateLimitExceededException,
)
from prometheus_client import Counter, Gauge

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_WEB_URL",
    "BadCredentials",
    "ClientOptions",
    "DeleteOutcome",
    "GitHubClient",
    "GitHubError",
    "MalformedResponse",
    "NotFound",
    "PyGithubClient",
    "RateLimit",
    "RateLimitAware",
    "RateLimited",
    "RegistrationToken",
    "Runner",
    "Scope",
    "Unavailable",
    "web_url_for",
]

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_WEB_URL = "https://github.com"

#: GitHub documents a maximum page size of 100 for the runner listings; anything smaller only
#: multiplies requests against the rate limit.
RUNNERS_PER_PAGE = 100

#: A runner listing that has not ended after this many pages (10,000 runners) is treated as a
#: broken ``Link`` chain rather than followed for ever.
MAX_RUNNER_PAGES = 100

#: GitHub asks clients that hit a secondary limit without a ``retry-after`` to wait at least a
#: minute; used whenever a rate-limit answer carries no usable timing header.
SECONDARY_RATE_LIMIT_WAIT = 60.0

_OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$")
_REPO_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_LINK_RE = re.compile(r'<(?P<url>[^>]+)>\s*;\s*rel="(?P<rel>[^"]+)"')

#: ETag'd runner pages kept per client. A page is a few kilobytes; this bounds a client that
#: lists thousands of repositories without evicting anything in ordinary use.
MAX_CACHED_PAGES = 2048

#: Label value for answers that never came (connection reset, timeout).
NO_ANSWER = "error"

GITHUB_REQUESTS = Counter(
    "runnerpool_github_requests",
    "GitHub API answers by templated endpoint, method and HTTP status (error: no answer). "
    "A 304 costs no rate-limit budget.",
    ["endpoint", "method", "status"],
)
RATE_LIMIT_REMAINING = Gauge(
    "runnerpool_github_rate_limit_remaining",
    "Requests left in the current rate-limit window, from the last x-ratelimit-remaining seen.",
    ["credential"],
)
RATE_LIMIT_LIMIT = Gauge(
    "runnerpool_github_rate_limit_limit",
    "Size of the rate-limit window, from the last x-ratelimit-limit seen.",
    ["credential"],
)
RATE_LIMIT_RESET = Gauge(
    "runnerpool_github_rate_limit_reset_timestamp_seconds",
    "Unix time at which the rate-limit window resets, from the last x-ratelimit-reset seen.",
    ["credential"],
)


# --------------------------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Where runners register: one organization or one repository, never both.

    Validated on construction so that a bad spec fails in the reconciler with a clear message
    instead of as a confusing 404 from GitHub later.
    """

    organization: str | None = None
    repository: str | None = None

    def __post_init__(self) -> None:
        if (self.organization is None) == (self.repository is None):
            raise ValueError("a scope needs exactly one of organization or repository")
        if self.organization is not None and not _OWNER_RE.match(self.organization):
            raise ValueError(f"invalid organization name {self.organization!r}")
        if self.repository is not None:
            owner, sep, name = self.repository.partition("/")
            if not sep or not _OWNER_RE.match(owner) or not _REPO_NAME_RE.match(name):
                raise ValueError(f"repository must look like owner/name, got {self.repository!r}")

    @property
    def path(self) -> str:
        """REST path prefix; runner endpoints hang below it."""
        if self.organization is not None:
            return f"orgs/{self.organization}"
        assert self.repository is not None
        owner, _, name = self.repository.partition("/")
        return f"repos/{owner}/{name}"

    @property
    def path_template(self) -> str:
        """``path`` with the names replaced by placeholders: a metric label with bounded values."""
        return "orgs/{org}" if self.organization is not None else "repos/{owner}/{repo}"

    def html_url(self, web_base: str = DEFAULT_WEB_URL) -> str:
        """The URL ``config.sh --url`` expects; on GHES pass the web (not API) base."""
        name = self.organization if self.organization is not None else self.repository
        return f"{web_base.rstrip('/')}/{name}"

    @property
    def key(self) -> str:
        """Stable identity for sharing work between pools on the same scope.

        GitHub treats owner and repository names case-insensitively, so two pools spelling the
        organization differently still share one listing.
        """
        if self.organization is not None:
            return f"org:{self.organization.lower()}"
        assert self.repository is not None
        return f"repo:{self.repository.lower()}"

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class RegistrationToken:
    """A ``config.sh --token`` value; ``repr`` hides it so it cannot leak into logs."""

    token: str = field(repr=False)
    expires_at: datetime


@dataclass(frozen=True)
class Runner:
    """The subset of GitHub's runner object the operator decides on."""

    id: int
    name: str
    status: str
    busy: bool
    labels: tuple[str, ...]


@dataclass(frozen=True)
class RateLimit:
    """One credential's primary budget as GitHub last reported it.

    ``reset`` is Unix time (seconds), as in ``x-ratelimit-reset``.
    """

    remaining: int
    limit: int
    reset: float

    @classmethod
    def from_headers(cls, headers: Mapping[str, Any] | None) -> RateLimit | None:
        """``None`` when the answer carries no budget (GHES with rate limiting off, a proxy)."""
        raw = [_header(headers, f"x-ratelimit-{name}") for name in ("remaining", "limit", "reset")]
        if any(value is None for value in raw):
            return None
        try:
            # GitHub has been seen sending floats here (PyGithub #2697).
            remaining, limit, reset = (float(str(value)) for value in raw)
        except ValueError:
            return None
        return cls(remaining=int(remaining), limit=int(limit), reset=reset)


class DeleteOutcome(enum.Enum):
    """Deleting is a state change the caller must act on, not just success or failure."""

    DELETED = "Deleted"
    ALREADY_GONE = "AlreadyGone"
    BUSY = "Busy"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class GitHubError(Exception):
    """Any failure talking to GitHub, already classified for the caller.

    ``reason`` is CamelCase so the reconciler can copy it into a condition unchanged;
    ``retry_after`` is GitHub's own hint (seconds) when it gave one.
    """

    default_reason = "GitHubRequestFailed"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.retry_after = retry_after
        self.status = status

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(reason={self.reason!r}, status={self.status!r}, message={self.message!r})"


class BadCredentials(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """401 (token invalid or expired) or 403 (valid but not allowed); fixing needs a human."""

    default_reason = "BadCredentials"


class NotFound(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """404 on a scope: a typo, a renamed owner, or credentials that cannot see it."""

    default_reason = "ScopeNotFound"


class RateLimited(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """Primary or secondary rate limit; ``retry_after`` says when asking again makes sense."""

    default_reason = "RateLimited"


class Unavailable(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """5xx, timeouts and connection errors: worth retrying soon."""

    default_reason = "GitHubUnavailable"


class MalformedResponse(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """GitHub answered 2xx but not with the documented shape."""

    default_reason = "MalformedResponse"


# --------------------------------------------------------------------------------------------
# Interface
# --------------------------------------------------------------------------------------------


class GitHubClient(Protocol):
    """The three GitHub calls the operator makes. Implementations raise only ``GitHubError``."""

    def registration_token(self, scope: Scope) -> RegistrationToken: ...

    def list_runners(self, scope: Scope) -> list[Runner]: ...

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome: ...


@runtime_checkable
class RateLimitAware(Protocol):
    """What a client can tell about its budget; kept out of ``GitHubClient`` so that simple
    stand-ins for the three calls stay valid clients."""

    @property
    def credential(self) -> str: ...

    def rate_limit(self) -> RateLimit | None: ...


# --------------------------------------------------------------------------------------------
# PyGithub implementation
# --------------------------------------------------------------------------------------------


class _TransientOnlyRetry(GithubRetry):
    """GithubRetry restricted to failures that a quick second attempt can fix.

    PyGithub's retry would otherwise sleep inside the request until a rate limit resets (up to
    an hour) or for a secondary limit's ``Retry-After``, holding a scheduler worker and hiding
    the condition from the operator. 403 and 429 are therefore never retried here, and any
    answer that carries ``Retry-After`` is returned at once so the caller can honour it.
    """

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        if status_code in (403, 429) or has_retry_after:
            return False
        return bool(super().is_retry(method, status_code, has_retry_after))


@dataclass(frozen=True)
class ClientOptions:
    """Transport tuning, kept apart from credentials so tests can turn every wait off.

    ``retries`` is small on purpose: the scheduler owns the long backoff. GitHub asks for
    writes to be sent serially; every client does that (one write at a time per credential,
    see ``PyGithubClient._send``). PyGithub's fixed gaps are off by default: a one-second gap
    per write would make the hundredth new pool wait 100 s for its first token, and the few
    writes this operator sends (a token per scope and half hour, a delete per gone runner)
    are nowhere near the bursts the gap protects against. A secondary-limit answer (403/429
    with ``retry-after``) is still honoured by the callers' backoff.
    """

    timeout: int = 15
    retries: int = 2
    backoff_factor: float = 0.5
    seconds_between_requests: float | None = None
    seconds_between_writes: float | None = None
    user_agent: str = "runnerpool-operator"

    def retry(self) -> GithubRetry:
        return _TransientOnlyRetry(
            total=self.retries,
            backoff_factor=self.backoff_factor,
            # Belt and braces: should a rate-limit 403 ever reach GithubRetry's own logic, raise
            # instead of sleeping until the reset.
            max_rate_limit_wait=0,
            # Hand the final 5xx back as a response so we can report its status.
            raise_on_status=False,
        )


class _RedactBodies(logging.Filter):
    """Keep response bodies out of PyGithub's DEBUG request log.

    ``github.Requester`` logs every response body at DEBUG; for the registration-token and
    installation-token endpoints that body is a secret. The request line and status stay.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 9:
            record.args = (*args[:5], "(request body redacted)", args[6], args[7], "(response body redacted)")
        return True


_REQUESTER_LOGGER = logging.getLogger("github.Requester")
if not any(isinstance(f, _RedactBodies) for f in _REQUESTER_LOGGER.filters):
    _REQUESTER_LOGGER.addFilter(_RedactBodies())


def web_url_for(api_url: str) -> str:
    """Derive the web base for ``config.sh --url`` from an API base.

    ``https://api.github.com`` -> ``https://github.com``; GHES ``https://host/api/v3`` ->
    ``https://host``.
    """
    parsed = urllib.parse.urlsplit(api_url.rstrip("/"))
    if parsed.netloc == "api.github.com":
        return DEFAULT_WEB_URL
    return f"{parsed.scheme}://{parsed.netloc.removeprefix('api.')}"


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    if not headers:
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if str(key).lower() == wanted:
            return str(value)
    return None


def _retry_after_seconds(headers: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds GitHub asked us to wait: ``retry-after`` first, else the primary-limit reset."""
    raw = _header(headers, "retry-after")
    if raw is not None:
        raw = raw.strip()
        if raw.isdigit():
            return float(raw)
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when.timestamp() - now)
    reset = _header(headers, "x-ratelimit-reset")
    if reset is not None and _header(headers, "x-ratelimit-remaining") == "0":
        try:
            return max(0.0, float(reset) - now)
        except ValueError:
            return None
    return None


def _github_message(data: Any) -> str:
    if isinstance(data, dict):
        message = data.get("message")
        if isinstance(message, str):
            return message
    if isinstance(data, str):
        return data[:200]
    return ""


def _is_rate_limited(status: int, headers: Mapping[str, Any] | None, message: str) -> bool:
    if status not in (403, 429):
        return False
    if status == 429:
        return True
    if _header(headers, "x-ratelimit-remaining") == "0" or _header(headers, "retry-after") is not None:
        return True
    lowered = message.lower()
    return lowered.startswith("api rate limit exceeded") or "secondary rate limit" in lowered


def translate_github_exception(exc: GithubException, what: str, now: float) -> GitHubError:
    """Map a PyGithub exception to our taxonomy; ``what`` names the call for the message."""
    status = exc.status
    headers = exc.headers
    message = _github_message(exc.data)
    detail = f"{what}: HTTP {status}" + (f" ({message})" if message else "")
    if isinstance(exc, RateLimitExceededException) or _is_rate_limited(status, headers, message):
        retry_after = _retry_after_seconds(headers, now)
        if retry_after is None and isinstance(exc, RateLimitExceededExceedsMaxWait):
            retry_after = exc.wait
        if retry_after is None:
            retry_after = SECONDARY_RATE_LIMIT_WAIT
        return RateLimited(detail, retry_after=retry_after, status=status)
    if status == 401:
        return BadCredentials(detail + "; the token or GitHub App key was rejected", status=status)
    if status == 403:
        return BadCredentials(
            detail + "; the credentials lack the permission to manage self-hosted runners",
            reason="Forbidden",
            status=status,
        )
    if status == 404:
        return NotFound(detail + "; check the name and that the credentials can see it", status=status)
    if status >= 500 or status == 408:
        return Unavailable(detail, retry_after=_retry_after_seconds(headers, now), status=status)
    return GitHubError(detail, status=status)


def _parse_time(value: Any, what: str) -> datetime:
    if not isinstance(value, str):
        raise MalformedResponse(f"{what}: expires_at missing or not a string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedResponse(f"{what}: expires_at is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise MalformedResponse(f"{what}: expires_at has no time zone")
    return parsed.astimezone(UTC)


def _parse_token(data: Any, what: str) -> RegistrationToken:
    if not isinstance(data, dict):
        raise MalformedResponse(f"{what}: expected a JSON object")
    token = data.get("token")
    if not isinstance(token, str) or not token:
        raise MalformedResponse(f"{what}: token missing or empty")
    return RegistrationToken(token=token, expires_at=_parse_time(data.get("expires_at"), what))


def _parse_runner(item: Any, what: str) -> Runner:
    if not isinstance(item, dict):
        raise MalformedResponse(f"{what}: runner entry is not an object")
    runner_id = item.get("id")
    name = item.get("name")
    status = item.get("status")
    busy = item.get("busy")
    labels = item.get("labels")
    if not isinstance(runner_id, int) or isinstance(runner_id, bool):
        raise MalformedResponse(f"{what}: runner id missing or not an integer")
    if not isinstance(name, str) or not isinstance(status, str) or not isinstance(busy, bool):
        raise MalformedResponse(f"{what}: runner {runner_id} lacks name, status or busy")
    if not isinstance(labels, list):
        raise MalformedResponse(f"{what}: runner {runner_id} labels is not a list")
    names: list[str] = []
    for label in labels:
        label_name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(label_name, str):
            raise MalformedResponse(f"{what}: runner {runner_id} has a label without a name")
        names.append(label_name)
    return Runner(id=runner_id, name=name, status=status, busy=busy, labels=tuple(names))


def _next_link(headers: Mapping[str, Any]) -> str | None:
    link = _header(headers, "link")
    if not link:
        return None
    for match in _LINK_RE.finditer(link):
        if match.group("rel") == "next":
            return match.group("url")
    return None


def _origin(url: str) -> tuple[str, str, int]:
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, (parsed.hostname or "").lower(), port


def _structured(body: str) -> Any:
    """Read a body as PyGithub would: JSON, or non-JSON text wrapped as ``{"data": text}``.

    Text that starts like JSON but does not parse is a broken answer, not an HTML error page,
    so it raises (``_call`` turns that into ``MalformedResponse``).
    """
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        if body.lstrip().startswith(("{", "[")):
            raise
        return {"data": body}


@dataclass(frozen=True)
class _Page:
    """One runner page as last answered, kept to be revalidated with its ETag."""

    etag: str
    runners: tuple[Runner, ...]
    next_url: str | None


class _PageCache:
    """Bounded LRU of runner pages by URL; shared by the threads that use one client."""

    def __init__(self, max_pages: int = MAX_CACHED_PAGES) -> None:
        self._pages: OrderedDict[str, _Page] = OrderedDict()
        self._max = max_pages
        self._lock = threading.Lock()

    def get(self, url: str) -> _Page | None:
        with self._lock:
            page = self._pages.get(url)
            if page is not None:
                self._pages.move_to_end(url)
            return page

    def put(self, url: str, page: _Page) -> None:
        with self._lock:
            self._pages[url] = page
            self._pages.move_to_end(url)
            while len(self._pages) > self._max:
                self._pages.popitem(last=False)


class PyGithubClient:
    """``GitHubClient`` on top of a ``github.Github`` instance.

    Every call goes through PyGithub's public raw requester (see the module docstring for why
    not ``requestJsonAndCheck``), so pagination, conditional requests and response validation
    are ours: a half-parsed PyGithub object would surface as ``None`` deep in the caller
    instead of as a ``MalformedResponse`` here.

    With GitHub App credentials, the installation token is minted lazily by PyGithub's
    ``AppInstallationAuth`` through a ``GithubIntegration`` built from this ``Github``'s
    requester settings, so it inherits our retry. (A ``GithubIntegration`` constructed on its
    own has no retry at all by default.)

    The ETag cache lives here, per client and therefore per credential, because GitHub's
    answers vary by ``Authorization``: a validator obtained with one credential says nothing
    about what another one may see.
    """

    def __init__(
        self, gh: Github, *, clock: Callable[[], float] = time.time, credential: str | None = None
    ) -> None:
        self._gh = gh
        self._requester = gh.requester
        self._clock = clock
        self._origin = _origin(self._requester.base_url)
        self._credential_name = credential
        self._pages = _PageCache()
        self._budget_lock = threading.Lock()
        self._rate_limit: RateLimit | None = None
        # GitHub asks for writes to be serial: one at a time for everything on this credential.
        self._writes = threading.Lock()

    @classmethod
    def from_auth(
        cls,
        auth: Auth.Auth,
        base_url: str = DEFAULT_API_URL,
        options: ClientOptions | None = None,
        *,
        clock: Callable[[], float] = time.time,
        credential: str | None = None,
    ) -> PyGithubClient:
        """Build the ``Github`` instance with our transport settings."""
        opts = options or ClientOptions()
        gh = Github(
            auth=auth,
            base_url=base_url.rstrip("/"),
            timeout=opts.timeout,
            user_agent=opts.user_agent,
            per_page=RUNNERS_PER_PAGE,
            retry=opts.retry(),
            seconds_between_requests=opts.seconds_between_requests,
            seconds_between_writes=opts.seconds_between_writes,
            lazy=True,
        )
        return cls(gh, clock=clock, credential=credential)

    @property
    def base_url(self) -> str:
        return str(self._requester.base_url)

    @property
    def credential(self) -> str:
        """Whose budget this client spends, fit for a metric label: never the token.

        A GitHub App installation is its own budget at GitHub, so it names itself; a personal
        access token cannot be named without a request, so it carries the name its owner gave
        it (``name_credential``: the operator uses the credential Secret's namespace/name).
        """
        auth = self._requester.auth
        if isinstance(auth, Auth.AppInstallationAuth):
            return f"app:{auth.app_id}/installation:{auth.installation_id}"
        return self._credential_name or "unnamed"

    def name_credential(self, name: str) -> None:
        self._credential_name = name

    def rate_limit(self) -> RateLimit | None:
        """The budget from the latest answer that carried one; ``None`` before any."""
        with self._budget_lock:
            return self._rate_limit

    def close(self) -> None:
        self._gh.close()

    def __repr__(self) -> str:
        return f"PyGithubClient(base_url={self.base_url!r})"

    # -- the three calls -----------------------------------------------------------------------

    def registration_token(self, scope: Scope) -> RegistrationToken:
        path = f"/{scope.path}/actions/runners/registration-token"
        what = f"POST {path}"
        endpoint = f"/{scope.path_template}/actions/runners/registration-token"
        _, _, data = self._call(what, functools.partial(self._send, "POST", path, endpoint))
        return _parse_token(data, what)

    def list_runners(self, scope: Scope) -> list[Runner]:
        """All pages, each revalidated with its ETag; a runner that moved between pages while
        they were read is reported once."""
        what = f"GET /{scope.path}/actions/runners"
        endpoint = f"/{scope.path_template}/actions/runners"
        url = f"/{scope.path}/actions/runners?per_page={RUNNERS_PER_PAGE}"
        found: dict[int, Runner] = {}
        for _ in range(MAX_RUNNER_PAGES):
            page = self._page(url, what, endpoint)
            for runner in page.runners:
                found.setdefault(runner.id, runner)
            if page.next_url is None:
                return list(found.values())
            url = self._checked_next(page.next_url, what)
        raise MalformedResponse(f"{what}: pagination did not end after {MAX_RUNNER_PAGES} pages")

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome:
        path = f"/{scope.path}/actions/runners/{runner_id}"
        what = f"DELETE {path}"
        endpoint = f"/{scope.path_template}/actions/runners/{{runner_id}}"
        try:
            self._call(what, functools.partial(self._send, "DELETE", path, endpoint))
        except NotFound:
            return DeleteOutcome.ALREADY_GONE
        except GitHubError as err:
            # GitHub answers 422 "still running a job" for a busy runner; any 422 here means
            # the runner is still registered, so the caller must come back later.
            if err.status == 422:
                log.debug("runner %s in %s not deleted: %s", runner_id, scope, err.message)
                return DeleteOutcome.BUSY
            raise
        return DeleteOutcome.DELETED

    # -- plumbing ------------------------------------------------------------------------------

    def _page(self, url: str, what: str, endpoint: str) -> _Page:
        cached = self._pages.get(url)
        headers = {"If-None-Match": cached.etag} if cached is not None else {}
        status, response_headers, data = self._call(
            what, functools.partial(self._send, "GET", url, endpoint, headers=headers)
        )
        if status == 304:
            if cached is None:
                raise MalformedResponse(f"{what}: 304 Not Modified to a request without If-None-Match")
            return cached
        if not isinstance(data, dict) or not isinstance(data.get("runners"), list):
            raise MalformedResponse(f"{what}: expected an object with a runners list")
        page = _Page(
            etag=_header(response_headers, "etag") or "",
            runners=tuple(_parse_runner(item, what) for item in data["runners"]),
            next_url=_next_link(response_headers),
        )
        if page.etag:
            self._pages.put(url, page)
        return page

    def _send(
        self, method: str, url: str, endpoint: str, *, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any], Any]:
        """One request: count it, note the budget, and raise PyGithub's exception for >= 400.

        ``headers`` is copied because the requester adds ``Authorization`` to the dict it gets.
        """
        try:
            with self._writes if method != "GET" else contextlib.nullcontext():
                status, response_headers, body = self._requester.requestJson(
                    method, url, headers=dict(headers or {})
                )
        except Exception:
            GITHUB_REQUESTS.labels(endpoint, method, NO_ANSWER).inc()
            raise
        GITHUB_REQUESTS.labels(endpoint, method, str(status)).inc()
        self._observe_budget(response_headers)
        if status == 304:
            return status, response_headers, None
        data = _structured(body)
        if status >= 400:
            raise self._requester.createException(
                status, response_headers, data if isinstance(data, dict) else {}
            )
        return status, response_headers, data

    def _observe_budget(self, headers: Mapping[str, Any]) -> None:
        budget = RateLimit.from_headers(headers)
        if budget is None:
            return
        with self._budget_lock:
            self._rate_limit = budget
        label = self.credential
        RATE_LIMIT_REMAINING.labels(label).set(budget.remaining)
        RATE_LIMIT_LIMIT.labels(label).set(budget.limit)
        RATE_LIMIT_RESET.labels(label).set(budget.reset)

    def _checked_next(self, next_url: str, what: str) -> str:
        """Refuse to follow a ``Link`` off the configured server (PyGithub only asserts)."""
        if _origin(next_url) != self._origin:
            raise MalformedResponse(f"{what}: next page link points to another server")
        return next_url

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run one PyGithub call and translate whatever it raises."""
        self._ensure_installation_token(what)
        try:
            return fn()
        except GithubException as exc:
            raise translate_github_exception(exc, what, self._clock()) from None
        except BadAttributeException:
            raise MalformedResponse(f"{what}: unexpected attribute type") from None
        except json.JSONDecodeError:
            raise MalformedResponse(f"{what}: body is not valid JSON") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{what}: {type(exc).__name__}") from exc
        except RuntimeError as exc:
            # PyGithub raises RuntimeError for redirects to another host or scheme, i.e. a
            # base URL that points at the wrong place.
            raise GitHubError(f"{what}: {exc}", reason="GitHubRedirected") from None

    def _ensure_installation_token(self, what: str) -> None:
        """Mint the App installation token up front so its failures name the right culprit.

        Left to PyGithub, a 404 for an unknown installation would surface from the runner call
        and read as "scope not found"; here it becomes a credential problem.
        """
        auth = self._requester.auth
        if not isinstance(auth, Auth.AppInstallationAuth):
            return
        try:
            auth.token  # noqa: B018 - fetched and cached by PyGithub until near expiry
        except GithubException as exc:
            err = translate_github_exception(exc, "POST /app/installations/{id}/access_tokens", self._clock())
            if isinstance(err, (NotFound, BadCredentials)) or err.status == 422:
                raise BadCredentials(
                    f"{what}: GitHub App installation token could not be created ({err.message}); "
                    "check app-id, app-installation-id and app-private-key",
                    reason="AppInstallationTokenFailed",
                    status=err.status,
                ) from None
            raise err from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{what}: installation token: {type(exc).__name__}") from None
