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

The listeners' long poll (``MessageSession.poll_async``) is the one call that goes another
way: ``send_async``, awaited by a task on the process's event loop, makes each attempt there
(``runnerpool.scaleset.poller``, which says why) with the same deadline, cap, route and
slow-host gate, and the same retries: ``send`` and ``send_async`` judge each attempt's outcome
with ``_judged``, whichever ``Answer`` it is (a ``requests.Response``, a poll's ``PollAnswer``).
``close`` cancels the polls in flight, so a listener whose client is closed gets
``Unavailable`` at once. A poll from a thread (``MessageSession.poll``) is a plain ``send``.

Every answer's body is read as JSON by ``json_body``, which drops a leading UTF-8 byte-order
mark (the function says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import requests

from runnerpool.github.errors import MalformedResponse, NotSent, RateLimited, Unavailable
from runnerpool.github.route import Route
from runnerpool.github.types import asked_wait
from runnerpool.reasons import Reason

if TYPE_CHECKING:
    from runnerpool.scaleset.poller import PollAnswer

__all__ = ["Answer", "Policy", "Wire", "json_body"]

log = logging.getLogger(__name__)

#: What the service holds a poll for before it answers 202 (about 50 s), plus room.
_POLL_HOLD = 50.0
#: The UTF-8 byte-order mark.
_BOM = b"\xef\xbb\xbf"


def json_body(body: bytes) -> Any:
    """An answer's body as JSON, a UTF-8 byte-order mark before it dropped; ``ValueError`` when
    it is not JSON. Every answer of the protocol is read through here.

    Why: the Actions service may start a body with a byte-order mark (actions/scaleset's client
    trims one from every answer, as ARC's first client did), and ``requests.Response.json``
    decodes with the charset the answer names (``utf-8``), which refuses it ("Unexpected UTF-8
    BOM"): the answer was taken for malformed and the pool showed ``ScaleSetUnreachable``."""
    return json.loads(body.removeprefix(_BOM))


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


class Answer(Protocol):
    """What is read of an answer, ``requests.Response``'s or a poll's ``PollAnswer``
    (``headers`` case-insensitive in both)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


A = TypeVar("A", bound=Answer)


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
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        user_agent: str = "runnerpool-scaleset",
        route: Route | None = None,
    ) -> None:
        self.policy = policy
        self.route = route
        self.sleep = sleep
        #: ``sleep`` for ``send_async``'s waits, awaited on the loop.
        self.pause = pause
        self.user_agent = user_agent
        self._session = session or requests.Session()
        self._transport = _transport()
        adapter = self._transport.BoundedAdapter()
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._lock = threading.Lock()
        self._closed = False
        #: The polls awaited on the loop (``send_async``), for ``close`` to cancel.
        self._tasks: set[asyncio.Task[PollAnswer]] = set()

    def take_route(self, route: Route | None) -> None:
        """The pool's CA bundle and proxy for every request from now on."""
        self.route = route

    def close(self) -> None:
        """Close the connections and cancel the long polls in flight (their awaiters get
        ``Unavailable``)."""
        with self._lock:
            self._closed = True
            tasks, self._tasks = self._tasks, set()
        for task in tasks:
            with contextlib.suppress(RuntimeError):  # the loop is closed (exiting): nothing held
                task.get_loop().call_soon_threadsafe(task.cancel)
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
        seconds, cap, sent = self._prepared(headers, timeout)
        for attempt in range(self.policy.retries + 1):
            outcome = _outcome(lambda: self._request(method, url, sent, body=body, seconds=seconds, cap=cap))
            try:
                step = self._judged(what, attempt, outcome, seconds=seconds, cap=cap, also_retry=also_retry)
            except NotSent as err:
                if attempt == 0:
                    raise
                # An earlier attempt went (a reset, a 5xx): the service may have acted on it.
                raise Unavailable(err.message, reason=err.reason) from None
            if not isinstance(step, float):
                return step
            self.sleep(step)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def send_async(
        self, method: str, url: str, *, what: str, headers: Mapping[str, str], timeout: float | None = None
    ) -> PollAnswer:
        """``send`` of a long poll (no body), awaited on the poll loop itself (a listener's
        task, ``runnerpool.scaleset.listener``): each attempt on that loop, not through
        ``requests``, with the same retries and failures. Must run on ``poller.POLLER``'s loop."""
        seconds, cap, sent = self._prepared(headers, timeout)
        for attempt in range(self.policy.retries + 1):
            outcome = await _outcome_async(
                self._long_poll_async(method, url, what, headers=sent, seconds=seconds, cap=cap)
            )
            step = self._judged(what, attempt, outcome, seconds=seconds, cap=cap, also_retry=())
            if not isinstance(step, float):
                return step
            await self.pause(step)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _prepared(
        self, headers: Mapping[str, str], timeout: float | None
    ) -> tuple[float, int, dict[str, str]]:
        """The attempt's deadline, the answer cap and the headers sent."""
        policy = self.policy
        cap = (
            self._transport.DEFAULT_MAX_RESPONSE_BYTES
            if policy.max_response_bytes is None
            else policy.max_response_bytes
        )
        seconds = policy.timeout if timeout is None else timeout
        return seconds, cap, {"User-Agent": self.user_agent, **headers}

    def _judged(
        self,
        what: str,
        attempt: int,
        outcome: A | Exception,
        *,
        seconds: float,
        cap: int,
        also_retry: Collection[int],
    ) -> A | float:
        """What one attempt's outcome means, for the sync and the async loop alike: the answer
        to return, or the seconds to wait before the next attempt; raises when the call fails."""
        transport, last = self._transport, attempt == self.policy.retries
        if isinstance(outcome, transport.DeadlineExceeded):
            raise Unavailable(
                f"{what}: no complete answer within {seconds:g} s", reason=Reason.GITHUB_DEADLINE_EXCEEDED
            ) from None
        if isinstance(outcome, transport.ResponseTooLarge):
            raise MalformedResponse(
                f"{what}: the answer is larger than {cap} bytes", reason=Reason.GITHUB_RESPONSE_TOO_LARGE
            ) from None
        if isinstance(outcome, transport.HostSlow):
            raise NotSent(
                f"{what}: not sent: {outcome}", reason=Reason.GITHUB_HOST_SLOW, held_back=True
            ) from None
        if isinstance(outcome, requests.exceptions.RequestException):
            why = type(outcome.__cause__ or outcome).__name__  # the poll loop's: aiohttp's own error
            if last:
                raise Unavailable(f"{what}: {why}") from None
            return self._wait(what, attempt, None, why)
        if isinstance(outcome, Exception):
            raise outcome
        status = outcome.status_code
        if last or not (_retryable(status) or status in also_retry):
            return outcome
        return self._wait(what, attempt, outcome, f"HTTP {status}")

    def _request(
        self, method: str, url: str, headers: Mapping[str, str], *, body: Any, seconds: float, cap: int
    ) -> requests.Response:
        """One attempt through ``requests`` and the bounded adapter, on the pool's route. No
        redirect is followed: a redirect would reach a URL nobody checked (the service URL is,
        ``connection.ServiceHosts``), so a 3xx is the answer the caller judges, as the poll
        loop's is."""
        routed = self.route.used() if self.route is not None else contextlib.nullcontext()
        with routed, self._transport.deadline(seconds, cap):
            answer: requests.Response = self._session.request(
                method, url, headers=headers, json=body, timeout=seconds, allow_redirects=False
            )
        return answer

    async def _long_poll_async(
        self, method: str, url: str, what: str, *, headers: Mapping[str, str], seconds: float, cap: int
    ) -> PollAnswer:
        """One attempt awaited on the poll loop; ``Unavailable`` (not retried) once ``close``
        cancelled it. A cancel of the caller's own task goes through as it is."""
        from runnerpool.scaleset import poller  # noqa: PLC0415 - its module says why it waits

        with self._lock:
            if self._closed:
                raise NotSent(f"{what}: not sent: the client is closed")
            sent = poller.Poll(method, url, headers, seconds, cap, self.route)
            poll = asyncio.ensure_future(poller.POLLER.attempt(sent))
            self._tasks.add(poll)
        try:
            return await poll
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if caller is not None and caller.cancelling():
                raise
            raise Unavailable(f"{what}: cancelled: the client was closed") from None
        finally:
            with self._lock:
                self._tasks.discard(poll)

    def _wait(self, what: str, attempt: int, answer: Answer | None, why: str) -> float:
        """The wait before the next attempt (``RateLimited`` when the service asks for longer)."""
        policy = self.policy
        wait = float(min(policy.backoff_max, policy.backoff_min * 2**attempt))
        asked = None if answer is None else asked_wait(answer.headers, time.time())
        if asked is not None:
            if asked > policy.backoff_max:
                raise RateLimited(
                    f"{what}: HTTP {answer.status_code if answer else ''}".strip(),
                    retry_after=asked,
                    status=answer.status_code if answer else None,
                )
            wait = asked
        log.info("%s: %s; retrying in %.3g s", what, why, wait)
        return wait


def _transport() -> Any:
    """``runnerpool.github.transport``, imported when the first wire is made: it patches
    PyGithub's connections, so importing it loads PyGithub, PyJWT and cryptography, which the
    operator leaves until a pool needs GitHub (tests/test_startup_imports.py)."""
    from runnerpool.github import transport  # noqa: PLC0415 - see the docstring

    return transport


def _outcome(call: Callable[[], A]) -> A | Exception:
    """An attempt's answer, or what it raised (for ``Wire._judged``)."""
    try:
        return call()
    except Exception as exc:
        return exc


async def _outcome_async(call: Awaitable[A]) -> A | Exception:
    """``_outcome`` of an attempt awaited on the loop."""
    try:
        return await call
    except Exception as exc:
        return exc
