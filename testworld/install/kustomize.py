"""``kubectl apply -k``: the test overlay, with the run-time values layered on top.

The values known only at run time (the images' tags, which are digests of their inputs,
the node's toleration, the fake GitHub's URL and where pods reach the API server) go into
a kustomization written next to the run's files that names this folder as its base, so the
checked-in overlay stays a plain kustomization anyone can render.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from testworld.install.target import (
    DEPLOYMENT,
    NAMESPACE,
    RECEIVER_DEPLOYMENT,
    Target,
    kubectl,
    wait_for_rollout,
)

OVERLAY = Path(__file__).resolve().parent
#: deploy/'s kustomization that enables the operator in the namespace its user sets.
RUNNER_NAMESPACE = OVERLAY.parents[1] / "deploy" / "runner-namespace"
#: The name deploy/manager/deployment.yaml gives the operator's image.
DEPLOY_IMAGE = "runnerpool-operator"


def _container_patch(target: Target, *, receiver: bool = False) -> list[dict[str, Any]]:
    """The operator's (or, with ``receiver``, the webhook receiver's) run-time values."""
    container = "/spec/template/spec/containers/0"
    args = [f"--github-api-url={target.github_api_url}"]
    if not receiver:
        args.insert(0, f"--runner-image={target.runner_image}")
    env = {"KUBERNETES_SERVICE_HOST": target.api_host, "KUBERNETES_SERVICE_PORT": str(target.api_port)}
    return [
        {"op": "add", "path": "/spec/template/spec/tolerations", "value": [target.toleration]},
        *({"op": "add", "path": f"{container}/args/-", "value": arg} for arg in args),
        *(
            {"op": "add", "path": f"{container}/env/-", "value": {"name": name, "value": value}}
            for name, value in env.items()
        ),
    ]


def run_time_overlay(target: Target, folder: Path) -> Path:
    """Write the run-time kustomization into ``folder`` (on top of ``OVERLAY``); its path."""
    folder.mkdir(parents=True, exist_ok=True)
    name, tag = target.operator_image.rsplit(":", 1)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, folder)],
        "images": [{"name": DEPLOY_IMAGE, "newName": name, "newTag": tag}],
        "patches": [
            {
                "target": {"kind": "Deployment", "name": DEPLOYMENT},
                "patch": json.dumps(_container_patch(target)),
            },
            {
                "target": {"kind": "Deployment", "name": RECEIVER_DEPLOYMENT},
                "patch": json.dumps(_container_patch(target, receiver=True)),
            },
        ],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder


class KustomizeInstall:
    """``kubectl kustomize`` + ``kubectl apply``, then ``kubectl rollout status``."""

    def __init__(self, target: Target, workdir: Path) -> None:
        self.target = target
        self.workdir = workdir
        self.folder = run_time_overlay(target, workdir / "install-overlay")
        self.manifests: list[dict[str, Any]] = []

    def enable(self, namespace: str) -> None:
        """``kubectl apply -k`` of a kustomization naming ``namespace`` and deploy/runner-namespace."""
        folder = self.workdir / f"enable-{namespace}"
        folder.mkdir(parents=True, exist_ok=True)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": namespace,
            "resources": [os.path.relpath(RUNNER_NAMESPACE, folder)],
        }
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
        kubectl(self.target, "apply", "-k", str(folder))

    def render(self) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(kubectl(self.target, "kustomize", str(self.folder))) if doc]

    def install(self) -> None:
        self.manifests = self.render()
        kubectl(self.target, "apply", "-f", "-", stdin=yaml.safe_dump_all(self.manifests))
        wait_for_rollout(self.target)

    def uninstall(self) -> None:
        """The operator's pods first, so none is left running without its RBAC (refused requests)."""
        if not self.manifests:
            return
        kubectl(
            self.target,
            "delete",
            f"deployment/{DEPLOYMENT}",
            f"deployment/{RECEIVER_DEPLOYMENT}",
            "-n",
            NAMESPACE,
            "--ignore-not-found",
            "--cascade=foreground",
            "--wait",
        )
        kept = ("CustomResourceDefinition", "Deployment")  # the test session's; gone already
        owned = [doc for doc in self.manifests if doc["kind"] not in kept]
        if owned:
            kubectl(
                self.target,
                "delete",
                "--ignore-not-found",
                "--wait",
                "-f",
                "-",
                stdin=yaml.safe_dump_all(owned),
            )
