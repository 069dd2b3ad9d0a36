"""A small HTTP CONNECT proxy for the test world: proof that GitHub traffic went through a proxy.

A pool's ``spec.proxy`` (and the operator's own ``HTTPS_PROXY``) sends https to GitHub as a
CONNECT tunnel. This proxy opens tunnels to the hosts it is told to allow only (loopback by
default: the network rule of the test world), optionally asks for Basic credentials as a
corporate proxy does (407 without them), and counts the tunnels it opened, so a test can say
the traffic went through it rather than around it, and from whom. It never reads inside a tunnel.
"""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import socketserver
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConnectProxy"]

_LIMIT = 64 * 1024


@dataclass
class ConnectProxy:
    """``with ConnectProxy() as proxy``: ``proxy.url`` to hand out, ``proxy.tunnels`` to count."""

    host: str = "127.0.0.1"
    allowed_hosts: frozenset[str] = frozenset({"127.0.0.1", "localhost"})
    #: (username, password) a client must send, or ``None`` for an open proxy.
    credentials: tuple[str, str] | None = None
    #: Every tunnel opened: (host, port).
    tunnels: list[tuple[str, int]] = field(default_factory=list)
    #: Who asked for each tunnel (the client's address, in the order of ``tunnels``): a runner
    #: pod's own address here shows the pod, not only the operator, went through the proxy.
    clients: list[str] = field(default_factory=list)
    #: Requests refused: (status, what was asked).
    refused: list[tuple[int, str]] = field(default_factory=list)
    _server: socketserver.ThreadingTCPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the proxy is not running")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def __enter__(self) -> ConnectProxy:
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        server = socketserver.ThreadingTCPServer((self.host, 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def count(self) -> int:
        with self._lock:
            return len(self.tunnels)

    def _handle(self, client: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            return
        request_line, headers = head
        method, _, target = request_line.partition(" ")
        target = target.rsplit(" ", 1)[0]
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        if method != "CONNECT" or not port.isdigit():
            self._refuse(client, 405, request_line, "only CONNECT is served")
            return
        if not self._authorized(headers.get("proxy-authorization", "")):
            self._refuse(client, 407, request_line, "proxy credentials needed", auth=True)
            return
        if host not in self.allowed_hosts:
            self._refuse(client, 403, request_line, "host not allowed")
            return
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self._refuse(client, 502, request_line, "cannot reach the host")
            return
        with self._lock:
            self.tunnels.append((host, int(port)))
            self.clients.append(str(client.getpeername()[0]))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with upstream:
            _pipe(client, upstream)

    def _authorized(self, header: str) -> bool:
        if self.credentials is None:
            return True
        expected = base64.b64encode(":".join(self.credentials).encode()).decode()
        return header.strip() == f"Basic {expected}"

    def _refuse(
        self, client: socket.socket, status: int, asked: str, why: str, *, auth: bool = False
    ) -> None:
        with self._lock:
            self.refused.append((status, asked))
        extra = 'Proxy-Authenticate: Basic realm="testworld"\r\n' if auth else ""
        body = why.encode()
        head = f"HTTP/1.1 {status} {why}\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        client.sendall(head.encode() + body)


def _read_head(client: socket.socket) -> tuple[str, dict[str, str]] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(4096)
        if not chunk or len(data) > _LIMIT:
            return None
        data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes."""
    for sock in (a, b):
        sock.settimeout(None)
    while True:
        ready, _, _ = select.select([a, b], [], [], 30)
        if not ready:
            return
        for sock in ready:
            with contextlib.suppress(OSError):
                chunk = sock.recv(_LIMIT)
                if chunk:
                    (b if sock is a else a).sendall(chunk)
                    continue
            return
