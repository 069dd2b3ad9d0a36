"""``helm install`` of ``charts/runnerpool-operator``: the test world's values on top of the chart's.

The values are what the kustomize overlay (``kustomization.yaml`` here and
``kustomize.py``) sets, expressed with the chart's own values: the packed images
(``pullPolicy: Never``, nothing can be pulled), the node's toleration, where pods reach the
API server (``extraEnv``), the fake GitHub's URL, a webhook Secret from the value the tests
sign with, runners listed every 5 s (``extraArgs``) and no demand polling. The release
namespace is made as ``docs/install-helm.md`` tells users to, from ``deploy/``'s Namespace
(Pod Security ``restricted``): Helm does not create or delete it, so this installer does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from testworld.install.target import (
    NAMESPACE,
    InstallError,
    Target,
    kubectl,
    wait_for_rollout,
    webhook_secret,
)
from testworld.tools import assets as tool_assets

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "runnerpool-operator"
#: The namespace as deploy/ makes it; applied before, deleted after the release.
NAMESPACE_MANIFEST = REPO / "deploy" / "rbac" / "namespace.yaml"
#: Named after the chart: every object gets deploy/'s name (docs/install-helm.md).
RELEASE = "runnerpool-operator"
WAIT = ("--wait", "--timeout=180s")


def _image(reference: str) -> dict[str, str]:
    repository, tag = reference.rsplit(":", 1)
    return {"repository": repository, "tag": tag}


def test_world_values(target: Target) -> dict[str, Any]:
    """The chart values of an install into ``target`` (the overlay's choices, as values)."""
    env = {"KUBERNETES_SERVICE_HOST": target.api_host, "KUBERNETES_SERVICE_PORT": str(target.api_port)}
    return {
        "image": {**_image(target.operator_image), "pullPolicy": "Never"},
        "runnerImage": _image(target.runner_image),
        "tolerations": [target.toleration],
        "extraEnv": [{"name": name, "value": value} for name, value in env.items()],
        "githubApiUrl": target.github_api_url,
        "webhook": {"secret": {"create": True, "value": webhook_secret().decode()}},
        "demandPollInterval": 3600,
        "extraArgs": ["--runner-sync-interval=5"],
    }


class HelmInstall:
    """``helm install --wait``; ``upgrade`` with changed values; ``helm uninstall --wait``."""

    def __init__(self, target: Target, workdir: Path) -> None:
        self.target = target
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.helm = tool_assets.ensure_tool(tool_assets.HELM)
        self.values = test_world_values(target)
        self.installed = False
        self.released = False

    def run(self, *args: str, with_values: bool = False) -> str:
        """Helm with homes of its own under the run's folder (none of the host's repositories or
        plugins); ``with_values``: the current values, as a file (kept there for a failure's reader)."""
        env = {**os.environ, "KUBECONFIG": str(self.target.kubeconfig)}
        env |= {f"HELM_{d}_HOME": str(self.workdir / "helm" / d.lower()) for d in ("CACHE", "CONFIG", "DATA")}
        command = [str(self.helm), *args]
        if with_values:
            values_file = self.workdir / "values.yaml"
            values_file.write_text(yaml.safe_dump(self.values, sort_keys=False))
            command += ["--values", str(values_file)]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
            cwd=REPO,
        )
        if done.returncode != 0:
            raise InstallError(f"helm {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def render(self) -> list[dict[str, Any]]:
        """What the release holds (``helm template`` with the same values), the CRD not included."""
        rendered = self.run("template", RELEASE, str(CHART), "-n", NAMESPACE, with_values=True)
        return [doc for doc in yaml.safe_load_all(rendered) if doc]

    def install(self) -> None:
        kubectl(self.target, "apply", "-f", str(NAMESPACE_MANIFEST))
        # Before the install: one that fails (a --wait that times out) leaves a release whose
        # operators run, and uninstall_release must remove it.
        self.installed = True
        # The CRD is the test session's: Helm finds it there and leaves crds/ alone.
        self.run("install", RELEASE, str(CHART), "-n", NAMESPACE, *WAIT, with_values=True)
        self._rolled_out()

    def enable(self, namespace: str) -> None:
        """The one line docs/rbac.md gives (the chart's ``runnerNamespaces`` lists namespaces
        known at install time; these tests make theirs later, and count the release's upgrades)."""
        kubectl(
            self.target,
            "create",
            "rolebinding",
            "runnerpool-operator",
            "-n",
            namespace,
            f"--clusterrole={RELEASE}-namespace",
            f"--serviceaccount={NAMESPACE}:{RELEASE}",
        )

    def upgrade(self, changes: dict[str, Any]) -> None:
        """``helm upgrade`` with ``changes`` merged into the values (one level deep), rolled out."""
        self.values = {**self.values, **changes}
        self.run("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *WAIT, with_values=True)
        self._rolled_out()

    def uninstall_release(self) -> None:
        """``helm uninstall``; foreground: ``--wait`` then also waits for the operator's pods."""
        if not self.installed or self.released:
            return
        self.run("uninstall", RELEASE, "-n", NAMESPACE, "--cascade=foreground", "--ignore-not-found", *WAIT)
        self.released = True

    def uninstall(self) -> None:
        """The release, then the namespace this installer made for it."""
        self.uninstall_release()
        kubectl(self.target, "delete", "-f", str(NAMESPACE_MANIFEST), "--ignore-not-found", "--wait")

    def _rolled_out(self) -> None:
        wait_for_rollout(self.target)
