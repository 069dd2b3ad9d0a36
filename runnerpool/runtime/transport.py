"""The operator's one-shot API requests (get, create, patch, delete, small lists) sent over
``http.client`` keep-alive connections instead of the kubernetes client's urllib3 pool.

Written by hand on purpose: on the same kept-alive TLS connection to the API server, one
request through the client's ``RESTClientObject`` (urllib3's ``PoolManager``: a pool looked up
by URL, a ``Retry`` and a ``Timeout`` object, header dicts copied twice, a response wrapper)
cost 1.03-1.07 ms of CPU where ``http.client`` alone cost 0.48 ms; a converging pool makes six
to seven such requests, and every webhook delivery one. The requests keep the client's own
pieces where they are cheap and carry meaning: the configuration's host, TLS files and
verification, its bearer token with the refresh hook (``credential_refresh``), its default
headers (user agent), and ``ApiException`` for answers outside 2xx.

What urllib3 did that matters here, done the same way:
* a connection that sat idle is checked before reuse (readable means the server closed it or
  sent something unasked: it is dropped), and at most ``connection_pool_maxsize`` idle ones
  are kept;
* a request whose connection could not be made is tried again (three more times, as urllib3's
  default ``Retry`` does), and so is a request that lost its connection before an answer when
  its method is idempotent; a create or a patch that lost its connection is not sent twice
  (urllib3 and Go's net/http refuse that too): the caller's work queue retries it after
  reading again;
* the timeout (``--api-timeout``) bounds connecting and each read.

Configurations this does not cover keep the client's path (``supports``): a proxy, a
``socket_options``/``retries`` setting, an ``assert_hostname`` naming another host. Watches
and the informers' lists stay on urllib3 too: they stream, and a request per watch is rare.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kubernetes.client.rest import should_bypass_proxies

__all__ = ["Answer", "Transport", "supports"]

#: Attempts at a request: the first and three more, as urllib3's default ``Retry(3)``
#: allows (``--api-timeout`` is per attempt).
ATTEMPTS = 4
#: Methods that may be sent again after the connection broke with no answer read.
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
#: What a broken or refused connection raises: the socket's errors and http.client's
#: (``RemoteDisconnected`` is a ``ConnectionResetError``; ``BadStatusLine`` on a closed one).
_BROKEN = (OSError, http.client.HTTPException)


@dataclass
class Answer:
    """One answer, read whole: as much of urllib3's response as ``ApiException`` reads."""

    status: int
    reason: str
    data: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def supports(configuration: Any) -> bool:
    """Whether ``configuration`` asks for nothing this transport leaves to urllib3."""
    host = str(configuration.host or "")
    if urlsplit(host).scheme not in ("http", "https"):
        return False
    if configuration.proxy and not should_bypass_proxies(host, configuration.no_proxy or ""):
        return False
    if configuration.socket_options is not None or configuration.retries is not None:
        return False
    return configuration.assert_hostname is None or configuration.assert_hostname is False


class _Connection(http.client.HTTPSConnection):
    """An HTTPS connection that names ``server_hostname`` in its TLS handshake (SNI and the
    certificate check), which ``tls-server-name`` of a kubeconfig may set apart from the host."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext, server_hostname: str) -> None:
        super().__init__(host, port, context=context)
        self._tls_context = context
        self._server_hostname = server_hostname

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._server_hostname)


def _tls_context(configuration: Any) -> ssl.SSLContext:
    # With a CA named, only it is trusted (as urllib3 does with ``ca_certs``); without, the system's.
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert or None, cadata=configuration.ca_cert_data or None
    )
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False
    context.set_alpn_protocols(["http/1.1"])
    return context


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle connection the server closed (or wrote to unasked) reads as ready at once."""
    sock = conn.sock
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Transport:
    """Requests to one API server on a pool of kept-alive ``http.client`` connections."""

    def __init__(self, configuration: Any) -> None:
        self._configuration = configuration
        parts = urlsplit(str(configuration.host))
        self._secure = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._context = _tls_context(configuration) if self._secure else None
        self._server_hostname = configuration.tls_server_name or self._host
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._max_idle = max(1, int(configuration.connection_pool_maxsize or 1))

    def request(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float | None,
    ) -> Answer:
        """Send one request and read its whole answer; a broken connection is retried as the
        module docstring says, and its error raised once the attempts are spent."""
        url = self._prefix + path
        for attempt in range(ATTEMPTS):
            conn = self._take()
            sent = False
            try:
                conn.timeout = timeout
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(timeout)
                conn.request(method, url, body=body, headers=headers)
                sent = True
                response = conn.getresponse()
                data = response.read()
            except _BROKEN:
                conn.close()
                # Unsent, the server has not acted on it; sent, only an idempotent one may go again.
                if attempt + 1 >= ATTEMPTS or (sent and method not in _IDEMPOTENT):
                    raise
                continue
            if response.will_close:
                conn.close()
            else:
                self._give_back(conn)
            return Answer(response.status, response.reason, data, dict(response.getheaders()))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> http.client.HTTPConnection:
        """The most recently used idle connection still open, or a new (unconnected) one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new()
            if not _dropped(conn):
                return conn
            conn.close()

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def _new(self) -> http.client.HTTPConnection:
        if self._context is None:
            return http.client.HTTPConnection(self._host, self._port)
        return _Connection(
            self._host, self._port, context=self._context, server_hostname=self._server_hostname
        )
