"""The webhook port as an internet-facing service: real sockets on 127.0.0.1, short limits.

What a client that misbehaves may hold (connections, threads, time), what a well-behaved
delivery still gets meanwhile, and that nothing reaches stderr outside the log format.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, logs
from runnerpool.demand import metrics
from runnerpool.demand import receiver as receiver_module
from runnerpool.demand.receiver import DEFAULT_MAX_BODY, FORM, FORM_FACTOR, PATH, WebhookServer
from runnerpool.demand.secret import MAX_POOL_SECRET_LINES, PoolSecrets, Secrets
from runnerpool.demand.signature import sign
from runnerpool.demand.verification import MAX_KEYS_PER_ROUTE, Route, RouteKeys, Verdict, Verifier
from runnerpool.github.jobs import Job
from runnerpool.reads import ParsedPool, parse_pool
from runnerpool.reasons import Reason
from runnerpool.runtime.kube import Kube
from runnerpool.webserver import Limits
from tests.demand_payloads import delivery, fixture, job_object
from tests.helpers import wait_for
from tests.pools import by_name_reads, pool_manifest

SECRET = b"limits secret"
TIMEOUT = 1  # the read deadline under test, seconds


def body(job_id: int) -> bytes:
    return json.dumps(delivery(job_object(job_id, "queued", ["self-hosted"]))).encode()


def headers(payload: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "workflow_job",
        "X-GitHub-Delivery": f"d-{time.monotonic_ns()}",
        "X-Hub-Signature-256": sign(SECRET, payload),
    }


class Recorded:
    def __init__(self) -> None:
        self.jobs: list[int] = []
        self.fail = False

    def __call__(self, job: Job, verdict: Verdict) -> int:
        del verdict  # every pool trusts the cluster-wide secret here
        if self.fail:
            raise RuntimeError("API server unavailable")
        self.jobs.append(job.id)
        return 1


def start(recorded: Recorded, **limits: int) -> WebhookServer:
    server = WebhookServer(
        0,
        lambda: (SECRET,),
        recorded,
        host="127.0.0.1",
        limits=Limits(**{"read_timeout": TIMEOUT, "threads": 4, "max_body": 64 * 1024, **limits}),
    )
    server.start()
    return server


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def server(recorded: Recorded) -> Iterator[WebhookServer]:
    srv = start(recorded)
    yield srv
    srv.stop()


def deliver(server: WebhookServer, job_id: int, timeout: float = 5.0) -> tuple[int, float]:
    """A normal delivery: its status and how long the answer took, in seconds."""
    payload = body(job_id)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request("POST", PATH, body=payload, headers=headers(payload))
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        conn.close()


def connect(server: WebhookServer, first_bytes: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes ``sock`` (no answer) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def half_request(job_id: int) -> bytes:
    """Headers and half the body: a client that stopped in the middle."""
    payload = body(job_id)
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
    return head + payload[: len(payload) // 2]


def get(server: WebhookServer, path: str, method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


# ------------------------------------------------------------------ health checks


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_ingress_health_checks_get_200_and_count_no_delivery(server: WebhookServer, path: str) -> None:
    before = metrics.DELIVERIES.labels("other", "invalid")._value.get()
    assert get(server, path) == (200, "ok\n")
    assert get(server, path, "HEAD")[0] == 200
    assert metrics.DELIVERIES.labels("other", "invalid")._value.get() == before


def test_other_paths_and_methods_are_refused(server: WebhookServer) -> None:
    assert get(server, "/metrics")[0] == 404
    assert get(server, PATH)[0] == 405
    assert get(server, "/", "DELETE")[0] == 404


# ------------------------------------------------------------------ half-open and slow clients


def test_half_open_connections_hold_no_thread_and_are_dropped_after_the_timeout(
    server: WebhookServer, recorded: Recorded
) -> None:
    threads_before = threading.active_count()
    stalled = [connect(server, b"POST /webhook HTTP/1.1\r\nHost: x\r\n") for _ in range(100)]
    stalled += [connect(server, half_request(i)) for i in range(100)]
    try:
        wait_for(lambda: server.connections >= 200, timeout=10, message="200 connections accepted")
        assert threading.active_count() <= threads_before + 1
        # A normal delivery is answered at once meanwhile, without waiting for the timeout.
        status, took = deliver(server, 1)
        assert status == 200 and took < TIMEOUT / 2, took
        started = time.monotonic()
        assert all(closed_by_server(sock, within=TIMEOUT + 3) for sock in stalled)
        assert time.monotonic() - started < TIMEOUT + 3
        wait_for(lambda: server.connections == 0, timeout=5, message="every connection closed")
    finally:
        for sock in stalled:
            sock.close()
    assert recorded.jobs == [1]
    assert threading.active_count() <= threads_before + 1


def trickle(sock: socket.socket, request: bytes) -> bool:
    """Send ``request`` one byte every TIMEOUT/4 s (never idle for the timeout) for up to
    TIMEOUT + 4 s; True when the server closed the connection meanwhile."""
    started = time.monotonic()
    for byte in request:
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return True
        if closed_by_server(sock, within=TIMEOUT / 4):
            return True
        if time.monotonic() - started > TIMEOUT + 4:
            return False
    return False


def test_a_slow_loris_client_is_dropped_although_it_never_goes_idle(server: WebhookServer) -> None:
    sock = connect(server)
    started = time.monotonic()
    try:
        assert trickle(sock, half_request(2)), "still connected past the deadline"
    finally:
        sock.close()
    assert time.monotonic() - started < TIMEOUT + 3


def test_a_slow_loris_behind_a_complete_pipelined_request_is_dropped(server: WebhookServer) -> None:
    # One segment: a complete health check, then the first byte of the request to trickle.
    request = half_request(2)
    sock = connect(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + request[:1])
    started = time.monotonic()
    try:
        sock.settimeout(5)
        assert b" 200 " in sock.recv(4096)  # the complete one is answered
        assert trickle(sock, request[1:]), "the request behind it was never timed"
    finally:
        sock.close()
    assert time.monotonic() - started < TIMEOUT + 3


def test_an_idle_keep_alive_connection_is_dropped_after_the_timeout(server: WebhookServer) -> None:
    payload = body(3)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", PATH, body=payload, headers=headers(payload))
    assert conn.getresponse().read()
    assert conn.sock is not None
    assert closed_by_server(conn.sock, within=TIMEOUT + 3)
    conn.close()


# ------------------------------------------------------------------ connection cap


def test_connections_past_the_cap_wait_until_one_closes(recorded: Recorded) -> None:
    server = start(recorded, max_connections=5, read_timeout=30)
    held = [connect(server, b"POST") for _ in range(5)]
    try:
        wait_for(lambda: server.connections == 5, timeout=5, message="5 connections accepted")
        waiting: list[tuple[int, float]] = []
        thread = threading.Thread(target=lambda: waiting.append(deliver(server, 4, timeout=10)))
        thread.start()
        thread.join(0.5)
        assert waiting == [] and server.connections == 5  # not accepted: the cap holds
        held.pop().close()
        thread.join(10)
        assert waiting and waiting[0][0] == 200
    finally:
        for sock in held:
            sock.close()
        server.stop()
    assert recorded.jobs == [4]


# ------------------------------------------------------------------ sizes


def test_an_oversized_body_gets_413_before_it_is_sent(server: WebhookServer, recorded: Recorded) -> None:
    before = metrics.DELIVERIES.labels("workflow_job", "too_large")._value.get()
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: workflow_job\r\n"
        f"Content-Type: application/json\r\nContent-Length: {10 << 20}\r\n\r\n"
    )
    sock = connect(server, head.encode())  # the 10 MiB body is never sent
    try:
        sock.settimeout(5)
        answer = sock.recv(4096)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert metrics.DELIVERIES.labels("workflow_job", "too_large")._value.get() == before + 1
    assert recorded.jobs == []


def test_a_body_at_the_limit_is_read_and_one_byte_more_is_not(recorded: Recorded) -> None:
    payload = body(5)
    server = start(recorded, max_body=len(payload))
    try:
        assert deliver(server, 5)[0] == 200
        padded = payload[:-1] + b" }"
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("POST", PATH, body=padded, headers=headers(padded))
        assert conn.getresponse().status == 413
        conn.close()
    finally:
        server.stop()
    assert recorded.jobs == [5]


def test_a_post_without_content_length_gets_411(server: WebhookServer, recorded: Recorded) -> None:
    sock = connect(server, f"POST {PATH} HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: ping\r\n\r\n".encode())
    try:
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 411 ")
    finally:
        sock.close()


# ------------------------------------------------------------------ the log


def test_misbehaving_clients_print_nothing_outside_the_json_log(
    recorded: Recorded, capfd: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logs.configure("json")
    capfd.readouterr()
    server = start(recorded)
    try:
        stalled = [connect(server, half_request(i)) for i in range(20)]
        for sock in stalled[:10]:  # reset by the client in the middle of a request
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
        garbage = connect(server, b"\x16\x03\x01 not http at all\r\n\r\n")
        garbage.settimeout(5)
        assert b" 400 Bad Request" in garbage.recv(4096).split(b"\r\n")[0]
        garbage.close()
        recorded.fail = True
        assert deliver(server, 6)[0] == 503
        assert all(closed_by_server(sock, within=TIMEOUT + 3) for sock in stalled[10:])
        for sock in stalled[10:]:
            sock.close()
    finally:
        server.stop()
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    out, err = capfd.readouterr()
    assert out == ""
    lines = err.splitlines()
    entries = [json.loads(line) for line in lines]  # each line one JSON object, no traceback
    assert any("not recorded" in entry["msg"] for entry in entries), lines


# ------------------------------------------------------------------ the stop path


def test_stop_returns_promptly_with_connections_open_and_frees_the_port(recorded: Recorded) -> None:
    server = start(recorded, read_timeout=30)
    stalled = [connect(server, half_request(i)) for i in range(50)]
    wait_for(lambda: server.connections == 50, timeout=10, message="50 connections accepted")
    threads_running = threading.active_count()
    started = time.monotonic()
    server.stop(timeout=5)
    assert time.monotonic() - started < 2
    assert all(closed_by_server(sock, within=2) for sock in stalled)
    for sock in stalled:
        sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
    wait_for(
        lambda: threading.active_count() <= threads_running - 5,  # the I/O thread and 4 workers
        timeout=5,
        message="the server's threads ended",
    )


def test_a_chunked_delivery_is_de_chunked_and_checked(server: WebhookServer, recorded: Recorded) -> None:
    payload = body(9)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    halves = [payload[: len(payload) // 2], payload[len(payload) // 2 :]]
    conn.request("POST", PATH, body=iter(halves), headers=headers(payload), encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    assert recorded.jobs == [9]


# ------------------------------------------------------------------ hostile bodies

#: A tenant whose pool trusts its own Secret ``hooks``: its deliveries go to TENANT_URL.
TENANT, POOL_SECRET = "team-a", b"team-a's own webhook secret"
TENANT_URL = f"{PATH}/{TENANT}/hooks"


class TenantPools:
    """The pool cache, holding one pool of TENANT with its own webhook secret; counts lookups."""

    def __init__(self) -> None:
        self.lookups = 0

    def autoscaling_pools(self, scopes: Iterable[str] | None = None) -> list[api.RunnerPool]:
        self.lookups += 1
        return []

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        self.lookups += 1
        if namespace != TENANT:
            return []
        manifest = pool_manifest(
            "app",
            repo="octo-org/hello-world",
            autoscaling={"maxReplicas": 5, "webhookSecretRef": {"name": "hooks"}},
        )
        manifest["metadata"]["namespace"] = TENANT
        return [parse_pool(manifest)]


class TenantSecrets(PoolSecrets):
    """The pools' own secrets without an API server: TENANT's ``hooks`` holds POOL_SECRET."""

    def __init__(self) -> None:
        super().__init__(by_name_reads(Kube(client.ApiClient())))
        self.reads = 0

    def get(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
        self.reads += 1
        return Secrets(values=(POOL_SECRET,) if (namespace, ref.name) == (TENANT, "hooks") else ())

    def refresh(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets | None:
        return self.get(namespace, ref)


def hostile_server(
    recorded: Recorded, pools: TenantPools, secrets: PoolSecrets | None = None, max_body: int | None = None
) -> WebhookServer:
    """The receiver as the component builds it: the cluster-wide secret at ``/webhook``, the
    pools' own at their URLs."""
    limits = Limits(read_timeout=TIMEOUT, threads=2)
    if max_body is not None:
        limits = Limits(read_timeout=TIMEOUT, threads=2, max_body=max_body)
    verifier = Verifier(lambda: (SECRET,), pools, secrets or TenantSecrets())
    server = WebhookServer(0, verifier, recorded, host="127.0.0.1", limits=limits)
    server.start()
    return server


