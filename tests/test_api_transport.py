"""The operator's one-shot API requests on kept-alive ``http.client`` connections
(``runnerpool.runtime.transport``), against a loopback server that misbehaves as real
connections do: closed while idle, broken before the answer, silent, or behind a proxy.

Every other test that runs the operator against the real API server sends through this
transport too; these pin down the connection handling a healthy server never exercises.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, NotFoundException

from runnerpool.api_errors import describe
from runnerpool.runtime.kube import SECRETS, Kube, set_request_timeout
from runnerpool.runtime.transport import ATTEMPTS, supports


@dataclass
class Seen:
    """What the server saw: each request's (connection, method, path, headers, body), the
    connection numbered in the order the server accepted it (not ``id()`` of its socket, which
    a closed socket's successor may be given again)."""

    accepted: Iterator[int] = field(default_factory=itertools.count)
    requests: list[tuple[int, str, str, dict[str, str], bytes]] = field(default_factory=list)
    #: How the next requests are answered, first to last; "ok" once they run out.
    plan: list[str] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def connections(self) -> set[int]:
        return {request[0] for request in self.requests}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    number: int

    def setup(self) -> None:
        super().setup()
        self.number = next(self.server.seen.accepted)

    def _any(self) -> None:
        seen = self.server.seen
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {key.lower(): value for key, value in self.headers.items()}
        seen.requests.append((self.number, self.command, self.path, headers, body))
        how = seen.plan.pop(0) if seen.plan else "ok"
        if how == "break":  # read the request, then hang up without a word
            self.close_connection = True
            return
        if how == "silent":
            seen.release.wait(10)
            self.close_connection = True
            return
        status, answer = (
            (404, _status(404, "NotFound", 'secrets "x" not found')) if how == "404" else (200, {})
        )
        answer = answer or {"kind": "Secret", "metadata": {"name": "x"}, "path": self.path}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if how == "close-after":  # answer as if keeping the connection, then close it
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = _any  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: Seen

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        self.seen.closed.set()  # only now is the socket closed


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.seen = Seen()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.seen.release.set()
    httpd.shutdown()
    httpd.server_close()


def _kube(host: str, *, timeout: float = 5.0, **options: Any) -> Kube:
    configuration = client.Configuration(host=host)
    for name, value in options.items():
        setattr(configuration, name, value)
    return Kube(set_request_timeout(client.ApiClient(configuration), timeout))


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_requests_share_one_kept_alive_connection(server: _Server) -> None:
    kube = _kube(_url(server))

    for n in range(5):
        assert kube.get(SECRETS, "ns", f"s{n}")["path"] == f"/api/v1/namespaces/ns/secrets/s{n}"

    assert len(server.seen.requests) == 5
    assert len(server.seen.connections()) == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_create_sent_once(
    server: _Server,
) -> None:
    kube = _kube(_url(server))
    server.seen.plan = ["close-after"]
    kube.get(SECRETS, "ns", "first")
    assert server.seen.closed.wait(5)

    created = kube.create(SECRETS, "ns", {"metadata": {"name": "new"}})

    assert created["path"] == "/api/v1/namespaces/ns/secrets"
    methods = [request[1] for request in server.seen.requests]
    assert methods == ["GET", "POST"]
    assert len(server.seen.connections()) == 2


def test_a_read_whose_connection_breaks_before_the_answer_is_sent_again(server: _Server) -> None:
    kube = _kube(_url(server))
    server.seen.plan = ["break"]

    assert kube.get(SECRETS, "ns", "x")["metadata"]["name"] == "x"

    assert [request[1] for request in server.seen.requests] == ["GET", "GET"]


def test_a_create_whose_connection_breaks_before_the_answer_is_not_sent_twice(server: _Server) -> None:
    kube = _kube(_url(server))
    server.seen.plan = ["break"]

    with pytest.raises(ConnectionError):
        kube.create(SECRETS, "ns", {"metadata": {"name": "new"}})

    assert [request[1] for request in server.seen.requests] == ["POST"]


def test_a_server_that_never_answers_fails_the_call_after_the_timeout(server: _Server) -> None:
    kube = _kube(_url(server), timeout=0.2)
    server.seen.plan = ["silent"] * ATTEMPTS

    with pytest.raises(TimeoutError):
        kube.get(SECRETS, "ns", "x")

    assert len(server.seen.requests) == ATTEMPTS  # as often as urllib3's default Retry would


def test_an_error_answer_raises_the_clients_exception_with_the_servers_status(server: _Server) -> None:
    kube = _kube(_url(server))
    server.seen.plan = ["404"]

    with pytest.raises(NotFoundException) as raised:
        kube.get(SECRETS, "ns", "x")

    assert isinstance(raised.value, ApiException)
    assert describe(raised.value) == '404 NotFound: secrets "x" not found'


def test_each_request_carries_the_refreshed_token_the_user_agent_and_its_body(server: _Server) -> None:
    tokens = iter(["first", "second"])

    def refresh(configuration: client.Configuration) -> None:
        configuration.api_key = {"authorization": next(tokens)}

    kube = _kube(
        _url(server),
        api_key={"authorization": "loaded"},
        api_key_prefix={"authorization": "Bearer"},
        refresh_api_key_hook=refresh,
    )
    kube.get(SECRETS, "ns", "x")
    kube.patch(SECRETS, "ns", "x", {"metadata": {"labels": {"a": "b"}}})

    (_, _, _, get_headers, _), (_, method, _, patch_headers, body) = server.seen.requests
    assert get_headers["authorization"] == "Bearer first"
    assert patch_headers["authorization"] == "Bearer second"
    assert get_headers["user-agent"] == kube.api_client.user_agent
    assert method == "PATCH"
    assert patch_headers["content-type"] == "application/strategic-merge-patch+json"
    assert json.loads(body) == {"metadata": {"labels": {"a": "b"}}}


def test_a_list_sends_its_selector_as_the_query(server: _Server) -> None:
    kube = _kube(_url(server))

    kube.list_items(SECRETS, "ns", label_selector="app in (a,b),pool=x")

    assert (
        server.seen.requests[0][2]
        == "/api/v1/namespaces/ns/secrets?labelSelector=app+in+%28a%2Cb%29%2Cpool%3Dx"
    )


def test_a_configured_proxy_still_carries_the_requests(server: _Server) -> None:
    # The API server's name is never looked up: the proxy is asked for the whole URL.
    kube = _kube("http://kube.invalid", proxy=_url(server))
    assert not supports(kube.api_client.configuration)

    kube.get(SECRETS, "ns", "x")

    assert server.seen.requests[0][2] == "http://kube.invalid/api/v1/namespaces/ns/secrets/x"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, True),
        ({"assert_hostname": False}, True),
        ({"assert_hostname": "other.example"}, False),
        ({"retries": 5}, False),
        ({"socket_options": []}, False),
        ({"proxy": "http://127.0.0.1:1", "no_proxy": "kube.invalid"}, True),
    ],
)
def test_what_the_transport_leaves_to_the_client(options: dict[str, Any], expected: bool) -> None:
    configuration = client.Configuration(host="https://kube.invalid")
    for name, value in options.items():
        setattr(configuration, name, value)

    assert supports(configuration) is expected
