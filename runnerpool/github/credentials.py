"""From a credential Secret to a GitHub client, and one client per Secret.

Pools name a Secret (meows' layout: ``token`` for a personal access token, or ``app-id``,
``app-installation-id`` and ``app-private-key`` for a GitHub App). Many pools usually share
one Secret; sharing one client between them also shares PyGithub's request spacing and the
App installation token, so N pools do not mint N installation tokens.

meows reads the Secret once at start-up, so rotating a credential needs a controller restart.
Here every ``get`` re-reads the Secret through an injected reader (an informer cache in
production, so it is free) and rebuilds the client when the content changes.

PyGithub, PyJWT and ``cryptography`` (a sixth of the operator's start-up CPU) are imported
by the first client built, not by this module: an operator starts, syncs its caches and
answers its probes before any pool needs GitHub (tests/test_startup_imports.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from runnerpool.domain import DEFAULT_API_URL, Connection, PoolRef, pool_key, resolve_api_url, with_userinfo
from runnerpool.github.protocol import GitHubClient, GitHubClients
from runnerpool.github.route import Route
from runnerpool.naming import APP_PRIVATE_KEY_KEY, ARC_APP_PRIVATE_KEY_KEY, ARC_PAT_KEY, PAT_KEY
from runnerpool.reasons import Reason
from runnerpool.tenants import GitHubHosts

if TYPE_CHECKING:
    from runnerpool.github.pygithub import ClientOptions
    from runnerpool.settings import GitHubSettings

__all__ = [
    "APP_ID_KEY",
    "APP_INSTALLATION_ID_KEY",
    "APP_PRIVATE_KEY_KEY",
    "ARC_KEYS",
    "MAX_CA_BUNDLE_CHARS",
    "MAX_CLIENTS",
    "PAT_KEY",
    "ClientCache",
    "ClientFactory",
    "CredentialError",
    "KeepsLastGoodClient",
    "SecretReader",
    "bounded_factory",
    "client_from_secret_data",
    "credentials_version",
    "teardown_client",
]

log = logging.getLogger(__name__)

APP_ID_KEY = "app-id"
APP_INSTALLATION_ID_KEY = "app-installation-id"
_APP_KEYS = (APP_ID_KEY, APP_INSTALLATION_ID_KEY, APP_PRIVATE_KEY_KEY)
#: The keys of a spec.proxy credential Secret (ARC's).
_PROXY_USER, _PROXY_PASSWORD = "username", "password"
#: RFC 3986 userinfo: unreserved, percent-encoded and sub-delimiter characters; ``:`` only in
#: the password (the first one ends the username).
_USERNAME_CHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*")
_PASSWORD_CHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*")
#: actions-runner-controller's key names for the same values: a Secret made for ARC works
#: here unchanged (docs/migrating.md); our own name wins where both are present.
ARC_KEYS = {
    ARC_PAT_KEY: PAT_KEY,
    "github_app_id": APP_ID_KEY,
    "github_app_installation_id": APP_INSTALLATION_ID_KEY,
    ARC_APP_PRIVATE_KEY_KEY: APP_PRIVATE_KEY_KEY,
}

SecretReader = Callable[[str, str], "Mapping[str, str] | None"]

#: Clients kept (one per namespace, Secret and API URL in use); the least recently used goes
#: first. Each holds a connection pool and an ETag cache: without a bound, every Secret ever
#: named (tenants create and delete them at will) would keep one for the process's life.
MAX_CLIENTS = 1024
#: A pool's own CA bundle (``spec.githubServerTLS``): its file, with the public CAs, goes to the
#: operator's small /tmp (``runnerpool.github.route.MAX_CA_FILES``).
MAX_CA_BUNDLE_CHARS = 256 * 1024


class ClientFactory(Protocol):
    def __call__(self, data: Mapping[str, str], base_url: str, /) -> GitHubClient: ...


@runtime_checkable
class _Nameable(Protocol):
    """A client that can be told whose credential it uses (``PyGithubClient``)."""

    def name_credential(self, name: str) -> None: ...


@runtime_checkable
class _Routable(Protocol):
    """A client that can be told its pool's CA bundle and proxy (``PyGithubClient``)."""

    def take_route(self, route: Route) -> None: ...


