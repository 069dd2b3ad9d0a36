"""A GitHub Enterprise Server behind a private CA, reached through a proxy that asks for a login.

Shared by ``tests/e2e/test_ghes_private_ca.py`` (the operator process, the simulator's pods) and
``tests/node/test_ghes_private_ca.py`` (real runner pods on the test node): the fake GitHub over
TLS with a certificate of a CA of its own, generated per test, as a GHES is run; the CA in a
ConfigMap and the proxy's login in a Secret, as a user puts them; the pool's ``spec`` naming both
(issue 31); and the check that the proxy password shows nowhere a user or a log reader looks.
Inside the seal the fake and the proxy listen on the node's bridge address, where runner pods
reach them (the e2e ``fake_github``'s rule); elsewhere on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.runners import GOOD_PAT, ORG, OTHER_REPO, REPO
from testworld.connect_proxy import ConnectProxy
from testworld.envtest.certs import PrivateServer, private_server
from testworld.fakegithub import FakeGitHub
from testworld.node import seal
from testworld.simulator import OperatorProcess

PROXY_LOGIN = ("ci-proxy", "proxy-pass-not-in-any-log")
UNKNOWN_AUTHORITY = "certificate signed by unknown authority"
CA_CONFIG_MAP = "ghes-ca"
PROXY_SECRET = "proxy-login"


def github_host() -> str:
    """Where the fake GitHub and the proxy listen: the node's bridge inside the seal."""
    return seal.NODE_IP if seal.is_sealed() else "127.0.0.1"


def private_ca(folder: Path) -> PrivateServer:
    """A fresh private CA and the fake GHES's certificate for ``github_host()``."""
    return private_server(folder, ips=(github_host(),))


@contextmanager
def fake_ghes(pki: PrivateServer) -> Iterator[FakeGitHub]:
    """The e2e fake (the e2e scopes, ``GOOD_PAT`` only, under ``/api/v3``), over TLS by ``pki``."""
    with FakeGitHub(
        host=github_host(),
        api_prefix="/api/v3",
        scopes=[REPO, OTHER_REPO, ORG],
        tokens=[GOOD_PAT],
        tls=pki.server_context(),
    ) as fake:
        yield fake


@contextmanager
def login_proxy() -> Iterator[ConnectProxy]:
    """A CONNECT proxy that wants ``PROXY_LOGIN`` and opens tunnels to the fake's host only."""
    host = github_host()
    with ConnectProxy(host=host, allowed_hosts=frozenset({host}), credentials=PROXY_LOGIN) as proxy:
        yield proxy


def create_ca_and_login(core: client.CoreV1Api, namespace: str, pki: PrivateServer) -> None:
    """The CA in a ConfigMap and the proxy's login in a Secret, as docs/ghes-and-proxies.md says."""
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": CA_CONFIG_MAP}, "data": {"ca.crt": pki.ca_pem}}
    )
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": PROXY_SECRET},
            "stringData": {"username": PROXY_LOGIN[0], "password": PROXY_LOGIN[1]},
        },
    )


def connection_spec(proxy: ConnectProxy) -> dict[str, Any]:
    """A pool's ``spec.githubServerTLS`` and ``spec.proxy`` naming the two."""
    return {
        "githubServerTLS": {"certificateFrom": {"configMapKeyRef": {"name": CA_CONFIG_MAP, "key": "ca.crt"}}},
        "proxy": {"https": {"url": proxy.url, "credentialSecretRef": PROXY_SECRET}},
    }


def assert_password_hidden(pod: dict[str, Any], operator: OperatorProcess) -> None:
    """The proxy password is in neither the pod (``kubectl get pod -o yaml``) nor the operator's log."""
    assert PROXY_LOGIN[1] not in str(pod), "the proxy password is in the pod"
    assert PROXY_LOGIN[1] not in operator.log_text(), "the proxy password is in the operator's log"
