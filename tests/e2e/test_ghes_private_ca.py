"""A GitHub Enterprise Server behind a private CA and a proxy, with the operator as a process.

The fake GitHub serves https with a certificate of a CA of its own (generated per test), as a
GHES does. A pool that does not name the CA gets, in plain words, "certificate signed by
unknown authority" in its condition and an Event, and no pod; naming the CA (a ConfigMap) and
a proxy with credentials (testworld/connect_proxy.py, which counts its tunnels) fixes it in
place: the token is issued through the proxy and the runner registers (issue 31).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from runnerpool import api, naming
from tests.e2e.conftest import StartOperator
from tests.e2e.ghes import (
    UNKNOWN_AUTHORITY,
    assert_password_hidden,
    connection_spec,
    create_ca_and_login,
    fake_ghes,
    login_proxy,
    private_ca,
)
from tests.e2e.runners import REPO, condition, events, wait_condition, wait_token
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.envtest.certs import PrivateServer
from testworld.fakegithub import FakeGitHub
from testworld.simulator import RunnerSimulator


@pytest.fixture
def pki(tmp_path: Path) -> PrivateServer:
    return private_ca(tmp_path / "ghes-ca")


@pytest.fixture
def fake_github(pki: PrivateServer) -> Iterator[FakeGitHub]:
    """The e2e fake (conftest's), over TLS with the private CA."""
    with fake_ghes(pki) as fake:
        yield fake


@pytest.mark.usefixtures("credentials")
def test_an_untrusted_ghes_is_named_plainly_and_its_ca_and_proxy_fix_it_in_place(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    pki: PrivateServer,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    core = client.CoreV1Api(api_client)
    operator = start_operator()
    create_pool(api_client, namespace, pool_manifest("ghes", repo=REPO, replicas=1))

    pool = wait_condition(
        api_client, namespace, "ghes", "TokenReady", "False", reason="GitHubCertificateUntrusted", timeout=60
    )
    message = condition(pool, "TokenReady")["message"]  # type: ignore[index]
    assert UNKNOWN_AUTHORITY in message and "spec.githubServerTLS" in message
    assert "Traceback" not in message and "[SSL" not in message
    wait_for(
        lambda: any(
            r == "GitHubCertificateUntrusted" and UNKNOWN_AUTHORITY in m
            for _, r, m in events(api_client, namespace, "ghes")
        ),
        message="a GitHubCertificateUntrusted event",
    )
    assert core.list_namespaced_pod(namespace).items == [], "no pod without a token"

    # The fix: the CA in a ConfigMap, a proxy with its credentials in a Secret, both named by the pool.
    create_ca_and_login(core, namespace, pki)
    with login_proxy() as proxy:
        spec = connection_spec(proxy)
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, "ghes", {"spec": spec}
        )
        wait_token(api_client, namespace, "ghes", timeout=90)
        wait_condition(api_client, namespace, "ghes", "Ready", "True", timeout=60)
        assert proxy.count() >= 1 and not proxy.refused
        assert {port for _, port in proxy.tunnels} == {fake_github.port}
    assert len(simulator.registrations(namespace, "ghes")) == 1
    pod = core.list_namespaced_pod(namespace).items[0].to_dict()
    assert_password_hidden(pod, operator)
    assert naming.CA_VOLUME in [v["name"] for v in pod["spec"]["volumes"]]
