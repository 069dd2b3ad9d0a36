"""GitHub calls are bounded (issue 33): a total deadline per call, a size cap per answer, a slow
host held to one call at a time, and no server text in what a pool's conditions show.

Real sockets on loopback, no mocks: a tarpit that sends one byte a second (PyGithub's timeout
is per read, so it never trips), a server that streams an endless body, and a small GitHub
that answers registration-token requests at once.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as kubernetes_client
from prometheus_client import REGISTRY

from runnerpool.domain import DEFAULT_API_URL, PoolRef, Scope
from runnerpool.github import transport
from runnerpool.github.credentials import ClientCache, CredentialError, client_from_secret_data
from runnerpool.github.errors import GitHubError
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import ClientOptions
from runnerpool.github.route import Route
from runnerpool.reasons import Reason
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.runtime.kube import SECRETS, Kube, set_request_timeout
from runnerpool.runtime.transport import ATTEMPTS
from runnerpool.settings import GitHubSettings
from runnerpool.tenants import GitHubHosts, parse_github_host
from secret_updater import SecretUpdater
from tests.helpers import started_scheduler, wait_for

ORG = Scope(organization="octo-org")
#: Each call's whole deadline in these tests (seconds).
DEADLINE = 2
#: What a loaded CI machine may add to a bound (thread start, scheduler tick, loopback).
SLACK = 1.0
#: How long the tarpit dribbles before it gives up: far past any bound asserted here.
TARPIT_SECONDS = 30


def _options(**overrides: Any) -> ClientOptions:
    return ClientOptions(timeout=DEADLINE, backoff_factor=0, **overrides)


class _Tarpit(socketserver.ThreadingTCPServer):
    """Answers every request one byte a second: ``what`` is "headers" (the status line itself
    dribbles) or "body" (headers at once, then a body that dribbles)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, what: str) -> None:
        self.what = what
        self.connections = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__(("127.0.0.1", 0), _TarpitHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _TarpitHandler(socketserver.BaseRequestHandler):
    server: _Tarpit

    def handle(self) -> None:
        with self.server.lock:
            self.server.connections += 1
        self.request.recv(65536)
        head = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        if self.server.what == "body":
            self.request.sendall(head + f"Content-Length: {TARPIT_SECONDS}\r\n\r\n".encode())
            dribble = b"{" + b" " * (TARPIT_SECONDS - 1)
        else:
            dribble = head
        for byte in dribble[:TARPIT_SECONDS]:
            if self.server.stopping.wait(1.0):
                return
            try:
                self.request.sendall(bytes([byte]))
            except OSError:
                return


@contextlib.contextmanager
def _serving_tarpits(count: int, what: str = "headers") -> Iterator[list[_Tarpit]]:
    servers = [_Tarpit(what) for _ in range(count)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers:
            server.stopping.set()
            server.shutdown()
            server.server_close()


@pytest.fixture(params=["headers", "body"])
def tarpit(request: pytest.FixtureRequest) -> Iterator[_Tarpit]:
    with _serving_tarpits(1, request.param) as (server,):
        yield server


def _token_body() -> bytes:
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"token": "AABBCC", "expires_at": expires}).encode()


class _GitHubHandler(BaseHTTPRequestHandler):
    """A registration token for any POST; for GET, what the test put in ``server.answer``."""

    server: _GitHub

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.posts += 1
        time.sleep(self.server.post_seconds)  # how long GitHub takes to answer a write
        self._send(201, _token_body())

    def do_GET(self) -> None:
        status, body, stream = self.server.answer
        if stream:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            chunk = b" " * 65536
            try:
                for _ in range(1024):  # 64 MiB, unless the client hangs up first
                    self.wfile.write(chunk)
                    self.server.streamed += len(chunk)
            except OSError:
                return
            return
        self._send(status, body)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _GitHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _GitHubHandler)
        self.answer: tuple[int, bytes, bool] = (200, b"{}", False)
        self.streamed = 0
        self.post_seconds = 0.0
        self.posts = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def github() -> Iterator[_GitHub]:
    server = _GitHub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _timed(call: Callable[[], object]) -> tuple[GitHubError, float]:
    started = time.monotonic()
    with pytest.raises(GitHubError) as failed:
        call()
    return failed.value, time.monotonic() - started


# -- one call ------------------------------------------------------------------------------------


def test_a_host_sending_one_byte_a_second_ends_the_call_at_its_deadline(tarpit: _Tarpit) -> None:
    client = client_from_secret_data({"token": "ghp_tarpit"}, tarpit.url, _options(retries=2))

    err, took = _timed(lambda: client.registration_token(ORG))

    assert took <= DEADLINE + SLACK, f"the call took {took:.1f} s, its deadline is {DEADLINE} s"
    assert err.reason == Reason.GITHUB_DEADLINE_EXCEEDED
    assert f"within {DEADLINE:g} s" in err.message


