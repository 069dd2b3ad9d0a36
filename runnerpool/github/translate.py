"""PyGithub's exceptions and GitHub's status codes mapped onto ``runnerpool.github.errors``.

A rate limit above all must come out as ``RateLimited`` with the wait GitHub asked for, so
that the per-pool schedulers, not a sleeping request, own the backoff.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping
from typing import Any

from github import GithubException
from github.GithubException import RateLimitExceededExceedsMaxWait, RateLimitExceededException

from runnerpool.github.errors import BadCredentials, GitHubError, NotFound, NotSent, RateLimited, Unavailable
from runnerpool.github.types import asked_wait, bucket_of, header
from runnerpool.reasons import Reason

__all__ = ["translate_github_exception", "untrusted"]

log = logging.getLogger(__name__)


def _retry_after_seconds(headers: Mapping[str, Any] | None, now: float) -> float | None:
    """Seconds GitHub asked us to wait: ``retry-after`` first, else the primary-limit reset."""
    asked = asked_wait(headers, now)
    if asked is not None:
        return asked
    reset = header(headers, "x-ratelimit-reset")
    if reset is not None and header(headers, "x-ratelimit-remaining") == "0":
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


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _is_rate_limited(status: int, headers: Mapping[str, Any] | None, message: str) -> bool:
    if status not in (403, 429):
        return False
    if status == 429:
        return True
    if header(headers, "x-ratelimit-remaining") == "0" or header(headers, "retry-after") is not None:
        return True
    lowered = message.lower()
    return lowered.startswith("api rate limit exceeded") or "secondary rate limit" in lowered


def _bucket(headers: Mapping[str, Any] | None) -> str | None:
    """A primary limit's bucket; ``None`` for a secondary limit (budget left), which holds for
    every bucket of the credential."""
    return bucket_of(headers) if header(headers, "x-ratelimit-remaining") == "0" else None


def translate_github_exception(exc: GithubException, what: str, now: float) -> GitHubError:
    """Map a PyGithub exception to our taxonomy; ``what`` names the call for the message."""
    status = exc.status
    headers = exc.headers
    message = _github_message(exc.data)
    # The server's own text stays out: it goes into the pool's conditions and Events, where a
    # tenant who points spec.githubApiUrl at an internal host would read that host's answers.
    # The status and its standard phrase say what happened; the operator's log keeps the text.
    detail = f"{what}: HTTP {status} {_phrase(status)}".rstrip()
    if message:
        log.debug("%s: HTTP %s; the server said %r", what, status, message[:200])
    if isinstance(exc, RateLimitExceededException) or _is_rate_limited(status, headers, message):
        retry_after = _retry_after_seconds(headers, now)
        if retry_after is None and isinstance(exc, RateLimitExceededExceedsMaxWait):
            retry_after = exc.wait
        # None: GitHub named no time; the client's gate decides (runnerpool.github.rate_gate).
        return RateLimited(detail, retry_after=retry_after, status=status, bucket=_bucket(headers))
    if status == 401:
        return BadCredentials(detail + "; the token or GitHub App key was rejected", status=status)
    if status == 403:
        return BadCredentials(
            detail + "; the credentials lack the permission to manage self-hosted runners",
            reason=Reason.FORBIDDEN,
            status=status,
        )
    if status == 404:
        return NotFound(detail + "; check the name and that the credentials can see it", status=status)
    if 300 <= status < 400:
        return GitHubError(
            detail + "; a redirect not followed (only up to three on the same server are: this one "
            "points to another server, or one more): check the GitHub API URL and the pool's scope",
            reason=Reason.GITHUB_REDIRECTED,
            status=status,
        )
    if status >= 500 or status == 408:
        return Unavailable(detail, retry_after=_retry_after_seconds(headers, now), status=status)
    return GitHubError(detail, status=status)


def untrusted(what: str, exc: Exception) -> Unavailable:
    """A TLS failure in plain words (OpenSSL's own text is a traceback's worth of brackets).

    A certificate GitHub's host presents that chains to no trusted CA is the common case
    behind a GitHub Enterprise Server with a private CA, or a proxy that inspects TLS: the
    message says so and names the field that fixes it.
    """
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return NotSent(
            f"{what}: certificate signed by unknown authority: the server's TLS certificate is not "
            "signed by a CA the operator trusts for this pool; put the CA bundle that signed it in "
            "a ConfigMap or Secret and name it in spec.githubServerTLS",
            reason=Reason.GITHUB_CERTIFICATE_UNTRUSTED,
        )
    # Any other TLS failure may come after the request went (a record cut mid-answer).
    return Unavailable(f"{what}: a TLS failure talking to the server")
