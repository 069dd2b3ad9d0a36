"""``runnerpool_build_info``: which build runs, as the operator exports it and the image sets it."""

from __future__ import annotations

import platform
import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runnerpool import metrics

REPO = Path(__file__).resolve().parent.parent


def _exported() -> list[dict[str, str]]:
    families = text_string_to_metric_families(generate_latest(REGISTRY).decode())
    (family,) = (f for f in families if f.name == "runnerpool_build_info")
    assert all(sample.value == 1 for sample in family.samples)
    return [sample.labels for sample in family.samples]


def test_the_operator_exports_its_version_python_and_client() -> None:
    (labels,) = _exported()
    pyproject = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert pyproject is not None
    assert labels["version"] == pyproject.group(1)
    assert labels["python"] == platform.python_version()
    assert labels["kubernetes_client"] == metadata.version("kubernetes")
    assert re.fullmatch(r"37\.\d+\.\d+", labels["kubernetes_client"]), "pyproject pins kubernetes 37"


def test_the_commit_comes_from_the_build_or_is_unknown() -> None:
    assert metrics.build_info({metrics.COMMIT_ENV: "0123abc\n"})["commit"] == "0123abc"
    assert metrics.build_info({})["commit"] == "unknown"
    assert metrics.build_info({metrics.COMMIT_ENV: " "})["commit"] == "unknown"


def test_one_series_even_when_published_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second publish (another commit in the environment) replaces the series, never adds one."""
    monkeypatch.setenv(metrics.COMMIT_ENV, "feedface")
    try:
        metrics.publish_build_info()
        assert [labels["commit"] for labels in _exported()] == ["feedface"]
    finally:
        monkeypatch.undo()
        metrics.publish_build_info()
    assert [labels["commit"] for labels in _exported()] == [metrics.build_info()["commit"]]


def test_the_image_build_sets_the_commit_the_metric_reads() -> None:
    """The release passes the tagged commit; the Dockerfile turns the argument into the variable."""
    dockerfile = (REPO / "deploy" / "images" / "operator" / "Dockerfile").read_text()
    assert "ARG COMMIT=unknown" in dockerfile
    assert re.search(rf"^ENV {metrics.COMMIT_ENV}=\$\{{COMMIT\}}", dockerfile, re.MULTILINE)
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    build = next(
        s for s in workflow["jobs"]["images"]["steps"] if s.get("uses", "").startswith("docker/build-push")
    )
    assert build["with"]["build-args"] == "COMMIT=${{ github.sha }}"
