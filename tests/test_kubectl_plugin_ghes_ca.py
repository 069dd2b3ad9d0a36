"""``kubectl runnerpool runners`` for a pool behind a private CA: it trusts the pool's CA bundle
(spec.githubServerTLS, a ConfigMap) as the operator does, or it could not list the runners of
a GitHub Enterprise Server the operator serves fine (issue 31)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from runnerpool import naming
from tests.kubectl_plugin import Plugin
from tests.pools import create_pool, pat_secret, play_kubelet, pool_manifest
from testworld.envtest.certs import private_server
from testworld.envtest.controlplane import ControlPlane
from testworld.fakegithub import FakeGitHub

REPO = "octo-org/hello-world"
PAT = "ghp_pluginGhesToken0123456789abcdefghij"


def test_runners_of_a_pool_behind_a_private_ca_are_listed_with_its_bundle(
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    pki = private_server(tmp_path)
    core = client.CoreV1Api(api_client)
    with FakeGitHub(api_prefix="/api/v3", scopes=[REPO], tokens=[PAT], tls=pki.server_context()) as ghes:
        pat_secret(api_client, namespace, PAT)
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "ghes-ca"}, "data": {"ca.crt": pki.ca_pem}}
        )
        tls = {"certificateFrom": {"configMapKeyRef": {"name": "ghes-ca", "key": "ca.crt"}}}
        create_pool(api_client, namespace, pool_manifest("ghes", repo=REPO, replicas=1, githubServerTLS=tls))
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {
                    "name": "ghes-aaaaa",
                    "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: "ghes"},
                },
                "spec": {"containers": [{"name": naming.RUNNER_CONTAINER, "image": "runner:1"}]},
            },
        )
        play_kubelet(api_client, namespace, "ghes-aaaaa", phase="Running")
        runner = ghes.register_runner(REPO, "ghes-aaaaa", [naming.pool_runner_label(namespace, "ghes")])

        shown = Plugin(control_plane.kubeconfig, namespace, ghes.url)("runners", "ghes")
        assert shown.code == 0, shown.err
        assert shown.rows()[1] == ["ghes-aaaaa", str(runner), "online", "false", "ghes-aaaaa", "Running"]
