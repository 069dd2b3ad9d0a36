"""The API credential refresh hook runs twice a minute, not before every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import configuration as client_configuration

from runnerpool import cli
from runnerpool.runtime.credential_refresh import throttle_refresh
from runnerpool.settings import Settings

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_the_operators_client_scans_the_environment_once_for_many_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every request re-ran the loader, which scans os.environ for proxies each time."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    api_client = cli._api_client(str(kubeconfig), Settings())
    scans: list[int] = []
    real = client_configuration.getproxies
    monkeypatch.setattr(client_configuration, "getproxies", lambda: scans.append(1) or real())

    for _ in range(50):
        # What the client asks before each request: the credential, refreshed by the hook.
        assert api_client.configuration.get_api_key_with_prefix("BearerToken") == "Bearer not-a-real-token"

    assert len(scans) <= 1


def test_the_hook_runs_again_once_the_interval_has_passed() -> None:
    calls: list[Any] = []
    now = [100.0]

    class Config:
        refresh_api_key_hook: Any = calls.append

    config = Config()
    throttle_refresh(config, interval=30.0, clock=lambda: now[0])
    for _ in range(5):
        config.refresh_api_key_hook(config)
    assert len(calls) == 1
    now[0] += 29.0
    config.refresh_api_key_hook(config)
    assert len(calls) == 1
    now[0] += 1.0
    config.refresh_api_key_hook(config)
    assert len(calls) == 2


def test_a_configuration_without_a_hook_stays_without_one() -> None:
    class Config:
        refresh_api_key_hook: Any = None

    config = Config()
    throttle_refresh(config)
    assert config.refresh_api_key_hook is None
