"""Test images for ``containerMode: dind``, built from Debian's Docker packages (nothing can be pulled).

* ``runnerpool-dind-test``: the Docker daemon sidecar, Debian bookworm's ``docker.io`` 20.10
  (dockerd), ``containerd`` 1.6 (with its runc shim), ``runc`` 1.1 and ``tini`` as
  ``docker-init``, the image's entrypoint as in Docker's official ``docker:dind``
  (``docker-init -- dockerd ...``: the pod gives the ``dockerd`` arguments).  Its
  ``/etc/docker/daemon.json`` keeps the daemon off any network (``bridge: none``, no
  iptables, no IP forwarding: the sealed node has no route out, and the daemon must not
  touch the node's firewall or sysctls), so every ``docker run``/``docker build`` in a job
  uses ``--network none``.
* ``runnerpool-runner-dind-test``: the runner test image (``images.runner_rootfs``) plus the
  docker CLI of the same package, and ``BUSYBOX_ARCHIVE``: a busybox image as a
  ``docker save`` archive, the one image a job can have without a registry
  (``docker load -i``).

The packages come from the machine's Debian mirror with ``apt-get download`` and are unpacked
with ``dpkg-deb -x``, into the test binaries' cache: nothing is installed on the host (the
packages' maintainer scripts would start a daemon and add a group there).  So this needs the
mirror once, outside the sealed world (``python -m testworld.node.assets`` builds these too);
inside, the cached packages are reused.  Shared libraries the binaries link are taken from the
unpacked packages when they are there, else from the host, as ``ldd`` resolves them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from testworld.envtest.assets import AssetError, progress
from testworld.node import images
from testworld.node.debian import debian_packages

__all__ = ["BUSYBOX_ARCHIVE", "BUSYBOX_IMAGE", "dind_image", "runner_dind_image"]

#: dockerd and the CLI, containerd and its shim, runc, tini (docker-init); libdevmapper is
#: linked by dockerd and is not on every host.
DOCKER_PACKAGES = ("docker.io", "containerd", "runc", "tini", "libdevmapper1.02.1")
BUSYBOX_PACKAGE = "busybox-static"
#: Inside the dind image, at their packages' paths.
DAEMON_BINARIES = (
    "/usr/sbin/dockerd",
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/sbin/runc",
    "/usr/bin/tini-static",
    "/usr/bin/docker",
)
DOCKER_CLI = "/usr/bin/docker"
#: The busybox image a job loads, and where the runner dind test image keeps its archive.
BUSYBOX_IMAGE = "testworld/busybox:1"
BUSYBOX_ARCHIVE = "/opt/testworld/busybox-image.tar"
#: What a job's steps call through busybox (``sh`` first: the image's command).
_BUSYBOX_APPLETS = (
    "sh",
    "cat",
    "echo",
    "ls",
    "mkdir",
    "test",
    "true",
    "false",
    "printf",
    "grep",
    "wc",
    "sleep",
)
#: No network, no firewall, no sysctls: the sealed node has no route out, and the host's
#: settings are not the daemon's to change.  The storage driver is left to dockerd (overlay2
#: when the kernel and backing file system allow it, else vfs): `docker info` says which.
DAEMON_JSON = {"bridge": "none", "iptables": False, "ip-forward": False, "ip-masq": False}
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Fast gzip: these layers are ~150 MiB of Go binaries that compress little either way.
_COMPRESSION = 1


def dind_image() -> images.Image:
    started = time.monotonic()
    roots = debian_packages(DOCKER_PACKAGES)
    rootfs = images.Rootfs()
    _add_from_packages(rootfs, roots, list(DAEMON_BINARIES))
    rootfs.symlink("/usr/bin/docker-init", "tini-static")
    rootfs.file("/etc/docker/daemon.json", json.dumps(DAEMON_JSON, indent=2).encode())
    rootfs.file("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    # The socket's group (--group) is the pod's fsGroup, the runner's group.
    rootfs.file("/etc/group", b"root:x:0:\nrunner:x:1001:\n")
    rootfs.directory("/tmp", 0o1777)
    for folder in ("/run", "/var/run", "/var/lib/docker", "/root"):
        rootfs.directory(folder, 0o755 if folder != "/root" else 0o700)
    config = {"Entrypoint": ["/usr/bin/docker-init", "--"], "Cmd": ["dockerd"], "Env": [_PATH]}
    image = _pack("runnerpool-dind-test", rootfs, config)
    progress(f"dind test image {image.reference} ready", started)
    return image


def runner_dind_image() -> images.Image:
    started = time.monotonic()
    roots = debian_packages(DOCKER_PACKAGES)
    rootfs = images.runner_rootfs()
    _add_from_packages(rootfs, roots, [DOCKER_CLI])
    rootfs.file(BUSYBOX_ARCHIVE, busybox_archive(), 0o644)
    image = _pack("runnerpool-runner-dind-test", rootfs, images.RUNNER_CONFIG)
    progress(f"dind runner test image {image.reference} ready", started)
    return image


def busybox_archive() -> bytes:
    """``BUSYBOX_IMAGE`` as ``docker save`` writes it, which Docker 20.10's ``docker load`` reads.

    (OCI layouts, what the node's containerd imports, ``docker load`` takes only from 25.0 on.)
    """
    [root] = debian_packages((BUSYBOX_PACKAGE,)).values()
    rootfs = images.Rootfs()
    rootfs.file("/bin/busybox", (root / "bin" / "busybox").read_bytes(), 0o755)
    for applet in _BUSYBOX_APPLETS:
        rootfs.symlink(f"/bin/{applet}", "busybox")
    rootfs.directory("/tmp", 0o1777)
    layer = rootfs.layer()
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [BUSYBOX_IMAGE], "Layers": [f"{layer_id}/layer.tar"]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (
            (config_name, config),
            (f"{layer_id}/layer.tar", layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _pack(name: str, rootfs: images.Rootfs, config: dict[str, Any]) -> images.Image:
    key = hashlib.sha256((rootfs.digest() + json.dumps(config, sort_keys=True)).encode()).hexdigest()[:16]
    return images.cached(name, key, lambda ref: images.oci_archive(rootfs, ref, config, _COMPRESSION))


def _add_from_packages(rootfs: images.Rootfs, roots: dict[str, Path], paths: list[str]) -> None:
    """``paths`` (image paths) from the unpacked packages, and the shared libraries they link."""
    located = []
    for path in paths:
        candidates = (root / path.lstrip("/") for root in roots.values())
        source = next((candidate for candidate in candidates if candidate.exists()), None)
        if source is None:
            raise AssetError(f"{path} is in none of the packages {', '.join(roots)}")
        rootfs.file(path, source.read_bytes(), source.stat().st_mode & 0o7777)
        located.append(str(source))
    library_dirs = [
        str(folder)
        for root in roots.values()
        for folder in (root / "lib" / "x86_64-linux-gnu", root / "usr" / "lib" / "x86_64-linux-gnu")
        if folder.is_dir()
    ]
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(library_dirs)}
    listed = subprocess.run(["ldd", *located], capture_output=True, text=True, check=False, env=env)
    if "not found" in listed.stdout:
        lost = sorted({line.split()[0] for line in listed.stdout.splitlines() if "not found" in line})
        raise AssetError(f"shared libraries of the Docker binaries not found: {', '.join(lost)}")
    libraries = {
        line.split("=>")[-1].split()[0]
        for line in listed.stdout.splitlines()
        if "=>" in line or line.startswith("\t/")
    }
    for library in sorted(lib for lib in libraries if lib.startswith("/")):
        owner = next((root for root in roots.values() if library.startswith(f"{root}/")), None)
        if owner is None:
            rootfs.host_path(library)
        else:
            target = _resolved(rootfs, "/" + str(Path(library).relative_to(owner)))
            rootfs.file(target, Path(library).read_bytes(), 0o644)


def _resolved(rootfs: images.Rootfs, path: str) -> str:
    """``path`` through the symlinks already in ``rootfs`` (merged /usr: /lib -> usr/lib), so a
    file lands in the directory a symlink points to rather than under the symlink."""
    parts = Path(path).parts[1:]
    for index in range(1, len(parts)):
        prefix = "/" + "/".join(parts[:index])
        entry = rootfs.entries.get(prefix)
        if entry is not None and entry.kind == "symlink":
            base = Path(prefix).parent / entry.target
            return _resolved(rootfs, os.path.normpath(base.joinpath(*parts[index:])))
    return path
