"""The scale-set long polls, held on one event loop instead of one blocked ``requests`` call each.

Why: issue 34's target is 1,000 idle message sessions at 2 % of one core or less. Each session
turns its long poll over about every 50 s (20 polls a second for 1,000), and through ``requests``
and ``runnerpool.github.transport.BoundedAdapter`` one turnover cost 1.8-3 ms of CPU (a quarter
of it ``merge_environment_settings``: the proxy environment and ``.netrc`` looked up on every
call): 5-6 % of a core. An aiohttp loop costs about 0.5 ms (``bench.scale_sets``; figures in
bench/README.md). So the call made 20 times a second, ``GET <messageQueueUrl>``, goes through
``LongPoller``: one daemon thread running one asyncio loop with one ``aiohttp.ClientSession``
(no connection limit: one connection per held poll). Every other call of the protocol stays on
``requests``. The listeners themselves run as tasks on this loop (``runnerpool.scaleset.listener``
says why) and await ``attempt``; no thread waits on this loop for a poll (``MessageSession.poll``,
the synchronous poll of tests and tools, goes through ``requests``).

Why by hand around aiohttp rather than an async client of the protocol: ``Wire.send`` and
``Wire.send_async`` keep the retries, the backoff and the mapping of failures for every path
(one judgement of an attempt's outcome, ``Wire._judged``). This module gives one attempt the
same bounds and route as the requests path:

* **Route**: TLS verified against ``route.verify`` (the pool's CA with the operator's) when the
  pool has a CA, else ``REQUESTS_CA_BUNDLE`` or certifi, as ``requests`` does (one
  ``ssl.SSLContext`` per file, made once); the proxy from ``route.proxies_for`` when the pool
  names one (``{}``: direct), else the operator's environment (read once per origin, where
  ``requests`` reads it on every call); a proxy's login goes as its ``Proxy-Authorization``, never logged.
* **Bounds**: the attempt's total deadline (``DeadlineExceeded``), the answer cap
  (``ResponseTooLarge``, at most ``max_bytes + 1`` read) and the slow-host gate
  (``transport.HOSTS``: a slow host's polls are refused, but a poll past its deadline does not
  make its host slow, ``LongPoller._call``); connection failures are ``requests`` ``ConnectionError``s, so
  ``Wire.send_async`` retries them as ``Wire.send`` retries the requests path's.
* **Answer**: a ``PollAnswer`` (status, headers, body, URL under ``requests.Response``'s names,
  the ones ``Wire`` and ``MessageSession`` read), not a ``requests.Response``: building one per
  poll (its cookie jar, two ``CaseInsensitiveDict``s) was a measurable part of each turnover.

aiohttp is imported when the first poll is made, never at the operator's start-up
(tests/test_startup_imports.py); so is ``runnerpool.github.transport``, as ``Wire`` does.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import functools
import logging
import os
import ssl
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests
import requests.utils

from runnerpool.github.route import Route

if TYPE_CHECKING:
    import aiohttp

__all__ = ["POLLER", "LongPoller", "Poll", "PollAnswer"]

log = logging.getLogger(__name__)

#: The slow-host gate's origin, the proxy (None: direct) and the proxy's login header.
#: (``transport.Hop``: the slow-host key, the proxy, its ``Proxy-Authorization``).
_Routing = tuple[tuple[tuple[str, str, int], tuple[str, str, int] | None], str | None, dict[str, str]]


@dataclass(frozen=True)
class Poll:
    """One attempt: what is sent, its deadline, the answer's cap and the route."""

    method: str
    url: str
    headers: Mapping[str, str]
    timeout: float
    max_bytes: int
    route: Route | None


