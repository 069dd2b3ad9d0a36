"""The vocabulary every part of the operator shares, in one place.

The reconciler, the runner managers, the secret updater and the GitHub client all speak
about the same things: which pool (``PoolRef``), where its runners register (``Scope``),
why its token could not be refreshed (``RegistrationFailure``), which GitHub API it talks to,
how a pool is keyed in queues and maps ("namespace/name"), and how a time is written into
Kubernetes objects. Defining them here, below everything else, is what lets
``runnerpool`` and ``secret_updater`` use them without importing each other; this module
imports nothing from either package but the names (``runnerpool.naming``).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from runnerpool import naming
from runnerpool.reasons import Reason

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_WEB_URL",
    "RFC3339",
    "Connection",
    "Drain",
    "JobState",
    "PoolRef",
    "ProxyRef",
    "RegistrationFailure",
    "Scope",
    "StuckPod",
    "WebhookSecretProblem",
    "api_url_key",
    "parse_duration",
    "pool_key",
    "resolve_api_url",
    "rfc3339",
    "split_key",
    "utcnow",
    "web_url_for",
    "with_userinfo",
]

#: github.com's REST API; a pool's ``spec.githubApiUrl`` or ``--github-api-url`` overrides it.
DEFAULT_API_URL = "https://api.github.com"
DEFAULT_WEB_URL = "https://github.com"

#: RFC 3339 in whole seconds and UTC, the form Kubernetes itself writes (``metav1.Time``).
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"

_OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$")
_REPO_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(when: datetime) -> str:
    """Whole seconds, UTC: truncating can only make a published expiry earlier, never later."""
    return when.astimezone(UTC).strftime(RFC3339)


def parse_rfc3339(value: object) -> datetime | None:
    """A timestamp as GitHub and Kubernetes write them (``Z`` or an offset; none means UTC);
    ``None`` for anything else, so a malformed field reads as absent."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_DURATION_PART = re.compile(r"(\d+)([hms])")
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """A Go duration as the CRD admits it: whole hours, minutes and seconds (``1h30m``)."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration of hours, minutes and seconds: {text!r}")
    return timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in parts))


# -- keys and names -------------------------------------------------------------------------------


def pool_key(namespace: str, name: str) -> str:
    """The "namespace/name" key of the work queue, the informer caches and every per-pool map."""
    return f"{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    """``pool_key`` backwards; a key without a namespace is a cluster-scoped name."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else ("", namespace)


# -- GitHub hosts ---------------------------------------------------------------------------------


def resolve_api_url(override: str | None, default: str = DEFAULT_API_URL) -> str:
    """The API base a pool talks to: its own ``githubApiUrl`` if set, else the operator's."""
    return (override or default or DEFAULT_API_URL).strip().rstrip("/")


def api_url_key(url: str) -> str:
    """One spelling per GitHub API base, to compare and index by: hosts are case-insensitive,
    and a trailing slash or stray space names the same base."""
    return url.strip().rstrip("/").lower()


def web_url_for(api_url: str) -> str:
    """Derive the web base for ``config.sh --url`` from an API base.

    ``https://api.github.com`` -> ``https://github.com``; GHE.com ``https://api.acme.ghe.com``
    -> ``https://acme.ghe.com``; GHES ``https://host/api/v3`` -> ``https://host``: GHES serves
    its API under a path of the web host, whatever that host is called (``api.corp`` too).
    """
    parsed = urllib.parse.urlsplit(api_url.rstrip("/"))
    if parsed.netloc == "api.github.com":
        return DEFAULT_WEB_URL
    if parsed.path.startswith("/api/"):
        return f"{parsed.scheme}://{parsed.netloc}"
    return f"{parsed.scheme}://{parsed.netloc.removeprefix('api.')}"


