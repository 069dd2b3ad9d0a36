"""A GHES behind a private CA, reached through a proxy that asks for a login, on real runner pods.

The fake GitHub serves https with a certificate of a CA of its own, and the only way to it is a
CONNECT proxy that wants credentials (``tests/e2e/ghes.py``, shared with the e2e test of the
operator process). The pool names the CA (a ConfigMap) and the proxy (its login in a Secret):
the operator's pods mount the CA and get the proxy in their env, the stand-in ``config.sh`` and
``run.sh`` (curl, which reads ``SSL_CERT_FILE`` and ``https_proxy``, as the real runner does)
register and run a job through the proxy, from the pod's own address, and the password is in
neither the pod spec, the pod's log nor the operator's log (issue 31).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import naming
from tests.e2e.ghes import (
    PROXY_LOGIN,
    assert_password_hidden,
    connection_spec,
    create_ca_and_login,
    fake_ghes,
    login_proxy,
    private_ca,
)
from tests.e2e.runners import REPO
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, registered_pods, wait_done
from tests.pools import create_pool
from testworld.connect_proxy import ConnectProxy
from testworld.envtest.certs import PrivateServer
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

JOB_SECONDS = 2.0


@pytest.fixture
def pki(tmp_path: Path) -> PrivateServer:
    return private_ca(tmp_path / "ghes-ca")


@pytest.fixture
def fake_github(pki: PrivateServer) -> Iterator[FakeGitHub]:
    """The node tests' fake (on the node's bridge), over TLS with the private CA."""
    with fake_ghes(pki) as fake:
        yield fake


def _tunnels_from(proxy: ConnectProxy, address: str) -> int:
    return sum(1 for client_address in list(proxy.clients) if client_address == address)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") or e.get("value_from") for e in container["env"] or []}


def test_runner_pods_trust_the_pools_ca_and_register_and_run_a_job_through_the_login_proxy(
    api_client: client.ApiClient,
    namespace: str,
    pki: PrivateServer,
    fake_github: FakeGitHub,
    operator: OperatorProcess,
) -> None:
    core = client.CoreV1Api(api_client)
    create_ca_and_login(core, namespace, pki)
    with login_proxy() as proxy:
        create_pool(api_client, namespace, node_pool("ghes", replicas=1, **connection_spec(proxy)))

        [name] = registered_pods(core, fake_github, namespace, "ghes", 1)
        pod = core.read_namespaced_pod(name, namespace)
        # The pod's own config.sh and listener went through the proxy, not only the operator.
        registered_through = _tunnels_from(proxy, pod.status.pod_ip)
        assert registered_through >= 2, f"tunnels from the pod {pod.status.pod_ip}: {proxy.clients}"

        runner_log = core.read_namespaced_pod_log(name, namespace, container=naming.RUNNER_CONTAINER)
        assert "trusting the pool's CA bundle" in runner_log
        assert PROXY_LOGIN[1] not in runner_log

        job = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "ghes")], JOB_SECONDS)
        done = wait_done(fake_github, [job])[job]
        assert (done["conclusion"], done["runner_name"]) == ("success", name)
        wait_for(
            lambda: _tunnels_from(proxy, pod.status.pod_ip) > registered_through,
            START_TIMEOUT,
            message="the job's calls to go through the proxy from the pod",
        )
        assert not proxy.refused, proxy.refused
        assert {port for _, port in proxy.tunnels} == {fake_github.port}

    spec = pod.to_dict()["spec"]
    for container in (*spec["init_containers"], *spec["containers"]):
        if container["name"] not in (naming.REGISTER_CONTAINER, naming.RUNNER_CONTAINER):
            continue
        assert naming.CA_MOUNT_DIR in [m["mount_path"] for m in container["volume_mounts"]], container["name"]
        env = _env(container)
        assert env["RUNNER_CA_FILE"] == f"{naming.CA_MOUNT_DIR}/ca.crt"
        assert "$(RUNNER_PROXY_HTTPS_PASSWORD)" in env["https_proxy"], container["name"]
    assert_password_hidden(pod.to_dict(), operator)
