"""Every GitHub request, bounded: one deadline per call, a size cap per answer, and a slow host
held to one request at a time.

Why here: PyGithub hands ``timeout`` to ``requests`` as a *per read* timeout. A server that
sends one byte a second never trips it, so a call with ``timeout=3`` was held for 12 s (and
would have been for hours), and the body was read whole, however large. Pools name their
GitHub (``spec.githubApiUrl``), and the operator's token and runner-manager threads are shared
by every tenant: four such calls stopped token refresh and runner cleanup cluster-wide.

What this module does, for every request PyGithub sends (``install`` puts it under PyGithub's
``Requester`` once per process, for every client, GitHub App token mints included):

* **A total deadline per call** (``deadline``: connect, TLS, request, headers, body and the
  transport's own retries). A watchdog thread shuts the call's sockets down when it passes,
  whatever the socket is doing; the blocked read ends at once and the call raises
  ``DeadlineExceeded``.
* **A size cap per answer** (``ResponseTooLarge``): a ``Content-Length`` above it is refused
  before the body is read, and a body that grows past it is dropped at the cap.
* **A slow host is probed, not queued for** (``SlowHosts``): once a call to a host ran out of
  its deadline, calls to that host are refused at once (``HostSlow``) but for one probe every
  ``PROBE_INTERVAL`` seconds, until a call to it answers in time. So a slow or hostile host
  holds the shared threads for one deadline at most, and then one thread now and then, never
  all of them.
* **Redirects on the same server are followed** (``MAX_REDIRECTS``), the request repeated as it
  was, query included, to the ``Location`` GitHub gives for a renamed or transferred repository
  or organization (301 for GET, 307 for the rest). PyGithub follows only a 301, to its path
  alone (a listing's ``per_page`` and ``name`` lost), and hands a 307 back as if it were an
  answer: a runner deletion answered 307 read as "deleted". A redirect to another server is
  not followed: the request carries the credential.
* **A slow tenant gets one call at a time** (``SlowHosts``, by ``Route.tenant``): a namespace
  one of whose calls ran out of its deadline in the last ``PROBE_INTERVAL`` seconds has its
  other calls refused at once while one of its calls is in flight. The host gate alone let a
  tenant whose every pool names a proxy of its own (each a new host) hold every shared thread
  for a deadline per pool, one after the other.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
from github.Requester import HTTPRequestsConnectionClass, HTTPSRequestsConnectionClass, Requester

from runnerpool.github import route

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DeadlineExceeded",
    "HostSlow",
    "ResponseTooLarge",
    "SlowHosts",
    "deadline",
    "install",
    "time_left",
]

#: The largest answer read (bytes, after decompression). GitHub's largest pages the operator
#: asks for (100 jobs with their steps, 100 repositories of a runner group) are around 1 MiB.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024
#: Seconds between two probes of a slow host (the calls in between are refused at once).
PROBE_INTERVAL = 30.0
#: Redirects followed per request (a moved repository is one; a loop is cut short).
MAX_REDIRECTS = 3
_FOLLOWED = frozenset({301, 302, 307, 308})


class DeadlineExceeded(requests.exceptions.Timeout):
    """The call had no complete answer within its deadline."""


class ResponseTooLarge(requests.exceptions.RequestException):
    """The answer is larger than the cap; it was not read past it."""


class HostSlow(requests.exceptions.ConnectionError):
    """The host ran out of a deadline lately and was probed less than ``PROBE_INTERVAL`` ago."""


class _Expired(Exception):  # noqa: N818 - private, and not an OSError on purpose
    """Raised inside urllib3 once the call's deadline passed: not one of the errors urllib3
    retries, so the call ends at once instead of trying again."""


# -- the deadline of the call in progress, and its watchdog -------------------------------------


class _Call:
    """One call's deadline and the sockets it uses (duplicates of their descriptors, which the
    call owns: shutting one down ends the connection however the original is used)."""

    def __init__(self, expires: float, max_bytes: int) -> None:
        self.expires = expires
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False

    def remaining(self) -> float:
        return self.expires - time.monotonic()

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None or sock.fileno() < 0:
            return
        dup = socket.socket(fileno=os.dup(sock.fileno()))
        with self._lock:
            self._sockets.append(dup)
            if not self.expired:
                return
        _shut(dup)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def close(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread that expires calls at their deadlines (started with the first call)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Call]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, call: _Call) -> None:
        with self._cond:
            heapq.heappush(self._heap, (call.expires, next(self._seq), call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="github-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self, call: _Call) -> None:
        with self._cond:
            self._heap = [entry for entry in self._heap if entry[2] is not call]
            heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                expires, _, call = self._heap[0]
                wait = expires - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            call.expire()


_WATCHDOG = _Watchdog()
_current = threading.local()


def _active() -> _Call | None:
    return getattr(_current, "call", None)


def time_left() -> float | None:
    """Seconds left of this thread's current call (``None``: outside any ``deadline`` block)."""
    call = _active()
    return None if call is None else call.remaining()


