"""Namespace-scoped mode's switch: refused without namespaces; without a Namespace informer.

With ``--namespaced`` the operator may hold only Roles, so it must not list or watch the
cluster-scoped Namespace objects (``PoolCache(cluster_scoped=False)``); the process-level
proof with only Roles is tests/e2e/test_namespaced_mode.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from runnerpool.cli import parser, settings_from
from runnerpool.watches import PoolCache
from tests.helpers import wait_for


def test_namespaced_needs_a_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="--namespaced needs at least one --namespace"):
        settings_from(parser().parse_args(["--namespaced"]))


def test_namespaced_with_namespaces_is_taken() -> None:
    settings = settings_from(parser().parse_args(["--namespaced", "--namespace=ci", "--namespace=build"]))
    assert settings.namespaced
    assert settings.namespaces == ("ci", "build")


def test_only_a_namespace_informer_knows_a_namespace_is_terminating(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str
) -> None:
    watching = PoolCache(api_client, lambda key: None, [namespace])
    scoped = PoolCache(api_client, lambda key: None, [namespace], cluster_scoped=False)
    for informers in (watching, scoped):
        informers.start()
    try:
        assert watching.wait_for_sync(timeout=30) and scoped.wait_for_sync(timeout=30)
        client.CoreV1Api(api_client).delete_namespace(namespace)
        wait_for(
            lambda: watching.namespace_terminating(namespace),
            message="the Namespace informer to see the namespace terminating",
        )
        # Nothing of the scoped set watches it: never known up front (the API's refusals end
        # the reconciles instead), and the rest of its caches work as ever.
        assert not scoped.namespace_terminating(namespace)
        assert scoped.pools_in(namespace) == []
    finally:
        for informers in (watching, scoped):
            informers.stop()
