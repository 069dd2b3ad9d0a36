"""The operator's GitHub calls for a pool with spec.githubServerTLS and spec.proxy (issue 31).

In process, against the fake GitHub served over TLS by a private CA (a GHES as companies run
it) and a CONNECT proxy that asks for credentials: the pool's CA makes the call succeed, the
proxy counts the tunnel it went through, and without the CA the failure says "certificate
signed by unknown authority" in plain words, for the pool's condition.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from runnerpool import api
from runnerpool.domain import Connection, PoolRef, ProxyRef, Scope
from runnerpool.github.credentials import MAX_CA_BUNDLE_CHARS, ClientCache, CredentialError
from runnerpool.github.errors import Unavailable
from runnerpool.github.route import MAX_CA_FILES, Route
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason
from runnerpool.runners.manager import RunnerManagers
from runnerpool.scale_set_pools import PoolScaleSets, ScaleSetClaims
from runnerpool.scaleset.clients import ScaleSetClients
from runnerpool.scaleset.runnable import ScaleSetListeners
from runnerpool.scaleset.types import RunnerScaleSet
from runnerpool.settings import RunnerSettings
from tests.github_mocks import fast_client_factory
from tests.pools import pool_manifest
from tests.test_runner_listing import NS, Cache, Pods
from testworld.connect_proxy import ConnectProxy
from testworld.envtest.certs import PrivateServer, private_server
from testworld.fakegithub.server import FakeGitHub

ORG = Scope(organization="octo-org")
PAT = "ghp_connection_test"
PROXY_LOGIN = ("alice", "s3cret-proxy-pass")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PrivateServer:
    return private_server(tmp_path_factory.mktemp("ghes-ca"))


@pytest.fixture
def ghes(pki: PrivateServer) -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=["octo-org"], api_prefix="/api/v3", tls=pki.server_context()) as fake:
        yield fake


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    with ConnectProxy(credentials=PROXY_LOGIN) as running:
        yield running


def _cache(pki: PrivateServer, **config_maps: Mapping[str, str]) -> ClientCache:
    secrets: dict[str, Mapping[str, str]] = {
        "cred": {"token": PAT},
        "ghes-ca": {"ca.crt": pki.ca_pem},
        "proxy-login": {"username": PROXY_LOGIN[0], "password": PROXY_LOGIN[1]},
    }
    return ClientCache(
        lambda _ns, name: secrets.get(name),
        factory=fast_client_factory,
        read_config_map=lambda _ns, name: config_maps.get(name),
    )


def test_the_pools_ca_from_a_config_map_makes_the_call_to_a_private_ca_server_succeed(
    pki: PrivateServer, ghes: FakeGitHub
) -> None:
    clients = _cache(pki, **{"ghes-ca": {"bundle.pem": pki.ca_pem}})
    connection = Connection(ca=("ConfigMap", "ghes-ca", "bundle.pem"))
    token = clients.get("team", "cred", ghes.url, connection).registration_token(ORG)
    assert token.token


def test_without_the_ca_the_failure_says_unknown_authority_in_plain_words(
    pki: PrivateServer, ghes: FakeGitHub
) -> None:
    with pytest.raises(Unavailable) as caught:
        _cache(pki).get("team", "cred", ghes.url).registration_token(ORG)
    assert caught.value.reason == Reason.GITHUB_CERTIFICATE_UNTRUSTED
    message = caught.value.message
    assert "certificate signed by unknown authority" in message
    assert "spec.githubServerTLS" in message
    assert "Traceback" not in message and "[SSL" not in message and "urllib3" not in message


def test_calls_go_through_the_pools_proxy_with_its_credentials(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy
) -> None:
    connection = Connection(
        ca=("Secret", "ghes-ca", "ca.crt"),
        proxies=(ProxyRef("https", proxy.url, "proxy-login"),),
    )
    clients = _cache(pki)
    clients.get("team", "cred", ghes.url, connection).registration_token(ORG)
    assert proxy.count() >= 1 and not proxy.refused
    assert {port for _, port in proxy.tunnels} == {ghes.port}
    assert set(proxy.clients) == {"127.0.0.1"} and len(proxy.clients) == proxy.count()


def test_a_host_in_no_proxy_is_reached_directly(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy
) -> None:
    connection = Connection(
        ca=("Secret", "ghes-ca", "ca.crt"),
        proxies=(ProxyRef("https", proxy.url, "proxy-login"),),
        no_proxy=("127.0.0.1",),
    )
    _cache(pki).get("team", "cred", ghes.url, connection).registration_token(ORG)
    assert proxy.count() == 0


def test_a_missing_ca_or_proxy_secret_says_which_and_builds_no_client(
    pki: PrivateServer, ghes: FakeGitHub
) -> None:
    clients = _cache(pki)
    with pytest.raises(CredentialError) as caught:
        clients.get("team", "cred", ghes.url, Connection(ca=("ConfigMap", "nowhere", "ca.crt")))
    assert caught.value.reason == Reason.GITHUB_CONNECTION_CONFIG_MISSING
    assert caught.value.message == "ConfigMap team/nowhere named by spec.githubServerTLS not found"
    with pytest.raises(CredentialError) as caught:
        clients.get("team", "cred", ghes.url, Connection(proxies=(ProxyRef("https", "http://p:1", "cred"),)))
    assert caught.value.message == (
        "Secret team/cred named by spec.proxy.https.credentialSecretRef has no key 'username'"
    )
    assert len(clients) == 0


def test_one_client_per_ca_and_proxy_and_a_new_one_when_the_ca_changes(
    pki: PrivateServer, tmp_path: Path
) -> None:
    bundles = {"ghes-ca": {"ca.crt": pki.ca_pem}}
    clients = ClientCache(
        lambda _ns, _name: {"token": PAT},
        factory=fast_client_factory,
        read_config_map=lambda _ns, name: bundles.get(name),
    )
    connection = Connection(ca=("ConfigMap", "ghes-ca", "ca.crt"))
    url = "https://ghe.example.com/api/v3"
    first = clients.get("team", "cred", url, connection)
    assert clients.get("team", "cred", url, connection) is first
    assert clients.get("team", "cred", url) is not first
    bundles["ghes-ca"] = {"ca.crt": private_server(tmp_path).ca_pem}
    assert clients.get("team", "cred", url, connection) is not first


def test_an_untrusted_certificate_is_not_tried_again(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy
) -> None:
    """A second handshake meets the same certificate: the quick retries are for resets and 5xx."""
    connection = Connection(proxies=(ProxyRef("https", proxy.url, "proxy-login"),))
    with pytest.raises(Unavailable) as caught:
        _cache(pki).get("team", "cred", ghes.url, connection).registration_token(ORG)
    assert caught.value.reason == Reason.GITHUB_CERTIFICATE_UNTRUSTED
    assert proxy.count() == 1


def _scale_set_pool(connection: Connection | None, url: str) -> PoolRef:
    return PoolRef("team", "arc", ORG, "cred", api_url=url, connection=connection)


def test_a_scale_set_pools_actions_service_calls_take_its_ca_and_proxy(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy
) -> None:
    """Issue 34: the listener's calls (admin token trade and the service itself) go as the
    pool's REST calls go, not with the operator's own CA bundle and proxy."""
    connection = Connection(
        ca=("Secret", "ghes-ca", "ca.crt"),
        proxies=(ProxyRef("https", proxy.url, "proxy-login"),),
    )
    scale_sets = ScaleSetClients(_cache(pki))
    client = scale_sets.get(_scale_set_pool(connection, ghes.url))
    assert client.runner_group("default").is_default
    assert client.wire.route is not None and client.wire.route.proxies
    assert proxy.count() >= 2 and not proxy.refused, "the REST client's tunnel and the service's"
    assert {port for _, port in proxy.tunnels} == {ghes.port}


def test_a_proxy_login_with_url_characters_works_percent_encoded_and_is_refused_raw(
    pki: PrivateServer, ghes: FakeGitHub
) -> None:
    """The runner pods put the Secret's login into http_proxy unchanged: a raw '@' or '/' would
    send another login or reach another host there, so the operator refuses it and says how to
    write it; encoded, it is the proxy's login exactly."""
    login = ("ci@corp", "p@ss/w:rd%")
    encoded = {"username": "ci%40corp", "password": "p%40ss%2Fw:rd%25"}
    connection = Connection(ca=("Secret", "ghes-ca", "ca.crt"), proxies=(ProxyRef("https", "", "login"),))
    with ConnectProxy(credentials=login) as proxy:
        connection = replace(connection, proxies=(ProxyRef("https", proxy.url, "login"),))
        for secret, works in ((encoded, True), (dict(zip(encoded, login, strict=True)), False)):
            secrets = {"cred": {"token": PAT}, "ghes-ca": {"ca.crt": pki.ca_pem}, "login": secret}
            clients = ClientCache(lambda _ns, name, s=secrets: s.get(name), factory=fast_client_factory)
            if works:
                clients.get("team", "cred", ghes.url, connection).registration_token(ORG)
                assert proxy.count() >= 1 and not proxy.refused
                continue
            with pytest.raises(CredentialError) as caught:
                clients.get("team", "cred", ghes.url, connection)
            message = caught.value.message
            assert "Secret team/login key 'username'" in message and "percent-encode" in message
            assert "ci@corp" not in message