@contextlib.contextmanager
def deadline(seconds: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> Iterator[None]:
    """Every request made by this thread inside the block shares one deadline ``seconds`` from
    now (a block inside another keeps the sooner one) and reads at most ``max_bytes`` per
    answer."""
    outer = _active()
    expires = time.monotonic() + seconds
    if outer is not None and outer.expires <= expires:
        yield
        return
    call = _Call(expires, max_bytes)
    _current.call = call
    _WATCHDOG.arm(call)
    try:
        yield
    finally:
        _WATCHDOG.disarm(call)
        _current.call = outer
        call.close()


# -- slow hosts ----------------------------------------------------------------------------------


Origin = tuple[str, str, int]
#: A host as one route reaches it: its origin and the origin of the proxy in between, if any.
Hop = tuple[Origin, Origin | None]


@dataclass
class SlowHosts:
    """The hosts whose last call ran out of its deadline, each with the time its next probe may
    go, and the tenants one of whose calls did lately; thread-safe, one per process (``HOSTS``).
    A host that answers in time keeps no entry: the map holds slow hosts only.

    Keyed by the ``Hop``, the host *and the proxy its call went through*: a pool's
    ``spec.proxy`` is its tenant's to choose, and a proxy that stalls (one the tenant runs in
    its own namespace will do) must slow that route only, not api.github.com for every
    tenant. And by the tenant (the pool's namespace): each of a tenant's pools may name a proxy
    of its own, a new hop each, so a tenant whose call ran out of its deadline in the last
    ``probe_interval`` seconds makes one call at a time, whichever hosts they go to. Its calls
    on a healthy route wait their turn only while another of its calls is in flight."""

    probe_interval: float = PROBE_INTERVAL
    clock: Callable[[], float] = time.monotonic
    _next_probe: dict[Hop, float] = field(default_factory=dict)
    #: Tenants with a call out of its deadline lately: until when they make one call at a time.
    _slow_tenants: dict[str, float] = field(default_factory=dict)
    _in_flight: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, hop: Hop, tenant: str = "") -> None:
        """Raises ``HostSlow`` for a slow host whose probe is not due, or for a slow tenant with
        a call in flight; a due probe goes. Every ``enter`` that returns needs its ``leave``."""
        now = self.clock()
        with self._lock:
            # The words go into conditions and are compared to tell a new failure from the same
            # one again: no countdown in them, or every retry would be "new".
            if tenant and self._in_flight.get(tenant, 0) and now < self._slow_tenants.get(tenant, 0.0):
                raise HostSlow(
                    f"a GitHub call for namespace {tenant} ran out of its deadline lately: its calls go "
                    f"one at a time until {self.probe_interval:g} s pass without a missed deadline"
                )
            due = self._next_probe.get(hop)
            if due is not None:
                if now < due:
                    raise HostSlow(
                        f"{_describe(hop)} ran out of a deadline lately and is only probed every "
                        f"{self.probe_interval:g} s until it answers in time"
                    )
                self._next_probe[hop] = now + self.probe_interval
            if tenant:
                self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1

    def leave(self, hop: Hop, tenant: str = "", *, timed_out: bool) -> None:
        now = self.clock()
        with self._lock:
            if timed_out:
                self._next_probe[hop] = now + self.probe_interval
            else:
                self._next_probe.pop(hop, None)
            if not tenant:
                return
            left = self._in_flight.get(tenant, 0) - 1
            if left > 0:
                self._in_flight[tenant] = left
            else:
                self._in_flight.pop(tenant, None)
            if timed_out:
                self._slow_tenants[tenant] = now + self.probe_interval
            elif self._slow_tenants.get(tenant, now) <= now:
                self._slow_tenants.pop(tenant, None)


