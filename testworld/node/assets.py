"""Locate, or build once, everything the test node runs besides the control plane.

kubelet and kube-scheduler come from the control plane's pinned wrapper module
(``testworld/envtest/gomod``) into its versioned cache folder.  containerd, ctr and
the runc shim come from the Go module proxy at ``CONTAINERD_VERSION``, the CNI
plugins at ``CNI_PLUGINS_VERSION``; neither module has replace directives, so
``go install pkg@version`` builds them without a wrapper module.  runc is Debian's
(``apt-get install runc``).  Each lands in a cache folder named after its version,
under a file lock, with one progress line per step.

No maintained tool builds these from the module proxy for a test harness (kind and
minikube pull prebuilt images from registries this machine cannot reach), so it is
written here.  ``python -m testworld.node.assets`` builds everything and prints where.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testworld.envtest import assets as envtest_assets
from testworld.envtest.assets import AssetError, cache_root, go_environment, progress, run_logged
from testworld.node import dind_images, images, operator_image, prereqs

CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_VERSION = "v2.4.2"
CNI_PLUGINS_MODULE = "github.com/containernetworking/plugins"
CNI_PLUGINS_VERSION = "v1.10.0"
#: Static, no cgo, none of the snapshotters this node does not use.
_CONTAINERD_TAGS = "urfave_cli_no_docs,no_btrfs,no_devmapper,osusergo,netgo,static_build"


@dataclass(frozen=True)
class _GoCommands:
    """Commands of one Go module at one version, built with the same tags into one folder."""

    name: str
    module: str
    version: str
    packages: dict[str, str]  # binary name -> package path inside the module
    tags: str = ""

    @property
    def folder(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"


_CONTAINERD = _GoCommands(
    "containerd",
    CONTAINERD_MODULE,
    CONTAINERD_VERSION,
    {"containerd": "cmd/containerd", "ctr": "cmd/ctr"},
    _CONTAINERD_TAGS,
)
# The shim is built without grpc, as upstream's Makefile does: a smaller, faster shim.
_SHIM = _GoCommands(
    "containerd",
    CONTAINERD_MODULE,
    CONTAINERD_VERSION,
    {"containerd-shim-runc-v2": "cmd/containerd-shim-runc-v2"},
    _CONTAINERD_TAGS + ",no_grpc",
)
_CNI = _GoCommands(
    "cni-plugins",
    CNI_PLUGINS_MODULE,
    CNI_PLUGINS_VERSION,
    {
        "bridge": "plugins/main/bridge",
        "loopback": "plugins/main/loopback",
        "host-local": "plugins/ipam/host-local",
    },
)


@dataclass(frozen=True)
class NodeBinaries:
    """Paths of every binary the node starts; ``cni_dir`` holds the CNI plugins."""

    kubelet: Path
    kube_scheduler: Path
    containerd: Path
    ctr: Path
    shim: Path
    cni_dir: Path
    runc: Path

    @property
    def containerd_dir(self) -> Path:
        """containerd finds its shim on PATH; this folder goes first on it."""
        return self.containerd.parent


def _build_go_commands(commands: _GoCommands, started: float) -> None:
    """``go install`` each missing binary of ``commands`` into its folder, under its lock."""
    folder = commands.folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = {name: pkg for name, pkg in commands.packages.items() if not (folder / name).is_file()}
        if not missing:
            return
        if shutil.which("go") is None:
            raise AssetError(
                f"Go is needed once to build {', '.join(missing)}: install Go (https://go.dev/dl)"
            )
        folder.mkdir(parents=True, exist_ok=True)
        log = folder.parent / f"{folder.name}.build.log"
        env = go_environment()
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as scratch:
            env["GOBIN"] = scratch
            for name, package in missing.items():
                progress(f"building {name} {commands.version} (log: {log})", started)
                step = time.monotonic()
                cmd = ["go", "install", "-trimpath", "-ldflags=-s -w"]
                if commands.tags:
                    cmd.append(f"-tags={commands.tags}")
                cmd.append(f"{commands.module}/{package}@{commands.version}")
                if run_logged(cmd, log, Path(scratch), env) != 0:
                    tail = "\n".join(log.read_text().splitlines()[-30:])
                    raise AssetError(f"building {name} failed (full log: {log}):\n{tail}")
                # A binary appears under its final name only when complete.
                os.replace(Path(scratch) / Path(package).name, folder / name)
                progress(f"built {name} in {time.monotonic() - step:.0f}s", started)


def find_runc() -> Path:
    found = shutil.which("runc") or next(
        (p for p in ("/usr/sbin/runc", "/usr/bin/runc") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise AssetError("runc is not installed: apt-get install -y --no-install-recommends runc")
    return Path(found)


def ensure_node_binaries() -> NodeBinaries:
    """Build (once) or locate every node binary; progress lines go to stderr."""
    started = time.monotonic()
    kube = envtest_assets.ensure_binaries(envtest_assets.NODE_BINARIES)
    for commands in (_CONTAINERD, _SHIM, _CNI):
        _build_go_commands(commands, started)
    return NodeBinaries(
        kubelet=kube["kubelet"],
        kube_scheduler=kube["kube-scheduler"],
        containerd=_CONTAINERD.folder / "containerd",
        ctr=_CONTAINERD.folder / "ctr",
        shim=_SHIM.folder / "containerd-shim-runc-v2",
        cni_dir=_CNI.folder,
        runc=find_runc(),
    )


def main() -> int:
    missing = prereqs.problems()
    if missing:
        # Before minutes of building: the node could not start with these anyway.
        print(
            "error: the test node cannot start on this machine:\n  - " + "\n  - ".join(missing),
            file=sys.stderr,
        )
        return 1
    started = time.monotonic()
    try:
        envtest_assets.ensure_binaries()
        binaries = ensure_node_binaries()
        packed = [images.pause_image(), images.runner_image(), operator_image.operator_image()]
        # Debian's Docker packages need the mirror: fetched here, outside the sealed world.
        packed += [dind_images.dind_image(), dind_images.runner_dind_image()]
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, path in vars(binaries).items():
        print(f"{name}: {path}", file=sys.stderr)
    for image in packed:
        print(f"image {image.reference}: {image.archive}", file=sys.stderr)
    progress("node binaries and images ready", started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