@dataclass(frozen=True, slots=True)
class PollAnswer:
    """A poll's answer, named as ``requests.Response`` names what ``Wire`` and
    ``MessageSession`` read of it; ``headers`` are aiohttp's, case-insensitive as requests'."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    url: str


class LongPoller:
    """One loop thread for the process, started by the first poll. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Touched on the loop's thread only.
        self._http: aiohttp.ClientSession | None = None
        self._environment: dict[str, dict[str, str]] = {}
        #: Per origin and route: the slow-host gate's origin, the proxy and its login header.
        self._routes: dict[tuple[str, Route | None], _Routing] = {}

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started if it was not: the listeners' tasks run on it too
        (``runnerpool.scaleset.listener``)."""
        return self._started()

    async def attempt(self, poll: Poll) -> PollAnswer:
        """One attempt, awaited by a task on the loop itself. Raises ``transport.DeadlineExceeded``,
        ``ResponseTooLarge``, ``HostSlow`` or ``requests.exceptions.ConnectionError``."""
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("a scale set poll awaited outside the poll loop")
        return await self._call(poll)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="scale-set-long-polls", daemon=True).start()
                atexit.register(self._shut)
                self._loop = loop
            return self._loop

    def _shut(self) -> None:
        """At exit: close the connections, waiting a second at most (never hangs the exit)."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        closing = asyncio.run_coroutine_threadsafe(self._close(), loop)
        try:
            closing.result(1.0)
        except Exception as exc:  # exiting: nothing more to do about it
            log.debug("the poll loop's connections were not closed: %s", type(exc).__name__)
        loop.call_soon_threadsafe(loop.stop)

    async def _close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def _call(self, poll: Poll) -> PollAnswer:
        """The attempt behind the slow-host gate, as ``BoundedAdapter`` sends one, but a poll
        that outlives its deadline leaves the gate as it found it: it neither marks its host
        slow nor clears a mark another call's missed deadline set.

        Why: the service holds a poll silent for about 50 s by design, so a poll's silence is
        no sign of the host being slow (ARC gives each listener a client of its own with a
        5-minute timeout). Counted as one, a single stalled poll had every other session's
        poll, and on a GHES every call to that host, refused (``HostSlow``, shown as
        ``GITHUB_HOST_SLOW``) for the probe interval. And what the gate guards, the shared
        threads, a held poll does not take: it is awaited on this loop. No tenant is passed to
        the gate, so there is no call in flight to count down on that path."""
        from runnerpool.github import transport  # noqa: PLC0415 - see the module's docstring

        routing = self._routing(poll.url, poll.route)
        origin = routing[0]
        transport.HOSTS.enter(origin)
        overran = False
        try:
            return await self._attempt(poll, routing)
        except transport.DeadlineExceeded:
            overran = True
            raise
        finally:
            if not overran:
                transport.HOSTS.leave(origin, timed_out=False)

    def _routing(self, url: str, route: Route | None) -> _Routing:
        """What depends on ``url``'s origin and the route only, decided once for both (a
        session polls one URL every 50 s): not three ``urlsplit`` a poll."""
        from runnerpool.github import transport  # noqa: PLC0415 - see the module's docstring

        key = ("/".join(url.split("/", 3)[:3]), route)
        found = self._routes.get(key)
        if found is None:
            proxy, headers = self._proxy(url, route)
            found = self._routes[key] = (transport.hop_of(url, proxy), proxy, headers)
        return found

    async def _attempt(self, poll: Poll, routing: _Routing) -> PollAnswer:
        import aiohttp  # noqa: PLC0415 - see the module's docstring
        import yarl  # noqa: PLC0415 - comes with aiohttp

        from runnerpool.github import transport  # noqa: PLC0415 - see the module's docstring

        route = poll.route
        _, proxy, proxy_headers = routing
        try:
            async with self._session().request(
                poll.method,
                yarl.URL(poll.url, encoded=True),
                headers=poll.headers,
                timeout=aiohttp.ClientTimeout(total=poll.timeout),
                ssl=_context(route.verify if route is not None else None),
                proxy=proxy,
                proxy_headers=proxy_headers or None,
                allow_redirects=False,
            ) as answer:
                return await _response(answer, poll.url, poll.max_bytes)
        except requests.exceptions.RequestException:  # the cap's (an OSError): as it is
            raise
        except TimeoutError:
            raise transport.DeadlineExceeded(f"no complete answer within {poll.timeout:g} s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise requests.exceptions.ConnectionError(f"{type(exc).__name__}: {exc}") from exc

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp  # noqa: PLC0415 - see the module's docstring

        if self._http is None:
            # trust_env=False: the proxies are chosen here, as the requests path chooses them.
            connector = aiohttp.TCPConnector(limit=0)  # one connection per held poll
            self._http = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._http

    def _proxy(self, url: str, route: Route | None) -> tuple[str | None, dict[str, str]]:
        """The proxy for ``url`` without its login, and the login as ``Proxy-Authorization``
        (what ``requests`` sends; aiohttp's own ``proxy_auth`` is deprecated)."""
        proxies = route.proxies_for(url) if route is not None else None
        if proxies is None:
            proxies = self._environment_proxies(url)
        chosen = requests.utils.select_proxy(url, proxies)
        if not chosen:
            return None, {}
        parts = urllib.parse.urlsplit(chosen)
        if parts.username is None:
            return chosen, {}
        login = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        try:
            encoded = login.encode("latin1")  # as requests encodes a login
        except UnicodeEncodeError:
            encoded = login.encode()
        bare = parts.hostname or ""
        if ":" in bare:
            bare = f"[{bare}]"
        if parts.port is not None:
            bare = f"{bare}:{parts.port}"
        header = {"Proxy-Authorization": f"Basic {base64.b64encode(encoded).decode()}"}
        return urllib.parse.urlunsplit(parts._replace(netloc=bare)), header

    def _environment_proxies(self, url: str) -> dict[str, str]:
        """The operator's own proxies for ``url``'s origin, read from the environment once."""
        parts = urllib.parse.urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        found = self._environment.get(origin)
        if found is None:
            found = self._environment[origin] = dict(requests.utils.get_environ_proxies(origin))
        return found


async def _response(answer: aiohttp.ClientResponse, url: str, max_bytes: int) -> PollAnswer:
    """The answer, its body read up to the cap."""
    from runnerpool.github import transport  # noqa: PLC0415 - see the module's docstring

    length = answer.headers.get("Content-Length", "")
    if length.strip().isdigit() and int(length) > max_bytes:
        raise transport.ResponseTooLarge(f"the answer announces {int(length)} bytes, more than {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = await answer.content.read(max_bytes + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise transport.ResponseTooLarge(f"the answer is larger than {max_bytes} bytes")
    return PollAnswer(answer.status, answer.headers, b"".join(chunks), url)


@functools.cache
def _context(cafile: str | None) -> ssl.SSLContext:
    """TLS as the requests path verifies it: the route's bundle, else the operator's (cached
    per file: building a context reads and parses the whole bundle)."""
    if cafile is None:
        import certifi  # noqa: PLC0415 - comes with requests

        cafile = os.environ.get("REQUESTS_CA_BUNDLE") or certifi.where()
    return ssl.create_default_context(cafile=cafile)


#: The process's one loop: every ``Wire`` polls through it.
POLLER = LongPoller()