def test_after_a_missed_deadline_the_host_is_refused_at_once_and_others_are_not(
    tarpit: _Tarpit, github: _GitHub
) -> None:
    slow = client_from_secret_data({"token": "ghp_tarpit"}, tarpit.url, _options())
    _timed(lambda: slow.registration_token(ORG))
    connections = tarpit.connections

    err, took = _timed(lambda: slow.registration_token(Scope(organization="another-org")))

    assert err.reason == Reason.GITHUB_HOST_SLOW
    assert "only probed every" in err.message
    assert took < 0.5 and tarpit.connections == connections, "refused without a request"
    assert err.held_back, "not a try: the token job's backoff does not grow with it"
    fine = client_from_secret_data({"token": "ghp_fine"}, github.url, _options())
    assert fine.registration_token(ORG).token == "AABBCC"


def test_a_proxy_that_stalls_slows_its_own_route_not_the_host_for_everyone(
    tarpit: _Tarpit, github: _GitHub
) -> None:
    """A tenant's ``spec.proxy`` is its own to choose: one that stalls (the tenant runs it)
    makes that tenant's calls slow, never another tenant's direct calls to the same host."""
    stalled = client_from_secret_data({"token": "ghp_stalled"}, github.url, _options())
    stalled.take_route(Route(proxies=(("http", tarpit.url), ("https", tarpit.url))))
    err, _ = _timed(lambda: stalled.registration_token(ORG))
    assert err.reason == Reason.GITHUB_DEADLINE_EXCEEDED
    err, took = _timed(lambda: stalled.registration_token(ORG))
    assert err.reason == Reason.GITHUB_HOST_SLOW and took < 0.5

    direct = client_from_secret_data({"token": "ghp_direct"}, github.url, _options())
    assert direct.registration_token(ORG).token == "AABBCC"


def test_a_namespace_held_to_one_call_at_a_time_is_told_so_not_that_its_host_is_slow(github: _GitHub) -> None:
    """The pool's condition names the namespace's gate: its GitHub host answers fine."""

    def client(url: str) -> GitHubClient:
        made = client_from_secret_data({"token": "ghp_a"}, url, _options())
        made.take_route(Route(tenant="tenant-a"))
        return made

    with _serving_tarpits(2) as (first, second):
        _timed(lambda: client(first.url).registration_token(ORG))  # missed: one call at a time now
        in_flight = threading.Thread(
            target=lambda: _timed(lambda: client(second.url).registration_token(ORG)), daemon=True
        )
        in_flight.start()
        wait_for(lambda: second.connections > 0, message="a call of tenant-a in flight")

        err, took = _timed(lambda: client(github.url).registration_token(ORG))
        in_flight.join(DEADLINE + SLACK)

    assert err.reason == Reason.GITHUB_HOST_SLOW and took < 0.5
    assert "namespace tenant-a" in err.message and "one at a time" in err.message
    assert "probed" not in err.message


