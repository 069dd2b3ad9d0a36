"""``/metrics`` for Prometheus: plain HTTP, or with ``--metrics-secure`` HTTPS that only answers
bearer tokens whose user may get the ``/metrics`` URL.

The secure mode does what controller-runtime's metrics filters
(``filters.WithAuthenticationAndAuthorization``) do for operators written in Go, so a
cluster's usual scrape set-up works unchanged: the bearer token goes to a TokenReview (who is
this?), the user it names to a SubjectAccessReview for ``nonResourceAttributes`` path
``/metrics``, verb ``get`` (may they?).  No token or one the API server does not accept: 401;
a user without the permission (ClusterRole ``runnerpool-operator-metrics-reader``): 403; the
API server not answering: 500, as controller-runtime answers.  Review answers are kept
for :data:`REVIEW_TTL` seconds (at most :data:`REVIEW_CACHE_SIZE` of each kind, keyed by the
token's SHA-256, never the token itself), so a scrape every 15 s costs no API call most of
the time.  Failed reviews are not kept.

What is whose: the exposition is prometheus-client's (its registry and content negotiation),
the HTTP server waitress's through ``runnerpool.webserver`` (as the probes and the webhook
receiver), TLS the ``ssl`` module's driven on waitress's I/O thread (``runnerpool.webserver``
says how), the in-memory self-signed certificate ``cryptography``'s, the bounded expiring
caches ``cachetools``'.  Written by hand, because no Python library offers it: the two reviews
and the 401/403 answers.  A client that never finishes its handshake or its request holds a
socket, never a thread, and is dropped after :data:`CONNECTION_TIMEOUT`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import os
import secrets
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

from cachetools import TTLCache
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder

from runnerpool.api_errors import describe
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.settings import ProbeSettings
from runnerpool.webserver import Limits, StartResponse, WebServer, WsgiApp

__all__ = [
    "CONNECTION_TIMEOUT",
    "METRICS_PATH",
    "REVIEW_CACHE_SIZE",
    "REVIEW_TTL",
    "CachedReviews",
    "KubeReviews",
    "MetricsEndpoint",
    "Reviews",
    "User",
    "self_signed_context",
]

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
#: Seconds a review answer is reused: a revoked permission or token stops working within this.
REVIEW_TTL = 30.0
REVIEW_CACHE_SIZE = 1024
#: A connection's TLS handshake and request must arrive within this many seconds.
CONNECTION_TIMEOUT = 10.0
_CERT_VALIDITY = dt.timedelta(days=365)

TOKEN_REVIEWS = Resource("authentication.k8s.io/v1", "tokenreviews", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource("authorization.k8s.io/v1", "subjectaccessreviews", namespaced=False)


@dataclass(frozen=True)
class User:
    """Who a TokenReview says a token belongs to: what a SubjectAccessReview asks about."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Reviews(Protocol):
    def authenticate(self, token: str) -> User | None:
        """The token's user, or None when the API server does not accept the token."""

    def may_get(self, user: User, path: str) -> bool:
        """Whether ``user`` may ``get`` the non-resource URL ``path``."""


class KubeReviews:
    """TokenReview and SubjectAccessReview on the API server (RBAC: create on both)."""

    def __init__(self, api_client: ApiClient) -> None:
        self._kube = Kube(api_client)

    def authenticate(self, token: str) -> User | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        # The answer echoes the token: it is read here and never logged.
        status = self._kube.create(TOKEN_REVIEWS, "", body).get("status") or {}
        if not status.get("authenticated"):
            return None
        info = status.get("user") or {}
        extra = info.get("extra") or {}
        return User(
            username=str(info.get("username") or ""),
            uid=str(info.get("uid") or ""),
            groups=tuple(info.get("groups") or ()),
            extra=tuple(sorted((key, tuple(values)) for key, values in extra.items())),
        )

    def may_get(self, user: User, path: str) -> bool:
        spec: dict[str, Any] = {
            "user": user.username,
            "groups": list(user.groups),
            "extra": {key: list(values) for key, values in user.extra},
            "nonResourceAttributes": {"path": path, "verb": "get"},
        }
        if user.uid:
            spec["uid"] = user.uid
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return bool((self._kube.create(SUBJECT_ACCESS_REVIEWS, "", body).get("status") or {}).get("allowed"))


