"""``/healthz`` and ``/readyz`` on their own port, as kubelet probes expect.

Served by :class:`runnerpool.webserver.WebServer` like every HTTP endpoint of the operator
(that module says why waitress): a two-path WSGI application on a server with one worker
thread more than the kubelet's two probes need at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runnerpool.webserver import Limits, StartResponse, WebServer, WsgiApp

__all__ = ["LIMITS", "ProbeServer", "probe_app"]

#: The kubelet opens a connection per probe and closes it; a few spare for a person's curl.
LIMITS = Limits(read_timeout=10, max_connections=16, threads=2)


def probe_app(live: Callable[[], bool], ready: Callable[[], bool]) -> WsgiApp:
    """200 ``ok`` while the check holds, 503 ``not ready`` when it does not, 404 elsewhere."""
    checks = {"/healthz": live, "/readyz": ready}

    def app(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        check = checks.get(str(environ.get("PATH_INFO")))
        if check is None:
            status, body = "404 Not Found", b"not found\n"
        elif check():
            status, body = "200 OK", b"ok\n"
        else:
            status, body = "503 Service Unavailable", b"not ready\n"
        start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    return app


class ProbeServer(WebServer):
    def __init__(
        self, port: int, live: Callable[[], bool], ready: Callable[[], bool], host: str = ""
    ) -> None:
        super().__init__(probe_app(live, ready), host, port, "probes", limits=LIMITS)
