"""Locate, or build once, the etcd / kube-apiserver / kube-controller-manager binaries.

No maintained Python library builds Kubernetes control-plane binaries from the
Go module proxy (setup-envtest downloads prebuilt archives from a bucket this
project cannot reach), so this module does it by hand: the versions are pinned
by the Go wrapper module in ``gomod/`` and the binaries go into a cache folder
outside the repository, keyed by those versions, under a file lock so parallel
test runs build once.

Lookup order per binary: ``TEST_ASSET_<NAME>``, ``$KUBEBUILDER_ASSETS/<name>``,
``/usr/local/kubebuilder/bin/<name>``, then the build cache (built on demand).

``python -m testworld.envtest.assets`` builds or locates them and prints the
folder, for reuse through ``KUBEBUILDER_ASSETS``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

GOMOD_DIR = Path(__file__).with_name("gomod")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
#: Built only for the test node (``testworld.node``), into the same versioned folder.
NODE_BINARIES = ("kube-scheduler", "kubelet")
_DEFAULT_ASSET_DIR = Path("/usr/local/kubebuilder/bin")
_KUBE_COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    # Only for `kubectl apply --dry-run=server -k deploy/` in the tests; Debian's is too old.
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
}
_ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"


class AssetError(RuntimeError):
    """The binaries could not be found or built; the message says what to do."""


@dataclass(frozen=True)
class Pins:
    """Versions read from the wrapper go.mod, the single pin file."""

    kubernetes: str
    etcd: str

    @property
    def cache_key(self) -> str:
        return f"kube-{self.kubernetes}_etcd-{self.etcd}"


def read_pins(go_mod: Path = GOMOD_DIR / "go.mod") -> Pins:
    text = go_mod.read_text()
    kube = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3\s+(v\S+)", text, re.MULTILINE)
    if kube is None or etcd is None:
        raise AssetError(f"{go_mod} does not pin k8s.io/kubernetes and etcd server")
    return Pins(kubernetes=kube.group(1), etcd=etcd.group(1))


def cache_root() -> Path:
    explicit = os.environ.get("RUNNERPOOL_ENVTEST_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "runnerpool-envtest"


def go_environment() -> dict[str, str]:
    """Environment for every go command: module mode, static binaries."""
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    env["CGO_ENABLED"] = "0"
    return env


def _configured_path(name: str) -> Path | None:
    explicit = os.environ.get("TEST_ASSET_" + name.upper().replace("-", "_"))
    if explicit:
        return Path(explicit)
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    for folder in ([Path(assets)] if assets else []) + [_DEFAULT_ASSET_DIR]:
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _version_ldflags(kube_version: str) -> str:
    major, minor = kube_version.removeprefix("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={kube_version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def progress(what: str, started: float) -> None:
    """One line per build step with its elapsed time, so a first run is never silent for minutes."""
    print(f"[testworld build] {what} ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)


def run_logged(cmd: list[str], log: Path, cwd: Path, env: dict[str, str]) -> int:
    """Run ``cmd`` with its output appended to ``log``; returns the exit code."""
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(cmd)}\n")
        sink.flush()
        done = subprocess.run(cmd, check=False, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    return done.returncode


def go_build(output: Path, package: str, ldflags: str, log: Path, module_dir: Path = GOMOD_DIR) -> None:
    """Run go build in the pinning ``module_dir``; retry once with ``-checklinkname=0`` on a
    go:linkname link error.  testworld.tools builds its pinned tools with it too."""
    for extra in ("", " -checklinkname=0"):
        cmd = ["go", "build", "-trimpath", "-o", str(output), f"-ldflags=-s -w {ldflags}{extra}", package]
        returncode = run_logged(cmd, log, module_dir, go_environment())
        if returncode == 0:
            return
        if "linkname" not in log.read_text()[-4000:]:
            break
    tail = "\n".join(log.read_text().splitlines()[-30:])
    raise AssetError(f"building {package} failed (full log: {log}):\n{tail}")


def build(pins: Pins, target: Path, names: list[str]) -> None:
    """Build ``names`` into ``target``; each lands under its final name only when complete."""
    if shutil.which("go") is None:
        raise AssetError(
            "Go is not installed and no envtest binaries were found: install Go, or set "
            "KUBEBUILDER_ASSETS to a folder holding etcd and kube-apiserver"
        )
    target.mkdir(parents=True, exist_ok=True)
    log = target.parent / f"{target.name}.build.log"
    log.write_text("")
    started = time.monotonic()
    kube_flags = _version_ldflags(pins.kubernetes)
    for name in names:
        partial = target / f".{name}.partial"
        progress(f"building {name} (log: {log})", started)
        step = time.monotonic()
        if name == "etcd":
            go_build(partial, _ETCD_PACKAGE, "", log)
        else:
            go_build(partial, _KUBE_COMMANDS[name], kube_flags, log)
        partial.rename(target / name)
        progress(f"built {name} in {time.monotonic() - step:.0f}s", started)
    progress(f"built {', '.join(names)} into {target}", started)


def ensure_binaries(names: tuple[str, ...] = BINARIES) -> dict[str, Path]:
    """Return a path for each of ``names``, building the pinned ones if none are configured."""
    found = {name: _configured_path(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if not missing:
        return {name: path for name, path in found.items() if path is not None}
    pins = read_pins()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / pins.cache_key
    with (root / f"{pins.cache_key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        to_build = [name for name in missing if not (target / name).is_file()]
        if to_build:
            build(pins, target, to_build)
    return {name: path or target / name for name, path in found.items()}


def main() -> int:
    try:
        paths = ensure_binaries()
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    folders = {path.parent for path in paths.values()}
    for name, path in paths.items():
        print(f"{name}: {path}", file=sys.stderr)
    if len(folders) == 1:
        print(f"export KUBEBUILDER_ASSETS={folders.pop()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
