"""The scale set protocol's failures, as typed exceptions the caller can act on.

Why typed: the caller's decision differs per failure. A runner that still runs a job must be
left alone (``JobStillRunning``), a runner already gone is done (``RunnerNotFound``), a queue
token that expired is refreshed (``MessageQueueTokenExpired``), another replica's live session
is waited out (``SessionConflict``), a scale set deleted on GitHub is recreated
(``ScaleSetNotFound``). The Actions service answers errors as JSON ``{"typeName":
"...Exception", "message": ...}``; ``errors.go`` of actions/scaleset maps the three names below
to sentinels, matched as substrings of ``typeName`` (the service prefixes namespaces).

All are ``GitHubError`` subclasses, so code that already handles the REST client's failures
(conditions with a reason, retry-after) handles these too. The server's own text stays out of
the messages (they end up in conditions); the exception name and status say what happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from runnerpool.github.errors import (
    BadCredentials,
    GitHubError,
    MalformedResponse,
    NotFound,
    RateLimited,
    Unavailable,
)
from runnerpool.github.types import asked_wait
from runnerpool.reasons import Reason
from runnerpool.scaleset.wire import json_body

__all__ = [
    "JobStillRunning",
    "ListenerStillRunning",
    "MessageQueueTokenExpired",
    "RunnerExists",
    "RunnerGroupNotFound",
    "RunnerNotFound",
    "ScaleSetError",
    "ScaleSetNotFound",
    "ScaleSetNotThePools",
    "ScaleSetStillUsed",
    "SessionConflict",
    "SessionNotFound",
    "error_for",
    "exception_name",
]

log = logging.getLogger(__name__)


class ScaleSetError(GitHubError):
    """A refusal of the Actions service; ``type_name`` is its exception name, when it sent one."""

    def __init__(self, message: str, *, status: int | None = None, type_name: str = "") -> None:
        super().__init__(message, status=status)
        self.type_name = type_name


class RunnerExists(ScaleSetError):  # noqa: N818 - the protocol's names
    """``AgentExistsException`` (409): a runner of that name is registered already."""


class RunnerNotFound(ScaleSetError):  # noqa: N818
    """``AgentNotFoundException`` (404): no such runner; removing it is already done."""


class JobStillRunning(ScaleSetError):  # noqa: N818
    """``JobStillRunningException`` (409): the runner runs a job; GitHub refuses its removal,
    which is the busy-runner guard on GitHub's side."""


class MessageQueueTokenExpired(ScaleSetError):  # noqa: N818
    """401 from the message queue: the session's queue token expired; refresh the session."""


class SessionConflict(ScaleSetError):  # noqa: N818
    """409 on creating a session: another owner still holds the scale set's session. ARC's
    listener retries every 30 s, 10 times, then gives up; so does ``MessageSession.open``."""


class ScaleSetNotFound(ScaleSetError, NotFound):  # noqa: N818
    """404 on a scale set's own path: it was deleted on GitHub (or never existed)."""


class ListenerStillRunning(GitHubError):  # noqa: N818
    """A deleted pool's scale set listener has not ended yet: it may still make the scale set,
    so the finalizer does not delete it (nor let the pool go) until it has. No refusal of the
    Actions service: a GitHubError so that the finalizer waits for it as for one."""

    default_reason = Reason.SCALE_SET_LISTENER_STOPPING


class ScaleSetStillUsed(GitHubError):  # noqa: N818
    """Another pool being deleted names the pool's scale set and is not gone yet: its runners
    there may still run jobs, which deleting the scale set would take. No refusal of the Actions
    service: a GitHubError so that the finalizer waits for it as for one."""

    default_reason = Reason.SCALE_SET_STILL_USED


class ScaleSetNotThePools(ScaleSetError):  # noqa: N818
    """The scale set id a pool's status holds is not the pool's scale set on GitHub (another
    name or runner group, or none): nothing is made in it, nor is it deleted."""

    default_reason = Reason.SCALE_SET_NOT_THE_POOLS


class SessionNotFound(ScaleSetError, NotFound):  # noqa: N818
    """404 on refreshing or deleting a session: it ended on GitHub's side (or its scale set was
    deleted); open a new one, which says ``ScaleSetNotFound`` if the scale set is gone."""


class RunnerGroupNotFound(ScaleSetError, NotFound):  # noqa: N818
    """No runner group of that name in the scope (the lookup answers an empty list)."""


#: ``typeName`` substrings and the error each means (errors.go's mapping).
_KNOWN = (
    ("AgentExistsException", RunnerExists),
    ("AgentNotFoundException", RunnerNotFound),
    ("JobStillRunningException", JobStillRunning),
)


def exception_name(body: bytes) -> str:
    """The ``typeName`` of an Actions service error body, or ``""``."""
    try:
        data: Any = json_body(body)
    except ValueError:
        return ""
    name = data.get("typeName") if isinstance(data, dict) else None
    return name if isinstance(name, str) else ""


def error_for(what: str, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> GitHubError:
    """The error an unexpected answer means; ``what`` names the call (no URL, no token). A
    429 or 5xx carries the wait its ``retry-after`` asked for, for the caller's backoff: the
    wire's own retries are spent by the time such an answer comes back here."""
    name = exception_name(body)
    detail = f"{what}: HTTP {status}" + (f" ({name})" if name else "")
    if body:
        log.debug("%s: the service said %r", detail, body[:200])
    for marker, kind in _KNOWN:
        if marker in name:
            return kind(detail, status=status, type_name=name)
    if status in (401, 403):
        return BadCredentials(detail + "; the Actions service refused the credentials", status=status)
    asked = asked_wait(headers, time.time())
    if status == 429:
        return RateLimited(detail, status=status, retry_after=asked)
    if status >= 500:
        return Unavailable(detail, status=status, retry_after=asked)
    return ScaleSetError(detail, status=status, type_name=name)


def malformed(what: str, problem: str) -> MalformedResponse:
    return MalformedResponse(f"{what}: {problem}", reason=Reason.MALFORMED_RESPONSE)
