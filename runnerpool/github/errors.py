"""The failures a GitHub call can end in, already classified for the caller."""

from __future__ import annotations

from typing import Any

from runnerpool.reasons import Reason

__all__ = [
    "BadCredentials",
    "GitHubError",
    "MalformedResponse",
    "NotFound",
    "NotSent",
    "RateLimited",
    "Unavailable",
]


class GitHubError(Exception):
    """Any failure talking to GitHub, already classified for the caller.

    ``reason`` is CamelCase so the reconciler can copy it into a condition unchanged;
    ``retry_after`` is GitHub's own hint (seconds) when it gave one. ``held_back``: the client
    itself refused the call before sending it, for a wait that ends by itself (GitHub's
    rate-limit wait not over, a host held slow): no try was made, so a caller that backs off
    per try does not count it as one.
    """

    default_reason = Reason.GITHUB_REQUEST_FAILED

    def __init__(
        self,
        message: str,
        *,
        reason: Reason | None = None,
        retry_after: float | None = None,
        status: int | None = None,
        held_back: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.retry_after = retry_after
        self.status = status
        self.held_back = held_back

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(reason={self.reason!r}, status={self.status!r}, message={self.message!r})"


class BadCredentials(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """401 (token invalid or expired) or 403 (valid but not allowed); fixing needs a human."""

    default_reason = Reason.BAD_CREDENTIALS


class NotFound(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """404 on a scope: a typo, a renamed owner, or credentials that cannot see it."""

    default_reason = Reason.SCOPE_NOT_FOUND


class RateLimited(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """Primary or secondary rate limit; ``retry_after`` says when asking again makes sense.

    ``bucket``: a primary limit's (``x-ratelimit-resource``: ``core``, or
    ``actions_runner_registration`` for registration tokens and JIT configs); ``None`` for a
    secondary limit, which is the credential's (``runnerpool.github.rate_gate``).
    """

    default_reason = Reason.RATE_LIMITED

    def __init__(self, message: str, *, bucket: str | None = None, **fields: Any) -> None:
        """``fields``: ``GitHubError``'s (reason, retry_after, status, held_back)."""
        super().__init__(message, **fields)
        self.bucket = bucket


class Unavailable(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """5xx, timeouts and connection errors: worth retrying soon."""

    default_reason = Reason.GITHUB_UNAVAILABLE


class NotSent(Unavailable):
    """The request never reached GitHub (a host held slow, a write's turn that left too little
    time, a server certificate the operator does not trust, the credential's own token not
    made, a closed client):
    whatever it asked for did not happen there. Any other ``Unavailable`` may have: GitHub may
    have acted on a request whose answer was lost."""


class MalformedResponse(GitHubError):  # noqa: N818 - names fixed by the shared interface
    """GitHub answered 2xx but not with the documented shape."""

    default_reason = Reason.MALFORMED_RESPONSE
