"""Every HTTP endpoint of the operator on a thread of it: waitress, with hard limits.

The webhook receiver (internet-facing), the metrics endpoint (plain HTTP, or HTTPS with
``--metrics-secure``) and the kubelet probes all run on :class:`WebServer`, so one server's
limits, shutdown and logging hold everywhere, and one stack is learned, patched and pinned.

Why not the standard library's ``ThreadingHTTPServer`` (the probes and metrics ran on it
before): it gives every connection a thread for as long as the client keeps it open, so 200
connections that send half a request hold 200 threads, and when they close each one prints a
traceback to stderr, outside the operator's log format.

Why waitress, measured on this machine (2 cores shared with other work, load average 4-9):
each candidate served a trivial app (read the body, answer 200) in one process; a client
process offered 800 signed delivery-sized POSTs per second for 5 s, one new connection each,
from 32 threads, three times (best / median); then 200 connections sent headers and half a
body and stopped, and one normal delivery was sent 3 s later. ``bench/webhook_load.py``
measures the real receiver at 1,000 pools, before and after.

=========  ===========  =============  ==========  ===========  ============  =====  =========
server     answered/s   p99 ms         CPU/req ms  threads with delivery      RSS    deps
                                                   200 stalled  meanwhile     MiB
=========  ===========  =============  ==========  ===========  ============  =====  =========
stdlib     693 / 603    1,020 / 1,021  0.34        202          2.7 ms        51-57  none
waitress   800 / 800    5.9 / 20.5     0.29        10           2.6 ms        51-52  none
cheroot    620 / 555    1,019 / 1,019  0.31        11           none in 30 s  52-54  2
uvicorn    800 / 800    98 / 105       0.32        2            2.0 ms        52-56  2
=========  ===========  =============  ==========  ===========  ============  =====  =========

(stdlib and cheroot: a listen backlog of 5, so connections beyond it wait for a SYN retry, 1 s;
the stdlib's 200 stalled connections printed 4,800 traceback lines when they closed.)

* waitress (Pylons project) reads every request - headers and body - on one non-blocking I/O
  thread and hands only *complete* requests to a fixed pool of worker threads, so a client
  that sends half a request (or one byte a second) holds a socket and a buffer, never a
  thread, and a normal delivery is still answered at once. It is pure Python with no
  dependencies, WSGI (plain callables, no event loop in an operator made of threads and
  APScheduler), logs through the ``logging`` module only, and has a connection cap,
  header/body size limits and an idle timeout built in.
* cheroot (CherryPy's; cheroot 11) also has a fixed pool, but a worker reads the request
  itself with a per-``recv`` timeout: 200 half-open connections occupy every worker until
  they time out, and a normal delivery waits behind them.
* uvicorn (0.54) holds no thread per connection either, but it is asyncio (ASGI), as is
  hypercorn: the blocking API write of a delivery would need an executor, the event loop
  its own thread and shutdown path, and its tail was 5-15x waitress's here. granian runs
  its own worker processes (Rust) and gunicorn forks: neither runs inside the operator's
  process as one of its runnables.

What is added here on top of waitress:

* a deadline for the whole request: waitress drops a connection only after ``read_timeout``
  seconds *without a byte*; a slow-loris client sending one byte every few seconds would
  never be dropped, so a connection whose request is not complete ``read_timeout`` seconds
  after its first byte is closed too, whatever complete requests came before it;
* the errors waitress answers itself (413 over the body limit, 431, 400) are reported to
  ``on_refused`` so the caller can count them; bodies stay in memory (no temporary files on
  a read-only root filesystem);
* a start and stop that fit :class:`runnerpool.runtime.runnables.Runnable`: the I/O loop
  runs on a named daemon thread and :meth:`WebServer.stop` returns once the listening
  socket, every connection and the worker threads are closed;
* TLS (``tls``: the context for each new connection, so a renewed certificate is picked up
  without a restart), which waitress leaves to a proxy in front of it. The operator's metrics
  port has no proxy in front (Prometheus scrapes it directly, as controller-runtime's does), so
  the handshake and the encrypted reads and writes are done here on waitress's non-blocking
  I/O thread: :class:`_TlsChannel`. A client that never finishes its handshake holds a socket
  and a buffer, never a thread, and is dropped ``read_timeout`` seconds after it connected;
  one that does not speak TLS (a port scan, a plain-HTTP client) is closed at once.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher

__all__ = ["Limits", "Refused", "StartResponse", "WebServer", "WsgiApp"]

log = logging.getLogger(__name__)
# waitress warns "Task queue depth is N" whenever a complete request waits for a worker: a
# burst of deliveries (GitHub sends one per job event) would flood the operator's log.
logging.getLogger("waitress.queue").setLevel(logging.ERROR)

StartResponse = Callable[[str, list[tuple[str, str]]], object]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
#: Called with the status code and the request headers (waitress's ``CONTENT_LENGTH`` style
#: keys) when the server itself refuses a request, before the application sees it.
Refused = Callable[[int, Mapping[str, str]], None]

#: How often the I/O loop looks for connections past their deadline.
_SWEEP_SECONDS = 1


@dataclass(frozen=True)
class Limits:
    """What one client may take from the endpoint."""

    #: A connection is dropped when its request is not complete this long after its first
    #: byte, or when it sends nothing for this long (idle keep-alive included).
    read_timeout: int = 10
    #: Open connections at most; past it, new ones wait in the listen backlog.
    max_connections: int = 256
    #: Threads that run the application (the I/O thread comes on top).
    threads: int = 8
    #: Largest body accepted; a larger ``Content-Length`` is answered 413 unread. 32 KiB: the
    #: webhook's deliveries are a few KiB (``runnerpool.demand.receiver.DEFAULT_MAX_BODY``
    #: says how this was sized; its server takes twice that, for a form-encoded delivery:
    #: ``receiver.FORM_FACTOR``), the other endpoints take no body.
    max_body: int = 32 * 1024
    #: Largest request head: GitHub's deliveries send under 2 KiB of headers, a proxy in front
    #: adds a few; a bearer token for the metrics endpoint is 1-2 KiB. With ``max_connections``
    #: the two bound what clients can make the server buffer: 256 x (32 + 16 KiB) = 12 MiB, the
    #: webhook receiver's 256 x (64 + 16 KiB) = 20 MiB.
    max_header: int = 16 * 1024


#: Bytes handed to one TLS write: one record, so a write retried after ``SSLWantWriteError``
#: passes the same length again (OpenSSL refuses a shorter retry).
_TLS_WRITE = 16 * 1024


def _channel(refused: Refused, tls: Callable[[], ssl.SSLContext] | None) -> type[HTTPChannel]:
    class Task(ErrorTask):  # type: ignore[misc]  # waitress has no type hints
        def execute(self) -> None:
            try:
                refused(self.request.error.code, self.request.headers)
            except Exception:
                log.exception("counting a refused request failed")
            super().execute()

    class Channel(HTTPChannel):  # type: ignore[misc]
        error_task_class = Task
        #: The request still being read (waitress's parser) and when its first byte arrived.
        #: Stamped by the request itself, not by the channel's state: bytes of a next request
        #: that arrive with a complete one (pipelined) start its clock as well, so a client
        #: cannot hide a trickled request behind an answer it asked for first.
        timed_request: object = None
        request_started: float | None = None

        def received(self, data: bytes) -> bool:
            arrived = time.monotonic()
            done = super().received(data)
            if self.request is None:
                self.timed_request = self.request_started = None  # nothing half read: no deadline
            elif self.request is not self.timed_request:
                self.timed_request, self.request_started = self.request, arrived
            return bool(done)

    if tls is None:
        return Channel
    return type("TlsChannel", (_TlsChannel, Channel), {"context": staticmethod(tls)})


class _TlsChannel(HTTPChannel):  # type: ignore[misc]
    """An HTTP channel whose socket speaks TLS; everything after the bytes is waitress's.

    waitress reads with ``recv`` and writes with ``send`` on a non-blocking socket; an
    ``SSLSocket`` does the same, except that it may want to read while writing (and the
    reverse), raises instead of returning 0, and keeps decrypted bytes the kernel no longer
    signals. So the handshake is driven from the I/O loop's read and write events, every
    read drains the TLS buffer, and "wants more" is 0 bytes, not an error.
    """

    context: Callable[[], ssl.SSLContext]
    connected: bool  # waitress's: False once the client has closed
    _handshaken = False
    _handshake_wants_write = False

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        sock = self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        super().__init__(server, sock, addr, adj, map)

    def _handshake(self) -> bool:
        """True once the handshake is done; False while it waits for the client."""
        self._handshake_wants_write = False
        try:
            self.socket.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLWantWriteError:
            self._handshake_wants_write = True
            return False
        except OSError as err:  # a port scan, a plain-HTTP client, a reset
            log.debug("TLS handshake with %s failed: %s", self.addr, err)
            self.handle_close()
            return False
        self._handshaken = True
        return True

    def writable(self) -> bool:
        return self._handshake_wants_write or bool(super().writable())

    def handle_write(self) -> None:
        if not self._handshaken:
            if self.will_close:  # past its deadline before the handshake ended
                self.handle_close()
            elif self._handshake():
                self.handle_read()
            return
        super().handle_write()

    def handle_read(self) -> None:
        if not self._handshaken and not self._handshake():
            return
        while self.connected:
            try:
                data = self.socket.recv(self.adj.recv_bytes)
            except ssl.SSLWantReadError:
                return  # the TLS buffer is empty: the next bytes come with a read event
            except OSError:  # a reset, a broken record, a renegotiation (refused)
                self.handle_close()
                return
            if not data:
                self.connected = False  # the client closed: as waitress's own handle_read
                return
            self.last_activity = time.time()
            self.received(data)

    def send(self, data: bytes, do_close: bool = True) -> int:
        try:
            return int(super().send(data[:_TLS_WRITE], do_close))
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return 0


class _Server(TcpWSGIServer):  # type: ignore[misc]
    def maintenance(self, now: float) -> None:
        """Close idle channels (waitress) and those whose request being read is past its deadline.

        Whatever the channel still has queued: else a client that pipelines a complete request
        and the first byte of the next one is never timed. The price: a pipelining client whose
        earlier answer takes longer than the deadline loses the connection (GitHub and the
        ingresses in front of the receiver send one request at a time)."""
        super().maintenance(now)  # idle for read_timeout: closed
        cutoff = time.monotonic() - self.adj.channel_timeout
        for channel in list(self.active_channels.values()):
            started = getattr(channel, "request_started", None)
            if started is not None and started < cutoff:
                channel.will_close = True


class WebServer:
    """A WSGI ``app`` served by waitress on ``host:port`` (0: any free port) from a thread.

    With ``tls``, HTTPS: it is called for each new connection and returns the context to use.
    """

    def __init__(
        self,
        app: WsgiApp,
        host: str,
        port: int,
        name: str,
        *,
        limits: Limits = Limits(),
        on_refused: Refused = lambda code, headers: None,
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        adj = Adjustments(
            host=host or "0.0.0.0",
            port=port,
            ipv6=False,
            threads=limits.threads,
            # waitress counts its listening socket and its wake-up pipe as connections.
            connection_limit=limits.max_connections + 2,
            channel_timeout=limits.read_timeout,
            cleanup_interval=_SWEEP_SECONDS,
            # waitress answers 413 from a Content-Length *equal* to its limit on.
            max_request_body_size=limits.max_body + 1,
            max_request_header_size=limits.max_header,
            inbuf_overflow=limits.max_body + limits.max_header + 1,
            ident="runnerpool-operator",
            expose_tracebacks=False,
            asyncore_use_poll=True,
        )
        self._map: dict[int, Any] = {}
        self._dispatcher = ThreadedTaskDispatcher()
        self._dispatcher.set_thread_count(limits.threads)
        server_class = type("Server", (_Server,), {"channel_class": _channel(on_refused, tls)})
        self._server = server_class(app, self._map, dispatcher=self._dispatcher, adj=adj)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.effective_port)

    @property
    def connections(self) -> int:
        """Client connections open now (read on the I/O thread; a snapshot)."""
        return len(self._server.active_channels)

    def _run(self) -> None:
        while not self._stopping.is_set():
            wasyncore.loop(timeout=1.0, use_poll=True, map=self._map, count=1)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop accepting, close every connection, end the threads; answers in flight may be cut.

        True when the I/O thread ended within ``timeout``."""
        self._stopping.set()
        if self._thread.is_alive():
            self._server.pull_trigger()  # wakes the I/O loop's poll at once
            self._thread.join(timeout)
        wasyncore.close_all(self._map)
        self._dispatcher.shutdown(cancel_pending=True, timeout=timeout)
        return not self._thread.is_alive()