def test_a_ca_bundle_too_large_for_the_operators_tmp_says_so_and_builds_no_client(pki: PrivateServer) -> None:
    huge = pki.ca_pem + "\n" + "#" * MAX_CA_BUNDLE_CHARS
    clients = ClientCache(
        lambda _ns, _name: {"token": PAT},
        factory=fast_client_factory,
        read_config_map=lambda _ns, name: {"ca.crt": huge},
    )
    with pytest.raises(CredentialError) as caught:
        clients.get(
            "team", "cred", "https://ghe.example.com/api/v3", Connection(ca=("ConfigMap", "big", "ca.crt"))
        )
    assert f"a pool's CA bundle may hold {MAX_CA_BUNDLE_CHARS}" in caught.value.message
    assert len(clients) == 0


def test_ca_bundle_files_are_bounded_and_a_route_gets_its_file_back(pki: PrivateServer) -> None:
    """Tenants rewriting their CA ConfigMaps make a new route each time: the operator's /tmp
    (an emptyDir of 64 MiB) keeps the newest bundles only."""
    routes = [Route(ca_pem=f"{pki.ca_pem}\n# rotation {i}\n") for i in range(MAX_CA_FILES + 8)]
    paths = [route.verify for route in routes]
    assert all(paths) and len(set(paths)) == len(routes)
    directory = Path(str(paths[0])).parent
    assert len(list(directory.glob("*.pem"))) <= MAX_CA_FILES
    assert not Path(str(paths[0])).exists(), "the oldest bundle went"

    again = routes[0].verify
    assert again == paths[0] and Path(again).read_text().rstrip().endswith("# rotation 0")


