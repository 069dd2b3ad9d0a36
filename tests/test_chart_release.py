"""The release path (.github/workflows/release.yml, renovate.json), checked where it can be here.

No registry and no GitHub are reachable, so the workflow never runs here; actionlint checks it
in ``make lint``. These tests run the workflow's own shell steps (the tag check, the image
rewrite of the chart) on a copy of the repository and check that what it builds and publishes
is what the repository has: both Dockerfiles, both architectures, the chart, the pinned Helm.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_chart import run_helm
from tests.test_deploy_manifests import final_base, parse_dockerfile
from testworld.tools.assets import HELM, ensure_tool

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
CHART = REPO / "charts" / "runnerpool-operator"

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_tool(HELM)


@pytest.fixture(scope="module")
def workflow() -> Obj:
    return yaml.safe_load(WORKFLOW.read_text())  # type: ignore[no-any-return]


def step(job: Obj, name: str) -> Obj:
    (found,) = [s for s in job["steps"] if name in (s.get("name", ""), s.get("id", ""))]
    return found  # type: ignore[no-any-return]


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def pyproject_version() -> str:
    found = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_runs_on_version_tags_only(workflow: Obj) -> None:
    # PyYAML reads the key `on` as True.
    assert workflow[True] == {"push": {"tags": ["v*.*.*"]}}
    assert workflow["permissions"] == {"contents": "read"}, "write access only in the jobs that push"


def test_builds_both_images_for_amd64_and_arm64(workflow: Obj) -> None:
    job = workflow["jobs"]["images"]
    assert job["permissions"]["packages"] == "write"
    assert {"version", "lint"} <= set(job["needs"])
    built = {entry["dockerfile"]: entry for entry in job["strategy"]["matrix"]["include"]}
    dockerfiles = {str(p.relative_to(REPO)) for p in (REPO / "deploy" / "images").glob("*/Dockerfile")}
    assert set(built) == dockerfiles
    for dockerfile, entry in built.items():
        context = REPO / entry["context"]
        assert context.is_dir()
        # The context must hold what the Dockerfile copies (tests/test_deploy_manifests.py checks
        # the same contexts); runner: its own folder, operator: the repository.
        assert context == (REPO if "operator" in dockerfile else (REPO / dockerfile).parent)
    build = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["push"] is True
    assert any(s.get("uses", "").startswith("docker/setup-qemu-action@") for s in job["steps"])


def test_tag_must_match_the_operator_version(workflow: Obj, tmp_path: Path) -> None:
    script = step(workflow["jobs"]["version"], "version")["run"]
    output = tmp_path / "output"
    env = {"GITHUB_OUTPUT": str(output), "GITHUB_REPOSITORY_OWNER": "Octo-Org"}
    done = bash(script, REPO, {**env, "TAG": f"v{pyproject_version()}"})
    assert done.returncode == 0, done.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs == {"version": pyproject_version(), "owner": "octo-org", "helm": HELM.version}
    refused = bash(script, REPO, {**env, "TAG": "v99.0.0"})
    assert refused.returncode == 1
    assert f"tag v99.0.0 does not match pyproject.toml's version {pyproject_version()}" in refused.stdout


def test_published_chart_points_at_the_released_images(workflow: Obj, helm: Path, tmp_path: Path) -> None:
    """The chart job's steps on a copy: images rewritten, packaged with the tag's version."""
    job = workflow["jobs"]["chart"]
    assert job["needs"] == ["version", "images"]
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("azure/setup-helm@"))
    assert setup["with"]["version"] == "${{ needs.version.outputs.helm }}"
    copy = tmp_path / "repo"
    shutil.copytree(CHART, copy / "charts" / "runnerpool-operator", symlinks=False)
    rewrite = step(job, "Point the chart's default images at this release's")["run"]
    rewrite = rewrite.replace("helm lint", f"{helm} lint")
    done = bash(rewrite, copy, {"OWNER": "octo-org"})
    assert done.returncode == 0, done.stdout + done.stderr
    publish = step(job, "Package (the crds/ and files/ links become files) and push")["run"]
    package, *_ = (line for line in publish.splitlines() if line.startswith("helm package "))
    done = bash(package.replace("helm", str(helm), 1), copy, {"VERSION": "9.8.7"})
    assert done.returncode == 0, done.stderr
    assert "oci://ghcr.io/$OWNER/charts" in publish
    rendered = run_helm(
        helm, "template", "runnerpool-operator", str(copy / "dist" / "runnerpool-operator-9.8.7.tgz")
    )
    assert rendered.returncode == 0, rendered.stderr
    deployment = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment")
    (operator,) = deployment["spec"]["template"]["spec"]["containers"]
    assert operator["image"] == "ghcr.io/octo-org/runnerpool-operator:9.8.7"
    assert "--runner-image=ghcr.io/octo-org/runnerpool-runner:9.8.7" in operator["args"]


def test_the_chart_is_signed_by_the_digest_helm_pushed(workflow: Obj, tmp_path: Path) -> None:
    """The push step hands the signing step what ``helm push`` said it pushed (on stderr), or fails."""
    publish = step(workflow["jobs"]["chart"], "push")["run"]
    digest = "sha256:" + "ab" * 32
    fake = tmp_path / "bin" / "helm"
    fake.parent.mkdir()
    (tmp_path / "dist").mkdir()
    # helm v3.22's words (pkg/registry/client.go), on stderr as helm writes them.
    # `helm registry login --password-stdin` reads the token: so does the fake, or printf meets a
    # closed pipe (SIGPIPE, exit 141 under pipefail) whenever the fake exits first.
    script = '[ "$1" = registry ] && cat >/dev/null\n'
    script += '[ "$1" = push ] && printf "Pushed: x\\nDigest: %s\\n" "$FAKE_DIGEST" >&2'
    fake.write_text(f"#!/bin/sh\n{script}\nexit 0\n")
    fake.chmod(0o755)
    output = tmp_path / "output"
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(output), "VERSION": "9.8.7"}
    env |= {"OWNER": "octo-org", "REGISTRY_TOKEN": "t", "ACTOR": "a"}
    done = bash(publish, tmp_path, {**env, "FAKE_DIGEST": digest})
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.read_text() == f"digest={digest}\n"
    refused = bash(publish, tmp_path, {**env, "FAKE_DIGEST": "latest"})
    assert refused.returncode == 1
    assert "helm push told no digest to sign" in refused.stdout


def test_rewrite_fails_when_the_values_changed_shape(workflow: Obj, tmp_path: Path) -> None:
    values = tmp_path / "charts" / "runnerpool-operator" / "values.yaml"
    values.parent.mkdir(parents=True)
    values.write_text("image:\n  repository: somewhere/else\n")
    rewrite = step(workflow["jobs"]["chart"], "Point the chart's default images at this release's")["run"]
    done = bash(rewrite, tmp_path, {"OWNER": "octo-org"})
    assert done.returncode == 1
    assert "has no line 'repository: runnerpool-operator'" in done.stdout


# --- Renovate -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def renovate() -> Obj:
    return json.loads((REPO / "renovate.json").read_text())  # type: ignore[no-any-return]


def base_image(dockerfile: Path) -> tuple[str, str]:
    """The image's base as name and tag (without the digest)."""
    name, _, tag = final_base(parse_dockerfile(dockerfile)).partition(":")
    return name, tag.partition("@")[0]