_MISSING = object()


class CachedReviews:
    """Reuses answers (positive and negative) for ``ttl`` seconds; errors are not kept."""

    def __init__(
        self,
        reviews: Reviews,
        *,
        ttl: float = REVIEW_TTL,
        maxsize: int = REVIEW_CACHE_SIZE,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reviews = reviews
        self._lock = threading.Lock()
        self._users: TTLCache[bytes, User | None] = TTLCache(maxsize, ttl, timer)
        self._decisions: TTLCache[tuple[User, str], bool] = TTLCache(maxsize, ttl, timer)

    def authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).digest()
        with self._lock:
            found = self._users.get(key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        user = self._reviews.authenticate(token)
        with self._lock:
            self._users[key] = user
        return user

    def may_get(self, user: User, path: str) -> bool:
        key = (user, path)
        with self._lock:
            found = self._decisions.get(key)
        if found is not None:
            return found
        allowed = self._reviews.may_get(user, path)
        with self._lock:
            self._decisions[key] = allowed
        return allowed


# ------------------------------------------------------------------------------ certificates


def _server_context(cert: Path, key: Path, password: bytes | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The encrypted reads on waitress's I/O thread cannot answer a renegotiation; TLS 1.3 has none.
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.load_cert_chain(str(cert), str(key), password=password)
    return context


def self_signed_context(hosts: tuple[str, ...] = ()) -> ssl.SSLContext:
    """A context with a fresh self-signed certificate for localhost, this host and ``hosts``.

    ``ssl`` loads keys only from files: the key goes through a private temporary folder,
    encrypted with a random password, and the folder is gone before this returns.
    ``cryptography`` is imported here, only by an operator that serves /metrics over HTTPS.
    """
    from cryptography import x509  # noqa: PLC0415 - not needed by the default, plain HTTP
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", socket.gethostname(), *hosts]
    sans: list[x509.GeneralName] = []
    for name in dict.fromkeys(n for n in names if n and n not in ("0.0.0.0", "::")):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runnerpool-operator-metrics")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )
    password = secrets.token_bytes(32)
    with tempfile.TemporaryDirectory(prefix="runnerpool-metrics-") as folder:
        cert_file, key_file = Path(folder, "tls.crt"), Path(folder, "tls.key")
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(password),
            )
        )
        return _server_context(cert_file, key_file, password)


class _Certificates:
    """The TLS context for each new connection: self-signed once, or ``tls.crt``/``tls.key``
    from a folder, loaded again when either file changes (a renewed Secret, cert-manager)."""

    def __init__(self, cert_dir: str, hosts: tuple[str, ...]) -> None:
        self._lock = threading.Lock()
        self._folder = Path(cert_dir) if cert_dir else None
        self._stamp: tuple[int, ...] | None = None
        if self._folder is None:
            self._context = self_signed_context(hosts)
            return
        try:
            self._stamp = self._files_stamp()
            self._context = _server_context(*self._files())
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"--metrics-cert-dir {cert_dir}: cannot load tls.crt/tls.key: {err}") from err

    def _files(self) -> tuple[Path, Path]:
        assert self._folder is not None
        return self._folder / "tls.crt", self._folder / "tls.key"

    def _files_stamp(self) -> tuple[int, ...]:
        """Changes when either file does (a kubelet swaps a Secret's files: a new inode)."""
        return tuple(
            part
            for path in self._files()
            for found in [os.stat(path)]
            for part in (found.st_ino, found.st_size, found.st_mtime_ns)
        )

    def context(self) -> ssl.SSLContext:
        if self._folder is None:
            return self._context
        with self._lock:
            try:
                stamp = self._files_stamp()
                if stamp != self._stamp:
                    self._context = _server_context(*self._files())
                    self._stamp = stamp
                    log.info("metrics certificate reloaded from %s", self._folder)
            except (OSError, ssl.SSLError) as err:  # half-written during a rotation: next time
                log.warning("metrics certificate not reloaded from %s: %s", self._folder, describe(err))
            return self._context