# -- value types ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Where runners register: one enterprise, organization or repository, exactly one.

    Validated on construction so that a bad spec fails in the reconciler with a clear message
    instead of as a confusing 404 from GitHub later.
    """

    organization: str | None = None
    repository: str | None = None
    enterprise: str | None = None

    def __post_init__(self) -> None:
        if sum(v is not None for v in (self.organization, self.repository, self.enterprise)) != 1:
            raise ValueError("a scope needs exactly one of enterprise, organization or repository")
        if self.organization is not None and not _OWNER_RE.match(self.organization):
            raise ValueError(f"invalid organization name {self.organization!r}")
        if self.enterprise is not None and not _OWNER_RE.match(self.enterprise):
            raise ValueError(f"invalid enterprise slug {self.enterprise!r}")
        if self.repository is not None:
            owner, sep, name = self.repository.partition("/")
            if not sep or not _OWNER_RE.match(owner) or not _REPO_NAME_RE.match(name):
                raise ValueError(f"repository must look like owner/name, got {self.repository!r}")

    @property
    def path(self) -> str:
        """REST path prefix; runner endpoints hang below it."""
        if self.enterprise is not None:
            return f"enterprises/{self.enterprise}"
        if self.organization is not None:
            return f"orgs/{self.organization}"
        assert self.repository is not None
        owner, _, name = self.repository.partition("/")
        return f"repos/{owner}/{name}"

    @property
    def path_template(self) -> str:
        """``path`` with the names replaced by placeholders: a metric label with bounded values."""
        if self.enterprise is not None:
            return "enterprises/{enterprise}"
        return "orgs/{org}" if self.organization is not None else "repos/{owner}/{repo}"

    @property
    def kind(self) -> Literal["enterprise", "organization", "repository"]:
        if self.enterprise is not None:
            return "enterprise"
        return "organization" if self.organization is not None else "repository"

    @property
    def name(self) -> str:
        """The enterprise slug, organization login or ``owner/name``."""
        return str(self.enterprise or self.organization or self.repository)

    def html_url(self, web_base: str = DEFAULT_WEB_URL) -> str:
        """The URL ``config.sh --url`` expects; on GHES pass the web (not API) base."""
        if self.enterprise is not None:
            return f"{web_base.rstrip('/')}/enterprises/{self.enterprise}"
        return f"{web_base.rstrip('/')}/{self.name}"

    @property
    def key(self) -> str:
        """Stable identity for sharing work between pools on the same scope.

        GitHub treats owner and repository names case-insensitively, so two pools spelling the
        organization differently still share one listing.
        """
        if self.enterprise is not None:
            return f"enterprise:{self.enterprise.lower()}"
        if self.organization is not None:
            return f"org:{self.organization.lower()}"
        assert self.repository is not None
        return f"repo:{self.repository.lower()}"

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class PoolRef:
    """Everything a job needs to know about a pool; a change replaces the job.

    ``api_url`` is resolved (the pool's ``spec.githubApiUrl``, else ``--github-api-url``) by the
    one function that builds refs, ``runnerpool.settings.GitHubSettings.pool_ref``.
    """

    namespace: str
    name: str
    scope: Scope
    credential_secret_name: str
    api_url: str = DEFAULT_API_URL
    # The credential Secret's content, hashed (``credentials.credentials_version``): an edit
    # replaces the job, so fixed or rotated credentials are tried at once instead of at the
    # next slow retry.
    credentials_version: str = ""
    #: ``None``: the operator's own CA bundle and proxy.
    connection: Connection | None = None

    @property
    def key(self) -> str:
        return pool_key(self.namespace, self.name)

    @property
    def token_secret(self) -> str:
        return naming.token_secret_name(self.name)


def with_userinfo(url: str, username: str, password: str) -> str:
    """A proxy URL with credentials in it, as ``http_proxy`` and ``requests`` take them."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{username}:{password}@{rest}"


@dataclass(frozen=True)
class ProxyRef:
    """One of a pool's proxies (``spec.proxy``): its scheme (http, https), URL and credential Secret."""

    scheme: str
    url: str
    credential_secret: str | None = None


@dataclass(frozen=True)
class Connection:
    """Where a pool's CA bundle and proxy credentials are (``spec.githubServerTLS``,
    ``spec.proxy``): names, never values; ``runnerpool.github.credentials`` reads them."""

    #: (ConfigMap or Secret, name, key) of the PEM CA bundle.
    ca: tuple[Literal["ConfigMap", "Secret"], str, str] | None = None
    proxies: tuple[ProxyRef, ...] = ()
    no_proxy: tuple[str, ...] = ()


@dataclass(frozen=True)
class StuckPod:
    """A deleted pool's pod still Terminating past its deletion time: its node does not answer
    (or someone else's finalizer holds it). ``given_up_at``: from then on, the finalizer lets the
    pool go without it, once GitHub has no runner of its name (``runnerpool.runners.lifecycle``)."""

    name: str
    node: str
    given_up_at: datetime


@dataclass(frozen=True)
class Drain:
    """What draining a deleted pool (its runners on GitHub, then its pods) left behind.

    ``busy`` runners are still running a job (listed busy, or GitHub answered 422): the pool
    must wait for them, and none of its pods is deleted meanwhile. ``deregistered`` runners
    were removed by this pass (204; a 404 is not counted). ``pods_deleted`` by this pass, and
    ``pods_left`` still there (being deleted or not): the finalizer waits until none is.
    ``listing_wait``: nothing was done yet, the scope's next listing (shared by every pool of
    the scope being drained) is due in that many seconds; ask again then. ``stuck``: pods still
    there past their deletion time; those given up on and confirmed runnerless are not in
    ``pods_left``.
    """

    busy: int
    deregistered: int
    pods_deleted: int = 0
    pods_left: int = 0
    listing_wait: float | None = None
    stuck: tuple[StuckPod, ...] = ()


@dataclass(frozen=True)
class RegistrationFailure:
    """Why the secret updater could not get a pool's runners what they register with (its
    registration token, or a JIT pod's config); ``since``: when the current run of failures began."""

    reason: Reason
    message: str
    since: datetime


@dataclass(frozen=True)
class WebhookSecretProblem:
    """Why webhook deliveries cannot move a pool that trusts its own webhook secret (its
    ``WebhookSecretReady`` condition): the Secret itself (``demand.secret``), or the copy the
    separate receiver reads (``demand.secret_mirror``). ``cause`` says what is wrong, never a
    secret's value; ``fix`` what the pool's owner can do."""

    reason: Reason
    cause: str
    fix: str


#: A workflow job's state as GitHub reports it, in the order states move.
JobState = Literal["queued", "in_progress", "completed"]