HOSTS = SlowHosts()


def origin_of(url: str) -> Origin:
    parsed = urllib.parse.urlsplit(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, (parsed.hostname or "").lower(), port


def hop_of(url: str, proxy: str | None) -> Hop:
    """``url``'s host as reached through ``proxy`` (its user and password are not kept)."""
    return origin_of(url), origin_of(proxy) if proxy else None


def _describe(hop: Hop) -> str:
    (_, host, port), proxy = hop
    # The proxy unnamed: it may be the operator's own (HTTPS_PROXY), not the tenant's to see.
    return f"{host}:{port}" + (" through a proxy" if proxy is not None else "")


# -- the pieces under requests: connections that tell the call their sockets --------------------


class _WatchedMixin:
    """A urllib3 connection whose sockets the current call's watchdog can shut down."""

    sock: socket.socket | None

    def _new_conn(self) -> socket.socket:
        call = _active()
        if call is not None and call.expired:
            raise _Expired
        sock: socket.socket = super()._new_conn()  # type: ignore[misc]
        if call is not None:
            call.watch(sock)  # before TLS: the handshake is bounded too
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        call = _active()
        if call is not None:
            if call.expired:
                raise _Expired
            call.watch(self.sock)  # a kept-alive connection: no _new_conn this time
        super().request(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_WatchedMixin, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_WatchedMixin, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class BoundedAdapter(requests.adapters.HTTPAdapter):
    """``HTTPAdapter`` whose requests keep the current call's deadline (or, outside any
    ``deadline`` block, one of their own from the ``timeout`` they are given), read at most the
    cap, and respect ``HOSTS``."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager

    def send(  # noqa: PLR0917 - HTTPAdapter.send's own signature
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: bool | str = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        chosen = route.active()
        tenant = chosen.tenant if chosen is not None else ""
        verify, proxies = _routed(chosen, request.url or "", verify, proxies)
        own = _seconds(timeout)
        block = deadline(own) if _active() is None and own is not None else contextlib.nullcontext()
        with block:
            call = _active()
            url = request.url or ""
            origin = hop_of(url, requests.utils.select_proxy(url, proxies) if proxies else None)
            HOSTS.enter(origin, tenant)
            timed_out = False
            try:
                for hop in range(MAX_REDIRECTS + 1):
                    response = self._send(
                        call, request, stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
                    )
                    target = _same_origin_redirect(request, response) if hop < MAX_REDIRECTS else None
                    if target is None:
                        return response
                    response.close()
                    request = _sent_again(request, target)
                raise AssertionError("unreachable: the last hop returns")
            except DeadlineExceeded:
                timed_out = True
                raise
            finally:
                HOSTS.leave(origin, tenant, timed_out=timed_out)

    def _send(
        self, call: _Call | None, request: requests.PreparedRequest, stream: bool, **kwargs: Any
    ) -> requests.Response:
        if call is None:
            return super().send(request, stream, **kwargs)
        remaining = call.remaining()
        if remaining <= 0 or call.expired:
            raise DeadlineExceeded("no complete answer before the call's deadline", request=request)
        try:
            kwargs["timeout"] = remaining
            response = super().send(request, True, **kwargs)
            if not stream:
                _read_capped(response, call.max_bytes)
        except _Expired:
            raise DeadlineExceeded("no complete answer before the call's deadline", request=request) from None
        except requests.exceptions.RequestException as err:
            if call.expired and not isinstance(err, ResponseTooLarge):
                raise DeadlineExceeded(
                    "no complete answer before the call's deadline", request=request
                ) from None
            raise
        if call.expired:  # the body ended just as the watchdog fired: still too late to trust
            raise DeadlineExceeded("no complete answer before the call's deadline", request=request)
        return response


def _same_origin_redirect(request: requests.PreparedRequest, response: requests.Response) -> str | None:
    """Where to send ``request`` again: the Location of a 301, 302, 307 or 308 on the server it
    was sent to (GitHub's answer for a renamed or transferred repository or organization);
    ``None`` for any other answer, and for a redirect elsewhere, which is not followed (the
    request carries the credential) and reaches the client as what it is."""
    location = response.headers.get("location")
    if response.status_code not in _FOLLOWED or not location:
        return None
    target = urllib.parse.urljoin(request.url or "", location)
    return target if origin_of(target) == origin_of(request.url or "") else None


def _sent_again(request: requests.PreparedRequest, target: str) -> requests.PreparedRequest:
    """``request`` as it was (method, headers, body: GitHub redirects with 301 for GET and 307
    for the rest, both meaning "the same request, there"), to ``target``, query included."""
    again = request.copy()
    again.prepare_url(target, None)
    return again


def _routed(chosen: route.Route | None, url: str, verify: bool | str, proxies: Any) -> tuple[bool | str, Any]:
    """The ``verify`` and proxies of the pool whose call this is (``chosen``: its route, if any)."""
    if chosen is None:
        return verify, proxies
    ours = chosen.proxies_for(url)
    return chosen.verify or verify, proxies if ours is None else ours


def _seconds(timeout: Any) -> float | None:
    """The longest part of a requests ``timeout`` (a number or a (connect, read) pair)."""
    if isinstance(timeout, (int, float)):
        return float(timeout)
    if isinstance(timeout, tuple):
        parts = [float(t) for t in timeout if isinstance(t, (int, float))]
        return max(parts) if parts else None
    return None


def _read_capped(response: requests.Response, cap: int) -> None:
    """Read the body into ``response.content``, refusing more than ``cap`` bytes."""
    length = response.headers.get("content-length", "")
    if length.strip().isdigit() and int(length) > cap:
        response.close()
        raise ResponseTooLarge(
            f"the answer announces {int(length)} bytes, more than {cap}", response=response
        )
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(_CHUNK):
        size += len(chunk)
        if size > cap:
            response.close()
            raise ResponseTooLarge(f"the answer is larger than {cap} bytes", response=response)
        chunks.append(chunk)
    response._content = b"".join(chunks)


class _PerThread:
    """An attribute of which each thread sees its own value."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        try:
            return getattr(instance._per_thread, self._name)
        except AttributeError:
            raise AttributeError(self._name) from None

    def __set__(self, instance: Any, value: Any) -> None:
        setattr(instance._per_thread, self._name, value)


class _RequestPerThread:
    """PyGithub's connections keep the request to send on themselves, from ``request()`` to
    ``getresponse()``, and a requester keeps one connection (``install``), which every thread
    using the client shares: one client serves its credential's runner rounds, token fills,
    polling and gates. A listing begun by another thread between the two calls was sent in a
    runner deletion's place, its 200 taken for "deleted" and the busy runner's pod let go
    (PyGithub/PyGithub#2052, still open). Here each thread keeps its own request, and PyGithub's
    two methods run unchanged; the connection's session and pool are thread-safe as they are.
    """

    verb = _PerThread()
    url = _PerThread()
    input = _PerThread()
    headers = _PerThread()
    stream = _PerThread()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._per_thread = threading.local()
        super().__init__(*args, **kwargs)


class _BoundedHTTP(_RequestPerThread, HTTPRequestsConnectionClass):
    """PyGithub's http connection, sending through ``BoundedAdapter``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.adapter = _bounded(self.session, self.adapter, "http://")


class _BoundedHTTPS(_RequestPerThread, HTTPSRequestsConnectionClass):
    """PyGithub's https connection, sending through ``BoundedAdapter``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.adapter = _bounded(self.session, self.adapter, "https://")


def _bounded(
    session: requests.Session, adapter: requests.adapters.HTTPAdapter, prefix: str
) -> BoundedAdapter:
    bounded = BoundedAdapter(
        max_retries=adapter.max_retries,
        pool_connections=getattr(adapter, "_pool_connections", requests.adapters.DEFAULT_POOLSIZE),
        pool_maxsize=getattr(adapter, "_pool_maxsize", requests.adapters.DEFAULT_POOLSIZE),
    )
    session.mount(prefix, bounded)
    return bounded


def install() -> None:
    """Idempotent: every PyGithub ``Requester`` of this process sends through ``BoundedAdapter``.

    PyGithub's one hook for its transport is ``Requester.injectConnectionClasses``; it also
    turns off keeping a connection per requester (meant for tests), which is turned back on:
    a client reuses its connection to GitHub as before.
    """
    if getattr(Requester, "_runnerpool_bounded", False):
        return
    Requester.injectConnectionClasses(_BoundedHTTP, _BoundedHTTPS)
    Requester._Requester__persist = True  # type: ignore[attr-defined]
    Requester._runnerpool_bounded = True  # type: ignore[attr-defined]
