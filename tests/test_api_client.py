"""The operator's Kubernetes client as ``runnerpool.cli`` builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from runnerpool import cli
from runnerpool.runtime import transport
from runnerpool.settings import Settings
from tests.test_credential_refresh import KUBECONFIG


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_the_proxy_for_github_is_not_the_api_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The chart sets HTTPS_PROXY for GitHub; the client took it for the API server too, and
    every request of the operator went to a corporate proxy that cannot reach the cluster."""
    monkeypatch.setenv(variable, "http://proxy.corp.example:3128")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)

    configuration = cli._api_client(str(kubeconfig), Settings()).configuration

    assert not configuration.proxy
    assert transport.supports(configuration), "the operator's own transport, straight to the server"
    configuration.refresh_api_key_hook(configuration)  # what runs before a request
    assert not configuration.proxy


def test_a_kubeconfigs_own_proxy_url_is_kept(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        KUBECONFIG.replace(
            'server: "https://127.0.0.1:6443"',
            'server: "https://127.0.0.1:6443", proxy-url: "http://127.0.0.1:3128"',
        )
    )
    configuration = cli._api_client(str(kubeconfig), Settings()).configuration
    assert configuration.proxy == "http://127.0.0.1:3128"
