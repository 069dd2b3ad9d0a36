"""``/healthz`` and ``/readyz`` on their own port, as kubelet probes expect.

prometheus-client serves only ``/metrics``; the standard library's HTTP server is
all a two-path probe endpoint needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class BackgroundServer:
    """A ``ThreadingHTTPServer`` on its own thread: the probes and metrics, reached from inside.

    The internet-facing webhook port has ``runnerpool.webserver`` (a thread per connection
    would let anyone hold the operator's threads).
    """

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        # A short poll interval: stop() (a SIGTERM, a lost lease) waits up to that long.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=name, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class ProbeServer(BackgroundServer):
    def __init__(
        self, port: int, live: Callable[[], bool], ready: Callable[[], bool], host: str = ""
    ) -> None:
        checks = {"/healthz": live, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    self.send_error(404)
                    return
                ok = check()
                body = b"ok\n" if ok else b"not ready\n"
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds would drown the operator's own log

        super().__init__(host, port, Handler, "probes")