def raw_post(server: WebhookServer, payload: bytes, head: dict[str, str], path: str = PATH) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", path, body=payload, headers=head)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


DEEP = b"[" * 100_000
TWO_PAYLOADS = b"payload=%7B%7D&payload=%7B%7D"
WRONG_SHAPES = [
    b"[]",
    b'"a string"',
    b"null",
    b'{"repository": 5}',
    b'{"repository": {"full_name": "a/b", "url": 7}}',
    b'{"repository": {"full_name": "a/b", "url": "https://api.github.com/repos/a/b"}, "workflow_job": "x"}',
    b'{"repository": {"full_name": "a/b", "url": "https://api.github.com/repos/a/b"}, '
    b'"workflow_job": {"id": 1, "status": "queued", "labels": "gpu", "created_at": 5}}',
    b'{"repository": {"full_name": "a/b", "url": "https://api.github.com/repos/a/b"}, '
    b'"workflow_job": {"id": 1, "status": 5, "labels": [], "created_at": [1], "started_at": "x"}}',
    b'{"workflow_job": {"id": ' + b"9" * 5000 + b"}}",
]


def hostile_requests(secret: bytes = SECRET) -> list[tuple[str, bytes, dict[str, str], int]]:
    """(what, body, headers, the answer it gets): each malformed in one way."""

    def signed(payload: bytes, **drop_or_set: str) -> dict[str, str]:
        head = {**headers(payload), "X-Hub-Signature-256": sign(secret, payload), **drop_or_set}
        return {name: value for name, value in head.items() if value}

    forged = "sha256=" + "0" * 64
    cases = [
        ("deep-signed", DEEP, signed(DEEP), 400),
        ("deep-forged", DEEP, signed(DEEP, **{"X-Hub-Signature-256": forged}), 401),
        ("deep-bad-header", DEEP, signed(DEEP, **{"X-Hub-Signature-256": "sha256=zz"}), 401),
        ("deep-unsigned", DEEP, signed(DEEP, **{"X-Hub-Signature-256": ""}), 401),
        ("deep-object-signed", b'{"a":' * 50_000, signed(b'{"a":' * 50_000), 400),
        ("not-json", b"{not json", signed(b"{not json"), 400),
        ("not-utf8", b"\xff\xfe{}", signed(b"\xff\xfe{}"), 400),
        ("not-json-forged", b"{not json", signed(b"{not json", **{"X-Hub-Signature-256": forged}), 401),
        ("no-event", body(1), signed(body(1), **{"X-GitHub-Event": ""}), 400),
        ("no-delivery", body(1), signed(body(1), **{"X-GitHub-Delivery": ""}), 400),
        ("long-delivery", body(1), signed(body(1), **{"X-GitHub-Delivery": "d" * 15 * 1024}), 400),
        ("delivery-not-guid", body(1), signed(body(1), **{"X-GitHub-Delivery": "{a guid?}"}), 400),
        ("no-content-type", body(1), signed(body(1), **{"Content-Type": ""}), 415),
        ("text-content-type", body(1), signed(body(1), **{"Content-Type": "text/plain"}), 415),
        ("form-not-a-form", body(1), signed(body(1), **{"Content-Type": FORM}), 400),
        ("form-two-payloads", TWO_PAYLOADS, signed(TWO_PAYLOADS, **{"Content-Type": FORM}), 400),
        ("form-not-ascii", b"payload=\xff", signed(b"payload=\xff", **{"Content-Type": FORM}), 400),
    ]
    cases += [(f"shape-{i}", shape, signed(shape), 400) for i, shape in enumerate(WRONG_SHAPES)]
    cases += [
        (f"shape-forged-{i}", shape, signed(shape, **{"X-Hub-Signature-256": forged}), 401)
        for i, shape in enumerate(WRONG_SHAPES)
    ]
    return cases


