"""Locate, or build once, the pinned Helm, actionlint and promtool the lint step and the tests run.

Each tool has a Go wrapper module of its own here (``helm/``, ``actionlint/``, ``promtool/``:
go.mod and go.sum, the single pin), so it builds against exactly the dependency graph its
upstream release tested, with go.sum checking every download.  The build itself is the control
plane's (:func:`testworld.envtest.assets.go_build`: the same Go environment, log file and progress
lines); each binary lands in the shared cache (``~/.cache/runnerpool-envtest/<tool>-<version>/``) under
a file lock, so parallel runs build it once.

Lookup: ``TEST_ASSET_HELM`` / ``TEST_ASSET_ACTIONLINT`` / ``TEST_ASSET_PROMTOOL`` when set, else
the cache (built on demand).  ``python -m testworld.tools.assets [helm|actionlint|promtool ...]``
builds or locates them and prints their paths; ``make lint`` (a prerequisite of ``make test``)
builds all three, so the alert rule tests find promtool ready inside the sealed test session.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testworld.envtest.assets import AssetError, cache_root, go_build, progress

TOOLS_DIR = Path(__file__).resolve().parent


def _require(go_mod: str, module: str) -> str:
    """The version ``go_mod`` requires of ``module`` (direct or indirect)."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    if found is None:
        raise AssetError(f"the wrapper go.mod does not require {module}")
    return found.group(1)


def _helm_ldflags(version: str, go_mod: str) -> str:
    """What upstream's Makefile sets: the version ``helm version`` prints, and the Kubernetes
    version ``helm template`` and ``helm lint`` assume, derived from the client-go Helm uses
    (else Helm assumes Kubernetes 1.20 and ``kubeVersion`` checks and deprecation lints lie)."""
    _, minor, _ = _require(go_mod, "k8s.io/client-go").removeprefix("v").split(".", 2)
    flags = [
        f"-X helm.sh/helm/v3/internal/version.version={version}",
        "-X helm.sh/helm/v3/internal/version.metadata=",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
    ]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def _actionlint_ldflags(version: str, _go_mod: str) -> str:
    return f"-X github.com/rhysd/actionlint.version={version}"


def _promtool_ldflags(version: str, _go_mod: str) -> str:
    """What upstream's .promu.yml sets, so ``promtool --version`` names the release.  Prometheus
    3.x tags its Go module v0.3MM.P for release 3.MM.P (v0.316.0 is Prometheus 3.16.0)."""
    found = re.fullmatch(r"v0\.(\d)(\d\d)\.(\d+)", version)
    release = f"{found.group(1)}.{int(found.group(2))}.{found.group(3)}" if found else version
    flags = [
        f"-X github.com/prometheus/common/version.Version={release}",
        f"-X github.com/prometheus/common/version.Revision={version}",
        "-X github.com/prometheus/common/version.Branch=HEAD",
        "-X github.com/prometheus/common/version.BuildUser=runnerpool-testworld",
        "-X github.com/prometheus/common/version.BuildDate=19700101-00:00:00",
    ]
    return " ".join(flags)


@dataclass(frozen=True)
class Tool:
    """One command of one pinned Go module, built in its wrapper module's folder."""

    name: str
    module: str
    command: str  # package path inside the module
    ldflags: Callable[[str, str], str]  # (version, wrapper go.mod text) -> -X flags

    @property
    def module_dir(self) -> Path:
        return TOOLS_DIR / self.name

    def go_mod(self) -> str:
        return (self.module_dir / "go.mod").read_text()

    @property
    def version(self) -> str:
        return _require(self.go_mod(), self.module)

    @property
    def folder(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"


HELM = Tool("helm", "helm.sh/helm/v3", "cmd/helm", _helm_ldflags)
ACTIONLINT = Tool("actionlint", "github.com/rhysd/actionlint", "cmd/actionlint", _actionlint_ldflags)
PROMTOOL = Tool("promtool", "github.com/prometheus/prometheus", "cmd/promtool", _promtool_ldflags)
TOOLS = {tool.name: tool for tool in (HELM, ACTIONLINT, PROMTOOL)}


def _configured(tool: Tool) -> Path | None:
    explicit = os.environ.get(f"TEST_ASSET_{tool.name.upper()}")
    if not explicit:
        return None
    path = Path(explicit)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise AssetError(f"TEST_ASSET_{tool.name.upper()}={explicit} is not an executable file")
    return path


def ensure_tool(tool: Tool) -> Path:
    """Return the tool's binary, building the pinned version into the cache if it is not there."""
    configured = _configured(tool)
    if configured is not None:
        return configured
    folder = tool.folder
    binary = folder / tool.name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        if shutil.which("go") is None:
            raise AssetError(
                f"Go is needed once to build {tool.name} {tool.version}: install Go (https://go.dev/dl), "
                f"or set TEST_ASSET_{tool.name.upper()} to the path of a {tool.name} binary"
            )
        folder.mkdir(parents=True, exist_ok=True)
        log = folder.parent / f"{folder.name}.build.log"
        log.write_text("")
        started = time.monotonic()
        progress(f"building {tool.name} {tool.version} (log: {log})", started)
        partial = folder / f".{tool.name}.partial"
        ldflags = tool.ldflags(tool.version, tool.go_mod())
        go_build(partial, f"{tool.module}/{tool.command}", ldflags, log, module_dir=tool.module_dir)
        # The binary appears under its final name only when complete.
        partial.rename(binary)
        progress(f"built {tool.name} {tool.version} into {folder}", started)
    return binary


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in TOOLS]
    if unknown:
        print(f"usage: python -m testworld.tools.assets [{'|'.join(TOOLS)} ...]", file=sys.stderr)
        return 2
    try:
        paths = {name: ensure_tool(TOOLS[name]) for name in argv or TOOLS}
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name}: {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