class _Namespace:
    """A namespace's Secrets and ConfigMaps as the operator's readers see them: what its
    deletion removes is gone, except the credential Secret (credential protection holds it)."""

    def __init__(self, pki: PrivateServer, proxy: ConnectProxy) -> None:
        self.secrets: dict[str, Mapping[str, str]] = {
            "cred": {"token": PAT},
            "proxy-login": {"username": PROXY_LOGIN[0], "password": PROXY_LOGIN[1]},
        }
        self.config_maps: dict[str, Mapping[str, str]] = {"ghes-ca": {"ca.crt": pki.ca_pem}}
        self.clients = ClientCache(
            lambda ns, name: self.secrets.get(name) if ns == NS else None,
            factory=fast_client_factory,
            read_config_map=lambda ns, name: self.config_maps.get(name) if ns == NS else None,
        )
        self.connection = Connection(
            ca=("ConfigMap", "ghes-ca", "ca.crt"), proxies=(ProxyRef("https", proxy.url, "proxy-login"),)
        )

    def pool(self, name: str, url: str) -> PoolRef:
        """The pool's ref, its client made as the pool's token job and listings made it."""
        ref = PoolRef(NS, name, ORG, "cred", api_url=url, connection=self.connection)
        self.clients.get(NS, "cred", url, self.connection)
        # Another pool of the namespace, on the operator's own route, used the Secret since:
        # its client (which cannot reach this GHES) is not the one the deleted pool gets.
        self.clients.get(NS, "cred", url)
        return ref

    def delete(self, gone: str) -> None:
        """The namespace controller deletes the namespace's ConfigMaps and Secrets."""
        self.config_maps.pop(gone, None)
        self.secrets.pop(gone, None)


@pytest.mark.parametrize("gone", ["ghes-ca", "proxy-login"])
def test_a_pool_whose_namespace_deletion_took_its_ca_or_proxy_login_still_deregisters_its_runners(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy, gone: str
) -> None:
    """Before, the drain raised GitHubConnectionConfigMissing, and the finalizer waited
    --credential-lost-wait and let the pool go with its runners registered."""
    namespace, cache = _Namespace(pki, proxy), Cache()
    cache.add("build", org="octo-org")
    ref = namespace.pool("build", ghes.url)
    ghes.register_runner("octo-org", "build-aaaaa", [f"{NS}/build"])
    managers = RunnerManagers(
        cache,
        namespace.clients,
        Pods(),  # type: ignore[arg-type]
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        scheduler=BackgroundScheduler(timezone=UTC),  # never started: only drain() runs
    )
    namespace.delete(gone)
    with pytest.raises(CredentialError):
        namespace.clients.get(NS, "cred", ghes.url, namespace.connection)
    tunnels = proxy.count()

    drained = managers.drain(ref)

    assert drained.deregistered == 1 and ghes.runners("octo-org") == []
    assert proxy.count() > tunnels and not proxy.refused, "through the pool's proxy, with its login"


def test_a_scale_set_pool_whose_namespace_deletion_took_its_proxy_login_still_deletes_its_scale_set(
    pki: PrivateServer, ghes: FakeGitHub, proxy: ConnectProxy
) -> None:
    namespace = _Namespace(pki, proxy)
    ref = namespace.pool("arc", ghes.url)
    scale_sets = ScaleSetClients(namespace.clients)
    client = scale_sets.get(ref)
    group = client.runner_group("default")
    made = client.create_scale_set(RunnerScaleSet(name="arc-linux", runner_group_id=group.id))
    raw = pool_manifest("arc", org="octo-org", scaleSet={"name": "arc-linux"}, autoscaling={"maxReplicas": 2})

    class Reads:
        def pool(self, ns: str, name: str) -> ParsedPool | None:
            return ParsedPool(raw, api.RunnerPool.model_validate(raw))

    listeners: Any = ScaleSetListeners(lambda: [], lambda settings, view: None)  # type: ignore[arg-type,return-value]
    namespace.delete("proxy-login")

    alone = ScaleSetClaims(lambda: [], Reads())  # type: ignore[arg-type]  # no other pool names it
    PoolScaleSets(scale_sets, listeners, Reads(), alone).delete(ref, made.id)  # type: ignore[arg-type]

    assert ghes.scale_sets.scale_set("arc-linux") is None