@pytest.mark.parametrize(("path", "secret"), [(PATH, SECRET), (TENANT_URL, POOL_SECRET)])
def test_malformed_requests_get_4xx_with_one_log_line_and_no_traceback(
    recorded: Recorded,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    path: str,
    secret: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the cluster-wide URL and at a pool's own (each refusal logged: the rate of those
    lines is test_a_flood_of_refused_requests_logs_one_line_each_ten_seconds's)."""
    monkeypatch.setattr(receiver_module, "REFUSAL_LOG_EVERY", 0.0)
    # A receiver whose cap an operator raised to 1 MiB: the 10^5 '[' reach the parser.
    server = hostile_server(recorded, TenantPools(), max_body=1 << 20)
    caplog.set_level(logging.DEBUG)
    answers: dict[str, int] = {}
    try:
        for what, payload, head, _ in hostile_requests(secret):
            caplog.clear()
            answers[what] = raw_post(server, payload, head, path)
            records = [r for r in caplog.records if r.levelno >= logging.INFO]
            assert len(records) == 1, (what, [r.getMessage() for r in records])
            assert records[0].exc_info is None and "Traceback" not in caplog.text, (what, caplog.text)
        assert deliver(server, 2)[0] == 200  # and it still serves
    finally:
        server.stop()
    assert answers == {what: status for what, _, _, status in hostile_requests(secret)}
    assert recorded.jobs == [2]
    assert "Traceback" not in "".join(capfd.readouterr())


#: The largest real ``workflow_job`` delivery found (receiver.DEFAULT_MAX_BODY says which).
LARGEST_REAL = 13_395


def padded_delivery(job_id: int, size: int) -> bytes:
    """A signed-able queued delivery of exactly ``size`` bytes."""
    plain = json.dumps({**delivery(job_object(job_id, "queued", ["self-hosted"])), "pad": ""}).encode()
    return plain[:-2] + b"x" * (size - len(plain)) + plain[-2:]


def test_by_default_a_body_over_32_kib_gets_413_unread_with_one_log_line(
    recorded: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    server = hostile_server(recorded, TenantPools())  # the component's limits: the default cap
    caplog.set_level(logging.DEBUG)
    largest, at_cap, over = (
        padded_delivery(n, size) for n, size in ((3, LARGEST_REAL), (4, 32 << 10), (5, (32 << 10) + 1))
    )
    try:
        assert raw_post(server, largest, headers(largest)) == 200
        assert raw_post(server, at_cap, headers(at_cap)) == 200  # 2.4x the largest real delivery
        caplog.clear()
        assert raw_post(server, over, headers(over)) == 413
        records = [r for r in caplog.records if r.levelno >= logging.INFO]
        assert len(records) == 1 and records[0].exc_info is None, [r.getMessage() for r in records]
    finally:
        server.stop()
    assert recorded.jobs == [3, 4]


def long_job_delivery(job_id: int, steps: int) -> bytes:
    """A ``completed`` delivery of a job of ``steps`` steps, compact as GitHub sends it, with the
    repository and sender in full (the REST description's examples; GitHub's own deliveries
    carry more still, ~9 KiB besides the steps, against ~5 KiB here)."""
    run = fixture("repo-workflow-runs.json")["workflow_runs"][0]
    job = job_object(job_id, "completed", ["self-hosted"], runner="a-x1y2z", completed="2030-01-20T17:50:00Z")
    job["steps"] = [{**job["steps"][0], "number": n, "name": f"Step {n}"} for n in range(1, steps + 1)]
    payload = delivery(job)
    payload.update(repository={**run["repository"], **payload["repository"]}, sender=run["actor"])
    return json.dumps(payload, separators=(",", ":")).encode()


def test_by_default_a_form_encoded_delivery_of_a_long_job_gets_200(recorded: Recorded) -> None:
    """GitHub's settings page makes a hook ``form`` by default, and percent-encoding makes a
    delivery ~1.5x its JSON: under the JSON's cap a form held half the steps (GitHub's own
    deliveries: from ~75), and a longer job's end got 413, learnt only from a poll, if any."""
    plain = long_job_delivery(6, steps=120)
    form = urllib.parse.urlencode({"payload": plain.decode()}).encode()
    assert len(plain) <= DEFAULT_MAX_BODY < len(form), "the JSON's cap holds it, not its form"
    server = hostile_server(recorded, TenantPools())  # the component's limits: the default cap
    try:
        assert raw_post(server, form, {**headers(form), "Content-Type": FORM}) == 200  # signed as sent
        assert raw_post(server, plain, headers(plain)) == 200
    finally:
        server.stop()
    assert recorded.jobs == [6, 6]


def test_an_unverified_body_is_never_parsed_and_names_only_the_secrets_of_its_url(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which secrets to try comes from the URL: a forgery costs no JSON parse, and no pool
    lookup or Secret read beyond those its URL names."""
    pools, secrets = TenantPools(), TenantSecrets()
    server = hostile_server(recorded, pools, secrets)
    parsed: list[int] = []
    loads = json.loads

    def counted(*args: Any, **kwargs: Any) -> Any:
        parsed.append(len(args[0]))
        return loads(*args, **kwargs)

    forged = "sha256=" + "0" * 64
    payload = body(4)
    monkeypatch.setattr(json, "loads", counted)  # from here on, every parse in this process
    try:
        # A well-formed forgery at the cluster-wide URL, for a repository whose pool has its own secret.
        assert raw_post(server, payload, {**headers(payload), "X-Hub-Signature-256": forged}) == 401
        assert (parsed, pools.lookups, secrets.reads) == ([], 0, 0)
        # Signed with the pool's own secret, but sent to the cluster-wide URL: not tried there.
        own = {**headers(payload), "X-Hub-Signature-256": sign(POOL_SECRET, payload)}
        assert raw_post(server, payload, own) == 401
        assert (parsed, pools.lookups, secrets.reads) == ([], 0, 0)
        # At a URL no pool names: one lookup of the namespace, no Secret read.
        assert raw_post(server, payload, own, f"{PATH}/team-b/hooks") == 401
        assert (parsed, secrets.reads) == ([], 0)
        # A forgery at the pool's URL: its Secret (read, then re-read once), never the body.
        assert raw_post(server, payload, {**own, "X-Hub-Signature-256": forged}, TENANT_URL) == 401
        assert parsed == [] and secrets.reads <= 2
        # Verified at the pool's URL: parsed once, after the signature.
        assert raw_post(server, payload, own, TENANT_URL) == 200
        assert parsed == [len(payload)]
        for bad in (f"{PATH}/team-a", f"{PATH}/team-a/hooks/more", f"{PATH}/Team_A/hooks", f"{PATH}/../x"):
            assert raw_post(server, payload, own, bad) == 404, bad
    finally:
        server.stop()
    assert recorded.jobs == [4]


class ManyKeyPools(TenantPools):
    """One tenant's ``count`` pools, each naming a key of its own of Secret ``hooks``."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self._parsed = []
        for i in range(count):
            ref = {"name": "hooks", "key": f"k{i:04d}"}
            manifest = pool_manifest(
                f"p{i}", repo="octo-org/hello-world", autoscaling={"maxReplicas": 1, "webhookSecretRef": ref}
            )
            manifest["metadata"]["namespace"] = TENANT
            self._parsed.append(parse_pool(manifest))

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        return self._parsed if namespace == TENANT else []


class EightLineKeys(TenantSecrets):
    """Every key of ``hooks`` holds the most a key may (8 secrets); counts the HMACs tried."""

    def __init__(self) -> None:
        super().__init__()
        self.hmacs = 0

    def get(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
        self.hmacs += MAX_POOL_SECRET_LINES  # verify() tries each value once
        return Secrets(values=tuple(f"{ref.key}-{i}".encode() for i in range(MAX_POOL_SECRET_LINES)))

    def refresh(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets | None:
        return None  # read just now


def test_a_tenant_naming_many_keys_of_one_secret_cannot_make_forgeries_to_its_url_expensive() -> None:
    """Every secret a URL names is an HMAC over every delivery to it, forged ones included: one
    tenant's 100 pools, a key each, made one forgery cost 800 HMACs (0.39 s at 1,000 pools).
    The URL tries the first 8 keys by name; the pools past them say so, and the others still
    move."""
    pools, secrets = ManyKeyPools(100), EightLineKeys()
    verifier = Verifier(lambda: (SECRET,), pools, secrets)
    payload = body(4)
    route = Route(TENANT, "hooks")
    assert not verifier(payload, "sha256=" + "0" * 64, route).accepted
    assert secrets.hmacs <= MAX_KEYS_PER_ROUTE * MAX_POOL_SECRET_LINES

    first = pools.pools_in(TENANT)[0].model
    assert first is not None and verifier(payload, sign(b"k0000-7", payload), route).admits(first)
    assert not verifier(payload, sign(f"k{MAX_KEYS_PER_ROUTE:04d}-0".encode(), payload), route).accepted
    keys = RouteKeys(pools)
    assert keys.problem(TENANT, api.WebhookSecretRef(name="hooks", key="k0000")) is None
    told = keys.problem(TENANT, api.WebhookSecretRef(name="hooks", key=f"k{MAX_KEYS_PER_ROUTE:04d}"))
    assert told is not None and told.reason == Reason.TOO_MANY_SECRET_KEYS
    assert f"k{MAX_KEYS_PER_ROUTE:04d}" in told.cause and "100 keys" in told.cause


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


#: What all connections together may make the receiver buffer, by default (docs/security.md).
STATED_BOUND_MIB = 20


def test_300_stalled_uploads_of_the_largest_body_stay_under_the_stated_bound(recorded: Recorded) -> None:
    """The stated bound: the default connection cap x (the form's body cap + header cap); the
    receiver's RSS (it runs in this process) is measured once its buffers stop growing."""
    limits = Limits(read_timeout=60)
    largest = FORM_FACTOR * limits.max_body  # a form's: what the server itself takes
    assert limits.max_connections * (largest + limits.max_header) <= STATED_BOUND_MIB * 2**20
    server = WebhookServer(0, lambda: (SECRET,), recorded, host="127.0.0.1", limits=limits)
    server.start()
    before = _rss_mib()
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {largest}\r\n\r\n".encode()
    stalled_upload = head + b" " * (largest - 1)  # all but the last byte
    socks: list[socket.socket] = []
    try:
        for _ in range(300):
            sock = connect(server)
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # what is not sent is the client's to hold
                sock.send(stalled_upload)
            socks.append(sock)
        wait_for(lambda: server.connections == limits.max_connections, timeout=20, message="the cap reached")
        readings = [_rss_mib()]

        def settled() -> bool:
            readings.append(_rss_mib())
            return abs(readings[-1] - readings[-2]) < 0.5

        wait_for(settled, timeout=20, interval=0.5, message="the server's buffers filled")
        grown = max(readings) - before
        print(f"300 stalled uploads of {largest} bytes: RSS +{grown:.1f} MiB")
        assert grown < STATED_BOUND_MIB, f"{grown:.1f} MiB"
    finally:
        for sock in socks:
            sock.close()
        server.stop()
    assert recorded.jobs == []


def test_a_flood_of_refused_requests_logs_one_line_each_ten_seconds(caplog: pytest.LogCaptureFixture) -> None:
    """Anyone on the internet may send refused requests by the hundred a second: a line each
    filled the receiver's log; the metric counts every one."""
    now = [100.0]
    refusals = receiver_module.RefusalLog(clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger=receiver_module.__name__)

    for _ in range(100):
        refusals.refused("203.0.113.7", 401, "missing or invalid X-Hub-Signature-256")
    now[0] += receiver_module.REFUSAL_LOG_EVERY
    refusals.refused("203.0.113.8", 401, "missing or invalid X-Hub-Signature-256")

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[1].endswith("(99 more refused since the last such line)")
