"""What an install of the operator into the test world points at, and what every installer does."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from testworld.envtest.controlplane import ControlPlaneError

#: deploy/'s names: the operator's namespace, Deployment, Lease, webhook Service and its port.
NAMESPACE = "runnerpool-system"
DEPLOYMENT = "runnerpool-operator"
LEASE = "runnerpool-operator"
WEBHOOK_SERVICE = "runnerpool-operator-webhook"
#: The webhook receiver's Deployment (deploy/manager/webhook_receiver_deployment.yaml): the
#: webhook Service's pods.
RECEIVER_DEPLOYMENT = "runnerpool-operator-webhook"
WEBHOOK_PORT_NAME = "webhook"
#: The secret the overlay's webhook Secret holds (one line, as the operator reads it).
WEBHOOK_SECRET_FILE = Path(__file__).with_name("webhook-secret.txt")


def webhook_secret() -> bytes:
    return WEBHOOK_SECRET_FILE.read_bytes().strip()


@dataclass(frozen=True)
class Target:
    """The test world an install is for.

    ``api_host``/``api_port`` are where pods reach the API server: without kube-proxy the
    ``kubernetes`` Service's ClusterIP leads nowhere, so the operator's container is told
    the endpoint itself (``KUBERNETES_SERVICE_HOST``/``_PORT``, which in-cluster clients read).
    """

    kubectl: Path
    kubeconfig: Path
    operator_image: str
    runner_image: str
    github_api_url: str
    api_host: str
    api_port: int
    toleration: dict[str, str]


class InstallError(ControlPlaneError):
    """kubectl refused; the message carries its output."""


def kubectl(target: Target, *args: str, stdin: str | None = None, timeout: float = 240) -> str:
    """Run the test world's kubectl against the target's cluster; its output."""
    env = {**os.environ, "KUBECONFIG": str(target.kubeconfig)}
    done = subprocess.run(
        [str(target.kubectl), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise InstallError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


#: How long an operator rollout may take on the test node.
ROLLOUT_TIMEOUT = "180s"


def wait_for_rollout(target: Target) -> None:
    """Until every replica of the operator's and the webhook receiver's Deployments' current
    templates is ready (Helm's ``--wait`` accepts ``replicas - maxUnavailable``; the suite
    wants them all)."""
    for deployment in (DEPLOYMENT, RECEIVER_DEPLOYMENT):
        kubectl(
            target,
            "rollout",
            "status",
            f"deployment/{deployment}",
            "-n",
            NAMESPACE,
            f"--timeout={ROLLOUT_TIMEOUT}",
        )


class Installer(Protocol):
    """One way of installing the operator (kustomize now; a Helm chart can be another)."""

    def install(self) -> None:
        """Install and wait until the operator's and the receiver's Deployments have rolled out."""

    def enable(self, namespace: str) -> None:
        """Let the installed operator make runners in ``namespace``, as its docs tell a platform
        team to (docs/rbac.md)."""

    def uninstall(self) -> None:
        """Remove what ``install`` made, except the CRD (the test session owns it), and wait."""