# ------------------------------------------------------------------------------ the endpoint


#: What one scraper may take: a few threads (a scrape may wait on a review), few connections.
LIMITS = Limits(read_timeout=int(CONNECTION_TIMEOUT), max_connections=64, threads=2)

_TEXT = "text/plain; charset=utf-8"


class MetricsEndpoint:
    """The metrics server: ``start()``, then ``stop(timeout)``; ``port`` is where it listens."""

    def __init__(
        self,
        settings: ProbeSettings,
        api_client: ApiClient | None = None,
        *,
        registry: CollectorRegistry = REGISTRY,
        reviews: Reviews | None = None,
    ) -> None:
        self.secure = settings.metrics_secure
        certificates: _Certificates | None = None
        if self.secure:
            if reviews is None:
                if api_client is None:
                    raise ValueError("--metrics-secure needs an API client for its reviews")
                reviews = CachedReviews(KubeReviews(api_client))
            certificates = _Certificates(settings.metrics_cert_dir, (settings.metrics_bind_address,))
        self._server = WebServer(
            _app(registry, reviews if self.secure else None),
            settings.metrics_bind_address,
            settings.metrics_port,
            "metrics",
            limits=LIMITS,
            tls=certificates.context if certificates is not None else None,
        )

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()
        log.info("metrics on %s://:%d%s", "https" if self.secure else "http", self.port, METRICS_PATH)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop listening; True if the server thread ended within ``timeout``."""
        return self._server.stop(timeout)


_Answer = tuple[int, bytes, str, dict[str, str]]


def _app(registry: CollectorRegistry, reviews: Reviews | None) -> WsgiApp:
    """The WSGI application: /metrics, behind the reviews when there are any."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        code, body, content_type, extra = _answer(registry, reviews, environ)
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *extra.items()]
        start_response(f"{code} {HTTPStatus(code).phrase}", headers)
        return [body]

    return app


def _answer(registry: CollectorRegistry, reviews: Reviews | None, environ: dict[str, Any]) -> _Answer:
    if environ.get("PATH_INFO") != METRICS_PATH:
        return 404, b"not found\n", _TEXT, {}
    if reviews is not None:
        refused = _refusal(reviews, str(environ.get("HTTP_AUTHORIZATION") or ""))
        if refused is not None:
            return refused
    encoder, content_type = choose_encoder(str(environ.get("HTTP_ACCEPT") or ""))
    return 200, encoder(registry), content_type, {}


def _refusal(reviews: Reviews, authorization: str) -> _Answer | None:
    """TokenReview, then SubjectAccessReview: the answer when they refuse, None when allowed."""
    unauthorized: _Answer = (401, b"Unauthorized\n", _TEXT, {"WWW-Authenticate": "Bearer"})
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return unauthorized
    try:
        user = reviews.authenticate(token)
    except Exception as err:
        log.warning("metrics: token review failed: %s", describe(err))
        return 500, b"Authentication failed\n", _TEXT, {}
    if user is None:
        return unauthorized
    try:
        allowed = reviews.may_get(user, METRICS_PATH)
    except Exception as err:
        log.warning("metrics: access review failed: %s", describe(err))
        return 500, b"Authorization failed\n", _TEXT, {}
    if not allowed:
        log.debug("metrics: %s may not get %s", user.username, METRICS_PATH)
        return 403, b"Forbidden\n", _TEXT, {}
    return None
