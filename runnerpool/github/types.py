"""The values the GitHub client hands back, free of PyGithub and ``requests``.

``Scope`` is shared vocabulary and lives in ``runnerpool.domain``; everything here is what a
GitHub answer turns into.
"""

from __future__ import annotations

import email.utils
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "RUNNERS_PER_PAGE",
    "DeleteOutcome",
    "RateLimit",
    "RegistrationToken",
    "Runner",
    "RunnerGroup",
    "asked_wait",
    "bucket_of",
    "header",
]

#: GitHub documents a maximum page size of 100 for the runner listings; anything smaller only
#: multiplies requests against the rate limit.
RUNNERS_PER_PAGE = 100


@dataclass(frozen=True)
class RegistrationToken:
    """A ``config.sh --token`` value; ``repr`` hides it so it cannot leak into logs."""

    token: str = field(repr=False)
    expires_at: datetime


#: The runner group every scope has (``runner_group_id`` 1): what a pool without a group uses.
DEFAULT_RUNNER_GROUP_ID = 1


@dataclass(frozen=True)
class JitRequest:
    """What a just-in-time runner is made with (``generate-jitconfig``'s body)."""

    name: str
    labels: tuple[str, ...]
    runner_group_id: int = DEFAULT_RUNNER_GROUP_ID
    #: Relative to the runner's folder, or absolute (the pod's work volume).
    work_folder: str = "_work"
    #: A scale-set pool's runner: the config comes from this scale set (its labels and group
    #: are the scale set's), not from the REST ``generate-jitconfig``.
    scale_set_id: int | None = None


@dataclass(frozen=True)
class JitConfig:
    """A just-in-time runner, offline on GitHub until a runner runs ``encoded`` (once)."""

    runner_id: int
    encoded: str = field(repr=False)


#: A runner's ``status`` as GitHub reports it; whether it runs a job is ``busy``, apart.
ONLINE = "online"
OFFLINE = "offline"


@dataclass(frozen=True)
class Runner:
    """The subset of GitHub's runner object the operator decides on."""

    id: int
    name: str
    status: str
    busy: bool
    labels: tuple[str, ...]

    @property
    def online(self) -> bool:
        return self.status == ONLINE

    @property
    def offline(self) -> bool:
        return self.status == OFFLINE


#: A runner group open to the repositories (organization group) or organizations (enterprise
#: group) chosen for it, rather than to all of them.
SELECTED = "selected"


#: An organization group open to the organization's private repositories only.
PRIVATE = "private"


@dataclass(frozen=True)
class RunnerGroup:
    """An organization's or enterprise's runner group: the id a JIT config names, whether
    only chosen repositories or organizations may use it (``visibility`` ``selected``), and
    whether public repositories may (``allows_public_repositories``: GitHub's default is no;
    a server that does not say is taken to allow them)."""

    id: int
    name: str
    visibility: str
    default: bool
    allows_public: bool = True
    #: An enterprise's group shared with the organization (its listing shows both kinds).
    inherited: bool = False

    @property
    def selected(self) -> bool:
        return self.visibility == SELECTED

    @property
    def refuses_public(self) -> bool:
        """Jobs of public repositories never reach this group's runners."""
        return not self.allows_public or self.visibility == PRIVATE


#: The rate-limit bucket (``x-ratelimit-resource``) of the REST calls the budget rule counts.
CORE_BUCKET = "core"
#: Registration tokens' and JIT configs' bucket: a limit of its own.
REGISTRATION_BUCKET = "actions_runner_registration"


def bucket_of(headers: Mapping[str, Any] | None) -> str:
    """The rate-limit bucket an answer speaks of (``x-ratelimit-resource``); an answer without
    it (older GitHub Enterprise Servers) is core's."""
    resource = (header(headers, "x-ratelimit-resource") or "").strip().lower()
    return resource or CORE_BUCKET


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
        """``None`` when the answer carries no budget (GHES with rate limiting off, a proxy) or
        another bucket's (``x-ratelimit-resource``).

        A registration token or JIT config comes out of ``actions_runner_registration``, a
        bucket of its own with a limit of its own: taken for the core budget, its answers
        would hide a core budget nearly spent from the listings' slowdown rule. An answer
        without ``x-ratelimit-resource`` (older GitHub Enterprise Servers) is core's.
        """
        if bucket_of(headers) != CORE_BUCKET:
            return None
        raw = [header(headers, f"x-ratelimit-{name}") for name in ("remaining", "limit", "reset")]
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
    #: A runner of that name is another pool's (it carries another pool's ``<namespace>/<pool>``
    #: label, e.g. a same-named pool's in another namespace): left alone
    #: (``runnerpool.runners.leftovers``).
    NOT_THE_POOLS = "NotThePools"


def header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    if not headers:
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if str(key).lower() == wanted:
            return str(value)
    return None


def asked_wait(headers: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds an answer's ``retry-after`` asks for, given as seconds or as an HTTP date (RFC
    9110, both allowed), or ``None`` when it asks for nothing readable."""
    raw = header(headers, "retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)