def test_writes_queued_one_at_a_time_do_not_make_a_host_that_answers_in_time_slow(github: _GitHub) -> None:
    """A credential's writes go one at a time (GitHub asks so). Each waited inside its own
    deadline, and one sent with the little time its queue left it missed the deadline though
    GitHub answered in time: the host was then taken for slow and every call to it refused for
    half a minute (a mass deletion's deregistrations paused). A write now waits only while half
    its deadline is left, and one not sent blames no host."""
    github.post_seconds = DEADLINE * 0.3  # every answer well in time; four in a row are not
    client = client_from_secret_data({"token": "ghp_queue"}, github.url, _options())
    outcomes: list[str] = []
    held_back: list[bool] = []
    endpoint = "/orgs/{org}/actions/runners/registration-token"
    labels = {"endpoint": endpoint, "method": "POST", "status": "error"}
    unanswered = REGISTRY.get_sample_value("runnerpool_github_requests_total", labels) or 0.0

    def write() -> None:
        try:
            client.registration_token(ORG)
            outcomes.append("sent")
        except GitHubError as err:
            outcomes.append(f"{err.reason}: {err.message}")
            held_back.append(err.held_back)

    writers = [threading.Thread(target=write, daemon=True) for _ in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(DEADLINE * 2 + SLACK)

    assert len(outcomes) == 4 and 0 < outcomes.count("sent") == github.posts < 4, outcomes
    assert all("not sent" in outcome for outcome in outcomes if outcome != "sent"), outcomes
    assert held_back and not any(held_back), "congestion: a try, so the callers back off and thin the queue"
    after = REGISTRY.get_sample_value("runnerpool_github_requests_total", labels) or 0.0
    assert after == unanswered, "a write never sent is no request GitHub left unanswered"
    github.post_seconds = 0.0
    assert client.registration_token(ORG).token == "AABBCC", "the host is not refused as slow"


def test_an_answer_larger_than_the_cap_is_refused_without_reading_it_whole(github: _GitHub) -> None:
    github.answer = (200, b"", True)  # an endless body, no Content-Length
    client = client_from_secret_data(
        {"token": "ghp_big"}, github.url, _options(max_response_bytes=256 * 1024)
    )

    err, _ = _timed(lambda: client.list_runners(ORG))

    assert err.reason == Reason.GITHUB_RESPONSE_TOO_LARGE
    # The client hung up near the cap: the server wrote what the socket buffers took, not 64 MiB.
    wait_for(lambda: github.streamed > 0, message="the server to stream")
    assert github.streamed < 32 * 1024 * 1024


def test_an_announced_length_above_the_cap_is_refused_before_the_body(github: _GitHub) -> None:
    github.answer = (200, b'{"runners": [], "total_count": 0, "pad": "' + b"x" * 300_000 + b'"}', False)
    client = client_from_secret_data(
        {"token": "ghp_big"}, github.url, _options(max_response_bytes=256 * 1024)
    )

    err, _ = _timed(lambda: client.list_runners(ORG))

    assert err.reason == Reason.GITHUB_RESPONSE_TOO_LARGE


def test_a_refusal_shows_its_status_and_never_the_servers_text(github: _GitHub) -> None:
    banner = "internal-admin-panel v3.2 at 10.0.0.7: login required"
    github.answer = (404, json.dumps({"message": banner}).encode(), False)
    client = client_from_secret_data({"token": "ghp_probe"}, github.url, _options())

    err, _ = _timed(lambda: client.list_runners(ORG))

    assert "HTTP 404 Not Found" in err.message
    assert banner not in err.message and "internal-admin-panel" not in err.message


# -- the shared token threads --------------------------------------------------------------------


def _pool(namespace: str, name: str, api_url: str, scope: Scope = ORG) -> PoolRef:
    return PoolRef(
        namespace=namespace,
        name=name,
        scope=scope,
        credential_secret_name=f"cred-{name}",
        api_url=api_url,
        credentials_version="1",
    )


def _another_namespaces_token_wait(slow_urls: list[str], held: Callable[[], int], github: _GitHub) -> float:
    """Seconds until a pool of namespace ``tenant-b`` gets its token, while the pools of namespace
    ``tenant-slow`` name ``slow_urls`` (one each), each with a credential and organization of its
    own (pools of one scope share one token request, a credential sends one write at a time);
    the four token threads (the default) serve every tenant. ``held``: connections the slow
    hosts hold."""
    threads = 4
    scheduler = started_scheduler(threads)
    patches: list[tuple[str, str, float]] = []

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        return client_from_secret_data(data, base_url, _options())

    clients = ClientCache(lambda ns, name: {"token": f"ghp_{ns}"}, factory=factory)
    updater = SecretUpdater(
        clients,
        lambda ns, name, body: patches.append((ns, name, time.monotonic())),
        lambda ns, name: None,
        scheduler=scheduler,
        remove_leftover=delete_leftover_runner,
        rng=random.Random(3),
    )
    try:
        for i, url in enumerate(slow_urls):
            updater.start(_pool("tenant-slow", f"slow-{i}", url, Scope(organization=f"org-{i}")))
        wait_for(lambda: held() >= threads, message="the slow hosts to hold every token thread")

        started = time.monotonic()
        updater.start(_pool("tenant-b", "build", github.url))
        wait_for(
            lambda: [p for p in patches if p[0] == "tenant-b"], timeout=TARPIT_SECONDS, message="b's token"
        )
        assert not [p for p in patches if p[0] == "tenant-slow"]
        return next(at for ns, _, at in patches if ns == "tenant-b") - started
    finally:
        updater.stop_all()
        scheduler.shutdown(wait=False)


def test_a_one_byte_a_second_host_delays_another_namespaces_token_by_one_deadline_at_most(
    tarpit: _Tarpit, github: _GitHub
) -> None:
    """Eight pools of one namespace name one tarpit."""
    took = _another_namespaces_token_wait([tarpit.url] * 8, lambda: tarpit.connections, github)

    assert took <= DEADLINE + SLACK, (
        f"tenant-b waited {took:.1f} s for its token; one deadline is {DEADLINE} s"
    )


def test_a_tarpit_per_pool_delays_another_namespaces_token_by_one_deadline_at_most(github: _GitHub) -> None:
    """Sixteen pools of one namespace each name a tarpit of their own (a proxy each will do): each
    is a new host to the slow-host gate, so only the tenant's own gate keeps them from taking
    every token thread for a deadline after another."""
    with _serving_tarpits(16) as tarpits:
        took = _another_namespaces_token_wait(
            [server.url for server in tarpits], lambda: sum(t.connections for t in tarpits), github
        )

    assert took <= DEADLINE + SLACK, (
        f"tenant-b waited {took:.1f} s for its token; one deadline is {DEADLINE} s"
    )


def test_a_tenant_that_missed_a_deadline_makes_one_call_at_a_time_for_a_while() -> None:
    now = [0.0]
    gate = transport.SlowHosts(probe_interval=30, clock=lambda: now[0])
    slow, healthy = transport.hop_of("http://127.0.0.1:1", None), transport.hop_of(DEFAULT_API_URL, None)
    gate.enter(slow, "tenant-a")
    gate.leave(slow, "tenant-a", timed_out=True)

    gate.enter(healthy, "tenant-a")  # its one call at a time, on a healthy host
    with pytest.raises(transport.HostSlow, match="namespace tenant-a") as first:
        gate.enter(healthy, "tenant-a")
    with pytest.raises(transport.HostSlow, match="only probed every") as host_first:
        gate.enter(slow, "")
    now[0] = 10.0
    with pytest.raises(transport.HostSlow) as again:
        gate.enter(healthy, "tenant-a")
    with pytest.raises(transport.HostSlow) as host_again:
        gate.enter(slow, "")
    # Compared to tell a new failure from the same one again: a countdown made every retry new.
    assert (str(again.value), str(host_again.value)) == (str(first.value), str(host_first.value))
    now[0] = 0.0
    gate.enter(healthy, "tenant-b")  # another tenant is not held
    gate.leave(healthy, "tenant-b", timed_out=False)
    gate.leave(healthy, "tenant-a", timed_out=False)
    gate.enter(healthy, "tenant-a")  # the next one, once that call is over
    now[0] = 30.0
    gate.enter(healthy, "tenant-a")  # no deadline missed for an interval: calls go side by side again


# -- the hosts clients are made for, and how many are kept -------------------------------------


def test_no_client_is_made_for_a_host_not_allowed() -> None:
    made: list[str] = []

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        made.append(base_url)
        return client_from_secret_data(data, base_url, _options())

    hosts = GitHubHosts.of(["ghe.example.com"], DEFAULT_API_URL)
    clients = ClientCache(lambda ns, name: {"token": "ghp_x"}, factory=factory, hosts=hosts)

    for url in ("http://169.254.169.254/latest", "https://ghe.example.com:8443/api/v3", "https://evil.test"):
        with pytest.raises(CredentialError) as refused:
            clients.get("tenant-a", "cred", url)
        assert refused.value.reason == Reason.GITHUB_HOST_NOT_ALLOWED
    clients.get("tenant-a", "cred", "https://ghe.example.com/api/v3")
    clients.get("tenant-a", "cred", DEFAULT_API_URL)
    assert made == ["https://ghe.example.com/api/v3", DEFAULT_API_URL]


def test_the_client_cache_keeps_a_bounded_number_of_clients() -> None:
    made: list[str] = []

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        made.append(data["token"])
        return client_from_secret_data(data, base_url, _options())

    clients = ClientCache(lambda ns, name: {"token": f"ghp_{name}"}, factory=factory, max_entries=2)
    for name in ("a", "b", "a", "c"):  # "a" used again: "b" is the least recently used
        clients.get("tenant", name)
    assert len(clients) == 2
    clients.get("tenant", "a")
    clients.get("tenant", "b")
    assert made == ["ghp_a", "ghp_b", "ghp_c", "ghp_b"]


def test_the_github_host_flag_and_its_default() -> None:
    default = GitHubSettings()
    assert default.hosts.allows("https://api.github.com")
    assert not default.hosts.allows("https://ghe.example.com/api/v3")
    ghes = GitHubSettings(api_url="https://ghe.example.com/api/v3", api_hosts=("ghe2.example.com:8443",))
    assert ghes.hosts.allows("https://ghe.example.com/api/v3"), "--github-api-url's host always"
    assert ghes.hosts.allows("https://ghe2.example.com:8443/api/v3")
    assert not ghes.hosts.allows("https://api.github.com"), "the flag replaces the default"
    with pytest.raises(ValueError):
        parse_github_host("https://ghe.example.com/api/v3")


# -- the API server ------------------------------------------------------------------------------


def test_an_api_server_that_never_answers_ends_the_call_at_the_timeout() -> None:
    """The timeout holds per attempt, and a GET is tried up to ``ATTEMPTS`` (four) times."""
    timeout, attempts = 1.0, ATTEMPTS
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does), never answers
    configuration = kubernetes_client.Configuration()
    configuration.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    api = set_request_timeout(kubernetes_client.ApiClient(configuration), timeout)
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            Kube(api).get(SECRETS, "tenant-a", "anything")
        took = time.monotonic() - started
        assert took <= attempts * timeout + SLACK, f"the call took {took:.1f} s"
    finally:
        silent.close()
        api.close()
