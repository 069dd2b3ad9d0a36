"""The metrics endpoint in-process: what a scraper sees, how often the API server is asked.

Reviews are played by a stand-in that counts its calls (the answers the API server gives are
tested on the real one at the end, and with the operator process in
tests/e2e/test_metrics_auth.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import ipaddress
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge

from runnerpool import metrics_endpoint
from runnerpool.metrics_endpoint import METRICS_PATH, CachedReviews, KubeReviews, MetricsEndpoint, User
from runnerpool.settings import ProbeSettings
from runnerpool.webserver import Limits
from tests.helpers import wait_for
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    install_operator_rbac,
    metrics_reader_binding,
    service_account_user,
    token_of,
)
from testworld.ports import free_port

READER = User("system:serviceaccount:monitoring:prometheus", "uid-1", ("system:serviceaccounts",))
STRANGER = User("system:serviceaccount:default:nobody")


@dataclass
class Reviews:
    """Tokens ``reader`` and ``stranger`` exist; only the reader may get /metrics."""

    fail: bool = False
    calls: list[str] = field(default_factory=list)

    def authenticate(self, token: str) -> User | None:
        self.calls.append("token")
        if self.fail:
            raise ConnectionError("API server unreachable")
        return {"reader": READER, "stranger": STRANGER}.get(token)

    def may_get(self, user: User, path: str) -> bool:
        self.calls.append("access")
        return user == READER and path == METRICS_PATH


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("runnerpool_test_scrapes", "a metric the test can find", registry=registry).inc()
    return registry


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def scrape(
    endpoint: MetricsEndpoint,
    token: str | None = None,
    *,
    path: str = METRICS_PATH,
    context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
) -> tuple[int, str, str]:
    """(status, body, content type) of one GET."""
    scheme = "https" if endpoint.secure else "http"
    request = urllib.request.Request(f"{scheme}://{host}:{endpoint.port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    ctx = (context or _unverified()) if endpoint.secure else None
    try:
        with urllib.request.urlopen(request, timeout=5, context=ctx) as answer:
            return int(answer.status), answer.read().decode(), answer.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Content-Type", "")


@pytest.fixture
def reviews() -> Reviews:
    return Reviews()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def secure(reviews: Reviews, clock: Clock) -> Iterator[MetricsEndpoint]:
    settings = ProbeSettings(metrics_port=free_port(), metrics_bind_address="127.0.0.1", metrics_secure=True)
    endpoint = MetricsEndpoint(
        settings, registry=_registry(), reviews=CachedReviews(reviews, ttl=30, timer=clock)
    )
    endpoint.start()
    yield endpoint
    assert endpoint.stop(timeout=5), "the metrics server thread did not end"


def test_no_token_or_a_bad_one_is_401_and_costs_no_access_review(
    secure: MetricsEndpoint, reviews: Reviews
) -> None:
    code, body, _ = scrape(secure)
    assert (code, body) == (401, "Unauthorized\n")
    assert reviews.calls == [], "no token: nothing to ask the API server"
    assert scrape(secure, "forged")[0] == 401
    assert reviews.calls == ["token"]


def test_a_user_without_the_permission_is_403(secure: MetricsEndpoint) -> None:
    code, body, _ = scrape(secure, "stranger")
    assert (code, body) == (403, "Forbidden\n")
    assert "runnerpool_test_scrapes" not in body


def test_a_reader_gets_prometheus_text(secure: MetricsEndpoint) -> None:
    code, body, content_type = scrape(secure, "reader")
    assert code == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "runnerpool_test_scrapes_total 1.0" in body


def test_answers_are_reused_until_they_expire(
    secure: MetricsEndpoint, reviews: Reviews, clock: Clock
) -> None:
    for _ in range(5):  # a scrape every 15 s for a minute would be this, within one TTL
        assert scrape(secure, "reader")[0] == 200
        assert scrape(secure, "stranger")[0] == 403
    assert sorted(reviews.calls) == ["access", "access", "token", "token"]
    clock.now += 31
    assert scrape(secure, "reader")[0] == 200
    assert sorted(reviews.calls) == ["access", "access", "access", "token", "token", "token"]


def test_an_unreachable_api_server_is_500_and_not_remembered(
    secure: MetricsEndpoint, reviews: Reviews
) -> None:
    reviews.fail = True
    assert scrape(secure, "reader")[:2] == (500, "Authentication failed\n")
    reviews.fail = False
    assert scrape(secure, "reader")[0] == 200, "a failed review is asked again, not cached"


def test_only_metrics_is_served(secure: MetricsEndpoint) -> None:
    assert scrape(secure, "reader", path="/debug")[0] == 404


def test_a_client_that_does_not_speak_tls_leaves_the_server_serving(secure: MetricsEndpoint) -> None:
    with socket.create_connection(("127.0.0.1", secure.port), timeout=5) as plain:
        plain.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        with contextlib.suppress(ConnectionResetError):  # the handshake fails; the connection goes
            assert plain.recv(100) == b"", "no HTTP answer without TLS"
    with socket.create_connection(("127.0.0.1", secure.port), timeout=5):
        pass  # one that never starts a handshake holds one thread, not the server
    assert scrape(secure, "reader")[0] == 200


def test_a_large_scrape_arrives_whole_and_a_connection_serves_many_over_tls(reviews: Reviews) -> None:
    """A thousand pools make a scrape of many TLS records; Prometheus keeps its connection."""
    registry = CollectorRegistry()
    gauge = Gauge("runnerpool_test_pool", "one series per pool", ["pool"], registry=registry)
    for n in range(5000):
        gauge.labels(f"pool-{n:05d}").set(n)
    settings = ProbeSettings(metrics_port=free_port(), metrics_bind_address="127.0.0.1", metrics_secure=True)
    endpoint = MetricsEndpoint(settings, registry=registry, reviews=reviews)
    endpoint.start()
    connection = http.client.HTTPSConnection("127.0.0.1", endpoint.port, timeout=5, context=_unverified())
    try:
        for _ in range(3):
            connection.request("GET", METRICS_PATH, headers={"Authorization": "Bearer reader"})
            answer = connection.getresponse()
            body = answer.read().decode()
            assert answer.status == 200
            assert body.count("runnerpool_test_pool{") == 5000 and 'pool="pool-04999"' in body
    finally:
        connection.close()
        endpoint.stop()


def test_a_client_that_never_finishes_its_handshake_is_dropped(
    reviews: Reviews, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_endpoint, "LIMITS", Limits(read_timeout=1, max_connections=8, threads=1))
    settings = ProbeSettings(metrics_port=free_port(), metrics_bind_address="127.0.0.1", metrics_secure=True)
    endpoint = MetricsEndpoint(settings, registry=_registry(), reviews=reviews)
    endpoint.start()
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5) as stalled:
            stalled.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and no more
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert stalled.recv(100) == b"", "no answer to half a handshake"
            assert time.monotonic() - started < 4, "dropped after the read timeout, not held"
        assert scrape(endpoint, "reader")[0] == 200
    finally:
        endpoint.stop()


def test_without_metrics_secure_it_is_plain_http_for_anyone(reviews: Reviews) -> None:
    endpoint = MetricsEndpoint(
        ProbeSettings(metrics_port=free_port(), metrics_bind_address="127.0.0.1"),
        registry=_registry(),
        reviews=reviews,
    )
    endpoint.start()
    try:
        code, body, _ = scrape(endpoint)
    finally:
        endpoint.stop()
    assert code == 200 and "runnerpool_test_scrapes_total" in body
    assert reviews.calls == []


# --- certificates ---------------------------------------------------------------------------


def _write_certificate(folder: Path, common_name: str) -> bytes:
    """A self-signed tls.crt/tls.key for 127.0.0.1 in ``folder``; returns the certificate (PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (folder / "tls.crt").write_bytes(pem)
    return pem


def _verifying(pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=pem.decode())


def test_a_cert_dir_is_served_and_reloaded_when_it_changes(tmp_path: Path, reviews: Reviews) -> None:
    first = _write_certificate(tmp_path, "first")
    endpoint = MetricsEndpoint(
        ProbeSettings(
            metrics_port=free_port(),
            metrics_bind_address="127.0.0.1",
            metrics_secure=True,
            metrics_cert_dir=str(tmp_path),
        ),
        registry=_registry(),
        reviews=reviews,
    )
    endpoint.start()
    try:
        assert scrape(endpoint, "reader", context=_verifying(first))[0] == 200
        second = _write_certificate(tmp_path, "second")
        assert scrape(endpoint, "reader", context=_verifying(second))[0] == 200
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            scrape(endpoint, "reader", context=_verifying(first))
    finally:
        endpoint.stop()


def test_a_cert_dir_without_the_files_refuses_to_start(tmp_path: Path) -> None:
    settings = ProbeSettings(metrics_port=free_port(), metrics_secure=True, metrics_cert_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"--metrics-cert-dir .*tls\.crt/tls\.key"):
        MetricsEndpoint(settings, reviews=Reviews())


def test_the_self_signed_certificate_names_localhost(secure: MetricsEndpoint) -> None:
    pem = ssl.get_server_certificate(("127.0.0.1", secure.port))
    cert = x509.load_pem_x509_certificate(pem.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)


# --- the real reviews -----------------------------------------------------------------------


def test_kube_reviews_ask_the_api_server(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """deploy/'s metrics reader role lets a ServiceAccount get /metrics, and nothing else.

    Admin asks here; the operator's own permission to ask is tested with its process."""
    install_operator_rbac(control_plane)
    client.CoreV1Api(api_client).create_namespaced_service_account(
        namespace, {"metadata": {"name": "scraper"}}
    )
    reviews = KubeReviews(api_client)
    user = reviews.authenticate(token_of(api_client, namespace, "scraper", seconds=600))
    assert user is not None
    assert user.username == service_account_user(namespace, "scraper")
    assert f"system:serviceaccounts:{namespace}" in user.groups
    assert reviews.authenticate("not-a-token") is None
    assert not reviews.may_get(user, METRICS_PATH)
    with metrics_reader_binding(api_client, namespace, "scraper"):
        wait_for(lambda: reviews.may_get(user, METRICS_PATH), message="RBAC to allow the scraper")
        assert not reviews.may_get(user, "/debug")
