"""The chart's ServiceMonitor, used as Prometheus uses it, against the operator process.

With ``metrics.certSecret`` and ``metrics.serviceMonitor.enabled`` the chart renders a scraper
ServiceAccount bound to its metrics-reader ClusterRole, and a ServiceMonitor that sends that
account's token and verifies the operator's certificate with the Secret's ``ca.crt`` for the
metrics Service's name. Here those rendered objects are applied to the API server, the operator
serves a certificate issued for that name by a CA of the test's own (what cert-manager writes
into the Secret), and the scrape is made with exactly the ServiceMonitor's ``tlsConfig``. The
token comes from the TokenRequest API for the chart's account: the test world runs no
token controller to fill the chart's ``kubernetes.io/service-account-token`` Secret, whose
token names the same account.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client

from tests.e2e.conftest import StartOperator
from tests.test_chart import endpoints, helm, one, template
from testworld.envtest import assets as envtest_assets
from testworld.envtest.certs import _ca, _issue, _pem, _write_key
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import token_of

__all__ = ["helm"]

Obj = dict[str, Any]


def _kubectl(control_plane: ControlPlane, *args: str, objects: list[Obj]) -> None:
    kubectl = envtest_assets.ensure_binaries(("kubectl",))["kubectl"]
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(control_plane.kubeconfig), *args, "-f", "-"],
        input=yaml.safe_dump_all(objects),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _certificate(folder: Path, host: str) -> bytes:
    """tls.crt and tls.key for ``host`` (also 127.0.0.1's listener) issued by a fresh CA; the
    CA's certificate (the Secret's ca.crt)."""
    ca, ca_key = _ca("chart-metrics-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = _issue(
        x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, host)]),
        key.public_key(),
        ca.subject,
        ca_key,
        is_ca=False,
        usage=[x509.oid.ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[x509.DNSName(host)],
    )
    folder.mkdir()
    (folder / "tls.crt").write_bytes(_pem(leaf))
    _write_key(folder / "tls.key", key)
    return _pem(ca)


class _NamedConnection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1 whose certificate is checked for ``server_name``, as Prometheus's
    ``server_name`` does for a pod IP target."""

    def __init__(self, port: int, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__("127.0.0.1", port, timeout=10, context=context)
        self._checked = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._checked.wrap_socket(self.sock, server_hostname=self._server_name)


def _scrape(port: int, token: str, context: ssl.SSLContext, server_name: str) -> int:
    connection = _NamedConnection(port, context, server_name)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.fixture
def chart_objects(helm: Path, control_plane: ControlPlane, namespace: str) -> Iterator[list[Obj]]:
    """The chart rendered into ``namespace``; its scraper account, reader role and binding applied."""
    values = {
        "fullnameOverride": namespace,
        "metrics": {"certSecret": "metrics-tls", "serviceMonitor": {"enabled": True}},
    }
    rendered = template(helm, values, namespace=namespace)
    scraper = one(rendered, "ClusterRoleBinding", f"{namespace}-metrics-scraper")
    applied = [
        one(rendered, "ServiceAccount", scraper["subjects"][0]["name"], namespace),
        one(rendered, "ClusterRole", scraper["roleRef"]["name"]),
        scraper,
    ]
    _kubectl(control_plane, "apply", objects=applied)
    yield rendered
    _kubectl(control_plane, "delete", "--wait=false", objects=applied[1:])


def test_the_servicemonitors_scrape_is_authorised_and_verified(
    api_client: client.ApiClient,
    namespace: str,
    start_operator: StartOperator,
    chart_objects: list[Obj],
    tmp_path: Path,
) -> None:
    (endpoint, *_) = endpoints(chart_objects)
    tls = endpoint["tlsConfig"]
    assert "insecureSkipVerify" not in tls
    ca = _certificate(tmp_path / "metrics-cert", tls["serverName"])
    operator = start_operator("--metrics-secure", f"--metrics-cert-dir={tmp_path / 'metrics-cert'}")
    account = one(chart_objects, "Secret", endpoint["authorization"]["credentials"]["name"])
    token = token_of(
        api_client, namespace, account["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    )

    verifying = ssl.create_default_context(cadata=ca.decode())
    assert _scrape(operator.metrics_port, token, verifying, tls["serverName"]) == 200
    # The check is real: another name, or no CA, fails the handshake as Prometheus would.
    for context, name in (
        (verifying, "elsewhere.example"),
        (ssl.create_default_context(), tls["serverName"]),
    ):
        with pytest.raises(ssl.SSLCertVerificationError):
            _scrape(operator.metrics_port, token, context, name)
