"""A scale set's message queue on loopback that answers each request from a script.

Why: the long polls go on the poll loop (aiohttp, ``runnerpool.scaleset.poller``), which
``responses`` does not see, and the fake GitHub's queue cannot be told to answer too much, too
late or through TLS of a private CA. Each request takes the next ``Answer`` (202 once the script
is empty) and is recorded with its headers; a held answer ends early when the server stops.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Answer", "QueueServer", "Seen"]

QUEUE_PATH = "/_apis/runtime/runnerscalesets/7/messages"


@dataclass(frozen=True)
class Answer:
    status: int = 202
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds the answer is held before it is sent (the service's long poll).
    hold: float = 0.0
    #: False: no ``Content-Length``, the body ends when the connection closes.
    length: bool = True

    @classmethod
    def of_json(cls, data: Any, status: int = 200) -> Answer:
        return cls(status, json.dumps(data).encode(), {"Content-Type": "application/json"})


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class QueueServer(ThreadingHTTPServer):
    """``with QueueServer() as queue``: ``queue.url`` (the queue's URL), ``queue.seen``."""

    daemon_threads = True

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.script: list[Answer] = []
        self.seen: list[Seen] = []
        self.held = 0
        self.lock = threading.Condition()
        self.stopping = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{QUEUE_PATH}?sessionId=s-1"

    def answer(self, *answers: Answer) -> None:
        with self.lock:
            self.script.extend(answers)

    def wait_held(self, count: int = 1, timeout: float = 10.0) -> bool:
        """True once ``count`` requests are being held."""
        with self.lock:
            return self.lock.wait_for(lambda: self.held >= count, timeout)

    def __enter__(self) -> QueueServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()

    def take(self, seen: Seen) -> Answer:
        with self.lock:
            self.seen.append(seen)
            return self.script.pop(0) if self.script else Answer()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: QueueServer

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        server = self.server
        answer = server.take(Seen(self.command, self.path, dict(self.headers.items())))
        if answer.hold:
            with server.lock:
                server.held += 1
                server.lock.notify_all()
            server.stopping.wait(answer.hold)
            with server.lock:
                server.held -= 1
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.length:
            self.send_header("Content-Length", str(len(answer.body)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        try:
            self.wfile.write(answer.body)
        except OSError:
            self.close_connection = True  # the client gave up (too large, deadline): fine

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""
