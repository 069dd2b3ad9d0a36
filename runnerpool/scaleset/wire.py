"""One protocol request: the bounded transport underneath, transient failures retried with
backoff on top.

Why not PyGithub: the Actions service is not the REST API (other host, other auth, long polls).
Why not another HTTP stack: ``runnerpool.github.transport.BoundedAdapter`` already gives every
call a total deadline, a size cap on the answer and the slow-host gate; a ``requests.Session``
with that adapter mounted and each attempt inside ``transport.deadline`` gets all three.

Retries follow the Go client (go-retryablehttp's default policy, 4 retries, waits doubling from
1 s up to 30 s): connection errors, 429 and 5xx other than 501. A ``Retry-After`` longer than the
longest wait is not slept through: the call fails ``RateLimited`` with it, so the caller's
scheduler, not a blocked thread, owns that wait. A call that ran out of its deadline is not
retried (a long poll would hold its thread five times over).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests

from runnerpool.github.errors import MalformedResponse, RateLimited, Unavailable
from runnerpool.github.route import Route
from runnerpool.github.types import header
from runnerpool.reasons import Reason

if TYPE_CHECKING:
    pass

__all__ = ["Policy", "Wire"]

log = logging.getLogger(__name__)

#: What the service holds a poll for before it answers 202 (about 50 s), plus room.
_POLL_HOLD = 50.0


@dataclass(frozen=True)
class Policy:
    """Deadlines, retries and the answer cap for one client."""

    timeout: float = 30.0
    #: A long poll's own deadline: longer than the service holds it.
    poll_timeout: float = _POLL_HOLD + 20.0
    retries: int = 4
    backoff_min: float = 1.0
    backoff_max: float = 30.0
    #: ``None``: the transport's cap (``runnerpool.github.transport.DEFAULT_MAX_RESPONSE_BYTES``).
    max_response_bytes: int | None = None


def _retryable(status: int) -> bool:
    return status == 429 or (status >= 500 and status != 501)


class Wire:
    """Sends requests for one client; ``sleep`` is injectable so tests see the backoff.

    ``route``: the pool's CA bundle and proxy (``spec.githubServerTLS``, ``spec.proxy``), the
    ones its REST calls take; every request goes inside ``route.used()``, so the bounded
    adapter sends it with that ``verify`` and those proxies. None: the operator's own.
    """

    def __init__(
        self,
        policy: Policy = Policy(),
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        user_agent: str = "runnerpool-scaleset",
        route: Route | None = None,
    ) -> None:
        self.policy = policy
        self.route = route
        self.sleep = sleep
        self.user_agent = user_agent
        self._session = session or requests.Session()
        self._transport = _transport()
        adapter = self._transport.BoundedAdapter()
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def take_route(self, route: Route | None) -> None:
        """The pool's CA bundle and proxy for every request from now on."""
        self.route = route

    def close(self) -> None:
        self._session.close()

    def send(
        self,
        method: str,
        url: str,
        *,
        what: str,
        headers: Mapping[str, str],
        body: Any = None,
        timeout: float | None = None,
        also_retry: Collection[int] = (),
    ) -> requests.Response:
        """The first answer that is not a transient failure (any status: the caller judges
        it); raises ``Unavailable``/``RateLimited``/``MalformedResponse`` otherwise.
        ``also_retry``: statuses retried like 5xx for this call (runner-registration's 401/403)."""
        policy, transport = self.policy, self._transport
        cap = (
            transport.DEFAULT_MAX_RESPONSE_BYTES
            if policy.max_response_bytes is None
            else policy.max_response_bytes
        )
        seconds = policy.timeout if timeout is None else timeout
        sent = {"User-Agent": self.user_agent, **headers}
        for attempt in range(policy.retries + 1):
            last = attempt == policy.retries
            try:
                routed = self.route.used() if self.route is not None else contextlib.nullcontext()
                with routed, transport.deadline(seconds, cap):
                    answer = self._session.request(method, url, headers=sent, json=body, timeout=seconds)
            except transport.DeadlineExceeded:
                raise Unavailable(
                    f"{what}: no complete answer within {seconds:g} s", reason=Reason.GITHUB_DEADLINE_EXCEEDED
                ) from None
            except transport.ResponseTooLarge:
                raise MalformedResponse(
                    f"{what}: the answer is larger than {cap} bytes",
                    reason=Reason.GITHUB_RESPONSE_TOO_LARGE,
                ) from None
            except transport.HostSlow:
                raise Unavailable(
                    f"{what}: not sent: the host is slow lately", reason=Reason.GITHUB_HOST_SLOW
                ) from None
            except requests.exceptions.RequestException as exc:
                if last:
                    raise Unavailable(f"{what}: {type(exc).__name__}") from None
                self._wait(what, attempt, None, f"{type(exc).__name__}")
                continue
            status = answer.status_code
            if last or not (_retryable(status) or status in also_retry):
                return answer
            self._wait(what, attempt, answer, f"HTTP {status}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wait(self, what: str, attempt: int, answer: requests.Response | None, why: str) -> None:
        policy = self.policy
        wait = min(policy.backoff_max, policy.backoff_min * 2**attempt)
        asked = None if answer is None else header(answer.headers, "retry-after")
        if asked is not None and asked.strip().isdigit():
            if float(asked) > policy.backoff_max:
                raise RateLimited(
                    f"{what}: HTTP {answer.status_code if answer else ''}".strip(), retry_after=float(asked)
                )
            wait = float(asked)
        log.info("%s: %s; retrying in %.3g s", what, why, wait)
        self.sleep(wait)


def _transport() -> Any:
    """``runnerpool.github.transport``, imported when the first wire is made: it patches
    PyGithub's connections, so importing it loads PyGithub, PyJWT and cryptography, which the
    operator leaves until a pool needs GitHub (tests/test_startup_imports.py)."""
    from runnerpool.github import transport  # noqa: PLC0415 - see the docstring

    return transport