def test_renovate_bumps_the_runner_version_at_once(renovate: Obj) -> None:
    """GitHub stops sending jobs to runners 30 days behind: no schedule may hold the bump back."""
    name, _ = base_image(REPO / "deploy" / "images" / "runner" / "Dockerfile")
    assert name == "ghcr.io/actions/actions-runner"
    assert "dockerfile" in renovate["enabledManagers"]
    assert not any(Path("deploy/images/runner/Dockerfile").match(p) for p in renovate["ignorePaths"])
    (rule,) = [r for r in renovate["packageRules"] if name in r.get("matchPackageNames", [])]
    assert rule["schedule"] == ["at any time"]
    assert "minimumReleaseAge" not in rule and "enabled" not in rule
    assert rule["prPriority"] > 0


def test_renovate_keeps_the_operator_on_python_3_11(renovate: Obj) -> None:
    name, tag = base_image(REPO / "deploy" / "images" / "operator" / "Dockerfile")
    (rule,) = [r for r in renovate["packageRules"] if name in r.get("matchPackageNames", [])]
    allowed = re.compile(rule["allowedVersions"].strip("/"))
    assert allowed.fullmatch(tag), f"the current {tag} would not be allowed"
    assert not allowed.fullmatch("3.12.1-slim-bookworm")


def test_renovate_keeps_base_images_and_actions_pinned(renovate: Obj) -> None:
    """tests/test_workflows.py and test_deploy_manifests.py require the pins; Renovate keeps them."""
    assert "helpers:pinGitHubActionDigests" in renovate["extends"]
    assert {"dockerfile", "github-actions"} <= set(renovate["enabledManagers"])
    (rule,) = [r for r in renovate["packageRules"] if r.get("matchManagers") == ["dockerfile"]]
    assert rule["pinDigests"] is True