@runtime_checkable
class KeepsLastGoodClient(Protocol):
    """A client source that can still hand out a client whose Secret has disappeared."""

    def last_good(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient | None: ...


class CredentialError(Exception):
    """The credential Secret is absent or unusable; the message says what to add or fix.

    Messages name keys only, never values: they end up in conditions, events and logs.
    """

    #: ``reason`` of a Secret that does not exist (``missing``).
    MISSING = Reason.CREDENTIAL_SECRET_MISSING

    #: As ``GitHubError.retry_after``, so a caller of either asks one way: a credential problem
    #: gives no hint of when to look again (a human fixes it; the Secret's event says when).
    retry_after: float | None = None

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    @classmethod
    def missing(cls, message: str) -> CredentialError:
        return cls(cls.MISSING, message)

    @classmethod
    def malformed(cls, message: str) -> CredentialError:
        return cls(Reason.CREDENTIAL_SECRET_MALFORMED, message)

    @classmethod
    def host_not_allowed(cls, message: str) -> CredentialError:
        return cls(Reason.GITHUB_HOST_NOT_ALLOWED, message)

    @classmethod
    def connection_missing(cls, message: str) -> CredentialError:
        return cls(Reason.GITHUB_CONNECTION_CONFIG_MISSING, message)


def _url_ready(value: str, what: str, allowed: re.Pattern[str]) -> str:
    """A proxy login as it goes into the proxy URL, here and in the runner pods' ``http_proxy``
    (where Kubernetes puts the Secret's value in unchanged, so the operator cannot encode it
    for them): a character a URL's userinfo cannot carry as it is would send another login, or
    another host, so it is refused with what to do. The value is never echoed."""
    if not allowed.fullmatch(value):
        raise CredentialError.malformed(
            f"{what} has characters a proxy URL cannot carry as they are: percent-encode them in the "
            "Secret (e.g. '@' as %40, ':' in a username as %3A, '/' as %2F, '%' as %25)"
        )
    return value


def _positive_int(data: Mapping[str, str], key: str) -> int:
    raw = data[key].strip()
    if not raw.isdigit() or int(raw) <= 0:
        raise CredentialError.malformed(f"key {key!r} must be a positive integer")
    return int(raw)


def _checked_pem(data: Mapping[str, str]) -> str:
    """Parse the key now: PyJWT would otherwise fail at the first request, deep in PyGithub."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - see the module docstring

    pem = data[APP_PRIVATE_KEY_KEY].strip() + "\n"
    try:
        serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        # The parser's message is dropped on purpose: it is not guaranteed to omit key bytes.
        raise CredentialError.malformed(
            f"key {APP_PRIVATE_KEY_KEY!r} is not an unencrypted PEM private key "
            "(download a new one from the GitHub App settings)"
        ) from None
    return pem


def _validated_base_url(base_url: str) -> str:
    url = resolve_api_url(base_url)
    if not url.startswith(("https://", "http://")):
        raise CredentialError.malformed(f"GitHub API URL {url!r} must start with https://")
    return url


def _with_arc_keys(data: Mapping[str, str]) -> Mapping[str, str]:
    """``data`` with ARC's key names read as ours (``ARC_KEYS``), ours kept where both are set."""
    if not any(key in data for key in ARC_KEYS):
        return data
    renamed = {
        ours: data[arc] for arc, ours in ARC_KEYS.items() if arc in data and not data.get(ours, "").strip()
    }
    return {**data, **renamed}


def client_from_secret_data(
    data: Mapping[str, str],
    base_url: str = DEFAULT_API_URL,
    options: ClientOptions | None = None,
) -> GitHubClient:
    """Build a client from already-decoded Secret data.

    App keys win if any of them is present, so a half-migrated Secret (PAT plus incomplete App
    keys) is reported as malformed instead of silently using the PAT.
    """
    from github import Auth  # noqa: PLC0415 - see the module docstring

    from runnerpool.github.pygithub import PyGithubClient  # noqa: PLC0415 - imports PyGithub

    url = _validated_base_url(base_url)
    data = _with_arc_keys(data)
    present_app_keys = [k for k in _APP_KEYS if data.get(k, "").strip()]
    if present_app_keys:
        missing = [k for k in _APP_KEYS if k not in present_app_keys]
        if missing:
            raise CredentialError.malformed(
                "GitHub App credentials need keys "
                + ", ".join(repr(k) for k in _APP_KEYS)
                + "; missing: "
                + ", ".join(repr(k) for k in missing)
            )
        app_id = _positive_int(data, APP_ID_KEY)
        installation_id = _positive_int(data, APP_INSTALLATION_ID_KEY)
        pem = _checked_pem(data)
        auth: Auth.Auth = Auth.AppAuth(app_id, pem).get_installation_auth(installation_id)
    else:
        token = data.get(PAT_KEY, "").strip()
        if not token:
            raise CredentialError.malformed(
                f"add key {PAT_KEY!r} (personal access token) or keys "
                + ", ".join(repr(k) for k in _APP_KEYS)
                + " (GitHub App)"
            )
        if not token.isprintable() or any(c.isspace() for c in token):
            # Two lines (an old and a new token, as webhook secrets rotate) or a stray control
            # character: requests refuses the header and quotes it, token and all, in an
            # exception that tracebacks would print; and no retry can help.
            raise CredentialError.malformed(
                f"key {PAT_KEY!r} holds whitespace or control characters inside the token: "
                "put exactly one token there, on one line"
            )
        auth = Auth.Token(token)
    return PyGithubClient.from_auth(auth, url, options)


def bounded_factory(timeout: int, max_response_bytes: int) -> ClientFactory:
    """``client_from_secret_data`` with each call's deadline and answer cap (``--github-timeout``,
    ``--github-max-response-bytes``); PyGithub is still imported by the first client built."""

    def build(data: Mapping[str, str], base_url: str, /) -> GitHubClient:
        from runnerpool.github.pygithub import ClientOptions  # noqa: PLC0415 - see the module docstring

        options = ClientOptions(timeout=timeout, max_response_bytes=max_response_bytes)
        return client_from_secret_data(data, base_url, options)

    return build


def credentials_version(secret: Mapping[str, Any] | None) -> str:
    """What a pool's jobs are keyed by (``PoolRef.credentials_version``): the Secret's content,
    not its ``resourceVersion``. A write that changed only its metadata (the operator's own
    protection label and finalizer, a tool that annotates Secrets) replaced every job of the
    credential, and each scope fetched a token it already had."""
    if secret is None:
        return "missing"
    return _fingerprint(secret.get("data") or {})[:16]


def _fingerprint(data: Mapping[str, str]) -> str:
    """Content hash, so the cache can notice rotation without keeping the values around."""
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(b"\0")
        digest.update(data[key].encode())
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass
class _Entry:
    fingerprint: str
    client: GitHubClient
    #: What the client's route was read from (``last_good`` hands out a pool's own route only).
    connection: Connection | None = None


class ClientCache:
    """One client per (namespace, Secret, API URL), rebuilt when the Secret's content changes.

    The Secret is re-read on every ``get`` so that rotation takes effect on the next GitHub
    call without a restart. A Secret that cannot be turned into a client raises every time
    (nothing is cached for it), so fixing the Secret is picked up at once as well.

    ``hosts``: the GitHub API hosts clients may be made for (``--github-api-host``); every
    path to GitHub takes its client here, so a URL elsewhere gets no call on any of them.
    At most ``max_entries`` clients are kept, the least recently used dropped first.
    """

    def __init__(
        self,
        read_secret: SecretReader,
        *,
        factory: ClientFactory = client_from_secret_data,
        hosts: GitHubHosts | None = None,
        max_entries: int = MAX_CLIENTS,
        read_config_map: SecretReader | None = None,
    ) -> None:
        self._read_secret = read_secret
        self._read_config_map = read_config_map
        self._factory = factory
        self._hosts = hosts
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, str, str], _Entry] = OrderedDict()

    @classmethod
    def bounded(
        cls, read_secret: SecretReader, github: GitHubSettings, read_config_map: SecretReader | None = None
    ) -> Self:
        """The operator's cache: clients for ``github.hosts`` only, each call bounded by
        ``--github-timeout`` and ``--github-max-response-bytes``; ``read_config_map`` reads the
        ConfigMaps pools name for their CA bundle."""
        return cls(
            read_secret,
            factory=bounded_factory(github.timeout, github.max_response_bytes),
            hosts=github.hosts,
            read_config_map=read_config_map,
        )

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _allowed_url(self, base_url: str | None) -> str:
        url = _validated_base_url(base_url or DEFAULT_API_URL)
        refusal = self._hosts.refusal(url) if self._hosts is not None else None
        if refusal is not None:
            raise CredentialError.host_not_allowed(refusal)
        return url

    def _data(self, read: SecretReader, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            return read(namespace, name)
        except ValueError:
            # Base64 or UTF-8 decoding in the reader; the value itself stays out of the message.
            raise CredentialError.malformed(
                f"{kind} {namespace}/{name} holds a value that is not base64-encoded UTF-8 text"
            ) from None

    def get(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient:
        """The client of the pool's credential Secret, API URL and ``connection`` (its CA
        bundle and proxy, read again on every call like the Secret: ``runnerpool.github.route``)."""
        url = self._allowed_url(base_url)
        data = self._data(self._read_secret, "Secret", namespace, secret_name)
        if data is None:
            raise CredentialError.missing(
                f"Secret {namespace}/{secret_name} not found; create it with key {PAT_KEY!r} "
                "or keys " + ", ".join(repr(k) for k in _APP_KEYS)
            )
        route = self._route(namespace, connection)
        fingerprint = _fingerprint(data)
        key = (namespace, secret_name, url, route.digest)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fingerprint == fingerprint:
                self._entries.move_to_end(key)
                return entry.client
            client = self._factory(data, url)
            if isinstance(client, _Routable):
                client.take_route(route)
            if entry is not None:
                log.info("credential Secret %s/%s changed; using a new GitHub client", namespace, secret_name)
            self._entries[key] = _Entry(fingerprint, client, connection)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)  # in-flight calls keep their client alive
            return client

    def _route(self, namespace: str, connection: Connection | None) -> Route:
        """The CA bundle and proxies ``connection`` names, read now; messages name keys, not values."""
        if connection is None:
            return Route(tenant=namespace)
        ca = None
        if connection.ca is not None:
            kind, name, key = connection.ca
            ca = self._required(kind, namespace, name, key, "spec.githubServerTLS")
            if "-----BEGIN CERTIFICATE-----" not in ca:
                raise CredentialError.malformed(
                    f"{kind} {namespace}/{name} key {key!r} (spec.githubServerTLS) holds no PEM certificate"
                )
            if len(ca) > MAX_CA_BUNDLE_CHARS:
                where = f"{kind} {namespace}/{name} key {key!r} (spec.githubServerTLS)"
                raise CredentialError.malformed(
                    f"{where} holds {len(ca)} characters: a pool's CA bundle may hold "
                    f"{MAX_CA_BUNDLE_CHARS} (a few hundred certificates)"
                )
        proxies = []
        for proxy in connection.proxies:
            url = proxy.url
            if proxy.credential_secret is not None:
                where = f"spec.proxy.{proxy.scheme}.credentialSecretRef"
                login = [
                    _url_ready(
                        self._required("Secret", namespace, proxy.credential_secret, key, where),
                        f"Secret {namespace}/{proxy.credential_secret} key {key!r} ({where})",
                        userinfo,
                    )
                    for key, userinfo in ((_PROXY_USER, _USERNAME_CHARS), (_PROXY_PASSWORD, _PASSWORD_CHARS))
                ]
                url = with_userinfo(url, *login)
            proxies.append((proxy.scheme, url))
        return Route(ca, tuple(proxies), connection.no_proxy, tenant=namespace)

    def _required(self, kind: str, namespace: str, name: str, key: str, field: str) -> str:
        read = self._read_secret if kind == "Secret" else self._read_config_map
        data = self._data(read, kind, namespace, name) if read is not None else None
        value = (data or {}).get(key, "")
        if not value.strip():
            state = "not found" if data is None else f"has no key {key!r}"
            raise CredentialError.connection_missing(f"{kind} {namespace}/{name} named by {field} {state}")
        return value

    def last_good(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient | None:
        """The last client built from the Secret for ``connection``, even if the Secret, or the
        CA bundle or proxy login ``connection`` names, is gone now (or ``None``).

        For deregistering a deleted pool's runners: the credentials that worked a moment
        ago are better than none, and GitHub still says whether they do. Only a client built
        for the pool's own connection is handed out: another pool's CA bundle and proxy (or the
        operator's own) may not reach the pool's GitHub, and a route is not swapped behind a
        pool's back. The latest used of them (one per CA bundle and proxy content) is the pool's.
        """
        url = self._allowed_url(base_url)
        with self._lock:
            for (ns, name, found_url, _), entry in reversed(self._entries.items()):
                if (ns, name, found_url, entry.connection) == (namespace, secret_name, url, connection):
                    return entry.client
        return None


class NamedClientCache(ClientCache):
    """Names each client after its credential Secret, so that the rate-limit gauges say whose
    budget they show (``namespace/secret``) without anything derived from the token.

    Every user of a client gets it through ``get``, so the name is set before its first
    request.
    """

    def get(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient:
        github = super().get(namespace, secret_name, base_url, connection)
        if isinstance(github, _Nameable):
            github.name_credential(pool_key(namespace, secret_name))
        return github


#: What a deleted pool's teardown works around with the last client that worked for it: its
#: credential Secret gone, or the ConfigMap or Secret its ``spec.githubServerTLS`` or
#: ``spec.proxy`` names. Deleting a namespace deletes all of them while its pools' finalizers
#: still need them; only the credential Secret is held back (``runnerpool.credential_protection``).
_GONE = frozenset({CredentialError.MISSING, Reason.GITHUB_CONNECTION_CONFIG_MISSING})


def teardown_client(clients: GitHubClients, pool: PoolRef) -> GitHubClient:
    """The client that deregisters a deleted pool's runners and deletes its scale set: the
    pool's own, or, when a Secret or ConfigMap it is built from is gone (``_GONE``), the last
    one that worked for the pool (``ClientCache.last_good``).

    Before, only a missing credential Secret fell back: a namespace deleted with a pool that
    sets ``spec.proxy`` or ``spec.githubServerTLS`` lost the proxy login or CA bundle with it,
    the drain raised ``GitHubConnectionConfigMissing``, and the finalizer waited
    ``--credential-lost-wait`` and let the pool go with its runners registered. Raises the
    ``CredentialError`` when there is no such client (none was built since the operator
    started): the finalizer then waits for the credential as before (``runnerpool.deregistration``).
    """
    secret, url = pool.credential_secret_name, pool.api_url
    try:
        return clients.get(pool.namespace, secret, url, pool.connection)
    except CredentialError as err:
        if err.reason not in _GONE or not isinstance(clients, KeepsLastGoodClient):
            raise
        last = clients.last_good(pool.namespace, secret, url, pool.connection)
        if last is None:
            raise
        log.info("pool %s: %s; using the last GitHub client that worked for it", pool.key, err.message)
        return last
