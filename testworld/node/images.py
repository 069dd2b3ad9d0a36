"""Container images for the test node, built here because nothing can be pulled.

Two images, each one layer, packed as an OCI image-layout archive that
``ctr images import`` takes (no Docker, no registry):

* the pod sandbox's pause image, from ``pause.c`` compiled with ``gcc -static``;
* the runner test image: the project's real ``deploy/images/runner/entrypoint.sh``
  at the real image's path, running as the real image's user (uid/gid 1001) with its
  environment, plus the stand-ins in ``testworld/runner_image/`` for the actions
  runner's ``config.sh`` and ``run.sh`` (and its worker with container hooks, and the hooks:
  ``k8s-hook.sh`` at the runner image's hook paths).  Its userland is the host's own bash,
  curl and coreutils with the shared libraries ``ldd`` names, laid out as on the host
  (symlinks included), and its PID 1 is tini, as in the real image, from Debian's package
  (the one thing taken from the mirror, once: ``testworld.node.debian``); the image is a few MiB.

Archives are cached by a digest of their inputs (file contents, modes, owners,
config), so an edited entrypoint or stand-in gives a new tag and a new archive.
No Python library writes OCI layouts from a file list without a container
engine, so this is written here (the format is small: one gzip layer, a config,
a manifest, an index).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runnerpool.api import KUBERNETES_HOOK, KUBERNETES_NOVOLUME_HOOK
from testworld.envtest.assets import AssetError, cache_root
from testworld.node.debian import debian_packages

REPO_ROOT = Path(__file__).resolve().parents[2]
PAUSE_SOURCE = Path(__file__).with_name("pause.c")
RUNNER_ENTRYPOINT = REPO_ROOT / "deploy" / "images" / "runner" / "entrypoint.sh"
RUNNER_STANDINS = REPO_ROOT / "testworld" / "runner_image"
#: The real runner image's user ("runner" in the actions-runner base image).
RUNNER_UID = 1001
RUNNER_HOME = "/home/runner"
ENTRYPOINT_PATH = "/usr/local/bin/runnerpool-runner-entrypoint"
#: The container's PID 1, as in the real image: tini, which handles SIGTERM from its first
#: instruction and passes it to the entrypoint (deploy/images/runner/Dockerfile says why).
TINI_PATH = "/usr/bin/tini"
#: tini's static build, from Debian's package (``testworld.node.debian``; no mirror inside the
#: sealed world, the cache has it from ``make node``).
TINI_PACKAGE, TINI_STATIC = "tini", "usr/bin/tini-static"
#: Where the image keeps the test jobs' steps (testworld/runner_image/jobs/), e.g. the steal probe.
JOBS_DIR = "/opt/runnerpool-test-jobs"
#: Host commands for the image: bash, curl and the coreutils a shell script reaches for
#: (the stand-ins and the entrypoint use bash, curl, tr, date, dirname, mkdir, sleep, cat,
#: env, rm, ls).  Named here, not read from dpkg: the sealed world hides /var/lib.
_COREUTILS = """base64 basename cat chmod cp cut date dirname echo env false head id ln ls mkdir mktemp mv
printf pwd readlink rm rmdir seq sleep sort stat tail tee test timeout touch tr true uname uniq wc whoami"""
RUNNER_HOST_COMMANDS = ("bash", "curl", *_COREUTILS.split())
#: Bumped when the packing itself changes, so old archives are not reused.
_FORMAT = "1"
_LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar+gzip"
_MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
_CONFIG_MEDIA = "application/vnd.oci.image.config.v1+json"
_LDD_PATH = re.compile(r"(/\S+)")


@dataclass(frozen=True)
class Entry:
    """One tar member: a file with content, a directory, or a symlink."""

    path: str  # absolute path inside the image
    kind: str  # "file" | "dir" | "symlink"
    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    target: str = ""


@dataclass
class Rootfs:
    """Entries by path; parents are added as root-owned directories when packed."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        self.entries[entry.path] = entry

    def file(self, path: str, data: bytes, mode: int = 0o644, owner: int = 0) -> None:
        self.add(Entry(path, "file", mode, owner, owner, data=data))

    def directory(self, path: str, mode: int = 0o755, owner: int = 0) -> None:
        self.add(Entry(path, "dir", mode, owner, owner))

    def symlink(self, path: str, target: str) -> None:
        self.add(Entry(path, "symlink", 0o777, target=target))

    def host_path(self, path: str) -> None:
        """Copy a host file into the same place, following and recreating every symlink."""
        parts = Path(path).parts[1:]
        current = Path("/")
        for index, part in enumerate(parts):
            current = current / part
            if current.is_symlink():
                target = os.readlink(current)
                self.add(Entry(str(current), "symlink", 0o777, target=target))
                rest = Path(*parts[index + 1 :]) if index + 1 < len(parts) else None
                resolved = (current.parent / target) if not target.startswith("/") else Path(target)
                self.host_path(os.path.normpath(resolved / rest if rest else resolved))
                return
        if current.is_dir():
            self.directory(str(current))
            return
        mode = current.stat().st_mode & 0o7777
        self.file(str(current), current.read_bytes(), mode)

    def host_binaries(self, paths: list[str]) -> None:
        """Host executables and every shared library (and the loader) that ldd names for them."""
        for path in paths:
            self.host_path(path)
        self.shared_libraries(paths)

    def shared_libraries(self, paths: list[str]) -> None:
        """Every shared library (and the loader) that ldd names for ``paths``, at its host path."""
        # One ldd for all: it prints each file's libraries (a static one gets "not a dynamic ...").
        listed = subprocess.run(["ldd", *paths], check=False, capture_output=True, text=True)
        libraries = {
            match.group(1)
            for line in listed.stdout.splitlines()
            if "=>" in line or line.startswith("\t/")
            for match in [_LDD_PATH.search(line.split("=>")[-1])]
            if match
        }
        for library in sorted(libraries):
            self.host_path(library)

    def digest(self) -> str:
        """A digest of everything that ends up in the layer."""
        sha = hashlib.sha256(_FORMAT.encode())
        for path in sorted(self.entries):
            e = self.entries[path]
            sha.update(f"{e.path}\0{e.kind}\0{e.mode}\0{e.uid}\0{e.gid}\0{e.target}\0".encode())
            sha.update(hashlib.sha256(e.data).digest())
        return sha.hexdigest()

    def _with_parents(self) -> list[Entry]:
        entries = dict(self.entries)
        for path in list(entries):
            for parent in Path(path).parents:
                if str(parent) != "/" and str(parent) not in entries:
                    entries[str(parent)] = Entry(str(parent), "dir")
        return [entries[p] for p in sorted(entries)]

    def layer(self) -> bytes:
        """An uncompressed, reproducible tar of the rootfs (mtime 0, fixed owners)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for e in self._with_parents():
                info = tarfile.TarInfo(e.path.lstrip("/"))
                info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, 0
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif e.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, e.target
                    tar.addfile(info)
                else:
                    info.size = len(e.data)
                    tar.addfile(info, io.BytesIO(e.data))
        return buffer.getvalue()


@dataclass(frozen=True)
class Image:
    """A packed image: its reference as the node knows it and the archive to import."""

    reference: str
    archive: Path


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def oci_archive(rootfs: Rootfs, reference: str, config: dict[str, Any], compresslevel: int = 9) -> bytes:
    """The OCI image-layout archive (one gzip layer) that `ctr images import` takes."""
    layer = rootfs.layer()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_digest, layer_gz = _blob(gzip.compress(layer, compresslevel, mtime=0))
    image_config = {
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "testworld.node.images"}],
    }
    config_digest, config_bytes = _blob(json.dumps(image_config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MANIFEST_MEDIA,
        "config": {"mediaType": _CONFIG_MEDIA, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": _LAYER_MEDIA, "digest": layer_digest, "size": len(layer_gz)}],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": _MANIFEST_MEDIA,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": reference},
            }
        ],
    }
    members: list[tuple[str, bytes]] = [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
    ]
    for digest, data in (
        (layer_digest, layer_gz),
        (config_digest, config_bytes),
        (manifest_digest, manifest_bytes),
    ):
        members.append((f"blobs/sha256/{digest.removeprefix('sha256:')}", data))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pack(name: str, rootfs: Rootfs, config: dict[str, Any]) -> Image:
    """Pack ``rootfs`` as ``localhost/NAME:<input digest>``, reusing a cached archive."""
    key = hashlib.sha256((rootfs.digest() + json.dumps(config, sort_keys=True)).encode()).hexdigest()[:16]
    return cached(name, key, lambda reference: oci_archive(rootfs, reference, config))


def cached(name: str, key: str, build: Callable[[str], bytes]) -> Image:
    """The archive of ``localhost/NAME:KEY``, from the cache or from ``build(reference)``.

    For an image whose rootfs is costly to make (the operator's compiles its bytecode),
    ``key`` is a digest of its inputs computed before any of that work.
    """
    reference = f"localhost/{name}:{key}"
    folder = cache_root() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{name}-{key}.oci.tar"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            partial = archive.with_suffix(".partial")
            partial.write_bytes(build(reference))
            partial.rename(archive)
            for old in folder.glob(f"{name}-*.oci.tar"):
                if old != archive:
                    old.unlink()
    return Image(reference, archive)


def pause_image() -> Image:
    if shutil.which("gcc") is None:
        raise AssetError("gcc is needed to build the pause image: apt-get install -y gcc libc6-dev")
    with tempfile.TemporaryDirectory() as scratch:
        binary = Path(scratch) / "pause"
        built = subprocess.run(
            ["gcc", "-static", "-Os", "-Wall", "-o", str(binary), str(PAUSE_SOURCE)],
            check=False,
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise AssetError(
                f"gcc -static failed for {PAUSE_SOURCE} (static libc comes with libc6-dev):\n{built.stderr}"
            )
        rootfs = Rootfs()
        rootfs.file("/pause", binary.read_bytes(), 0o755)
    return pack("runnerpool-pause", rootfs, {"Entrypoint": ["/pause"], "User": "65535:65535"})


def runner_image() -> Image:
    return pack("runnerpool-runner-test", runner_rootfs(), RUNNER_CONFIG)


#: The runner test image's config: the real image's user, directory, entrypoint and environment.
RUNNER_CONFIG: dict[str, Any] = {
    "User": f"{RUNNER_UID}:{RUNNER_UID}",
    "WorkingDir": RUNNER_HOME,
    "Entrypoint": [TINI_PATH, "--", ENTRYPOINT_PATH],
    "Env": [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"RUNNER_DIR={RUNNER_HOME}",
        "RUNNER_MANUALLY_TRAP_SIG=1",
        "ACTIONS_RUNNER_PRINT_LOG_TO_STDOUT=1",
        "ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE=1",
    ],
}


def tini_static() -> Path:
    """tini's static binary on this machine (unpacked from Debian's package, in the cache)."""
    [root] = debian_packages((TINI_PACKAGE,)).values()
    return root / TINI_STATIC


def runner_rootfs() -> Rootfs:
    """The runner test image's files (the dind runner test image adds the docker CLI to them)."""
    missing = [p for p in (RUNNER_STANDINS / "config.sh", RUNNER_STANDINS / "run.sh") if not p.is_file()]
    if missing:
        raise AssetError(f"runner image stand-ins missing: {', '.join(map(str, missing))}")
    rootfs = Rootfs()
    commands = []
    for command in RUNNER_HOST_COMMANDS:
        found = shutil.which(command)
        if found is None:
            package = command if command in ("bash", "curl") else "coreutils"
            raise AssetError(f"{command} is not installed: apt-get install -y {package}")
        commands.append(found)
    rootfs.host_binaries(commands)
    rootfs.file(
        "/etc/passwd", b"root:x:0:0:root:/root:/bin/bash\nrunner:x:1001:1001:runner:/home/runner:/bin/bash\n"
    )
    rootfs.file("/etc/group", b"root:x:0:\nrunner:x:1001:\n")
    rootfs.file("/etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files\n")
    rootfs.directory("/tmp", 0o1777)
    rootfs.directory(RUNNER_HOME, 0o755, RUNNER_UID)
    # As the real Dockerfile: the default work directory belongs to the runner user.
    rootfs.directory("/runner", 0o755, RUNNER_UID)
    rootfs.directory("/runner/_work", 0o755, RUNNER_UID)
    rootfs.file(ENTRYPOINT_PATH, RUNNER_ENTRYPOINT.read_bytes(), 0o755)
    rootfs.file(TINI_PATH, tini_static().read_bytes(), 0o755)
    # config.sh, run.sh and what they source, beside each other as in the real runner's folder.
    for script in sorted(RUNNER_STANDINS.glob("*.sh")):
        rootfs.file(f"{RUNNER_HOME}/{script.name}", script.read_bytes(), 0o755, RUNNER_UID)
    # The container hooks' stand-in where the runner image has both flavours (api.KUBERNETES_HOOK,
    # KUBERNETES_NOVOLUME_HOOK); the stand-in worker runs it itself, the real runner with node.
    for hook in (KUBERNETES_HOOK, KUBERNETES_NOVOLUME_HOOK):
        rootfs.file(hook, (RUNNER_STANDINS / "k8s-hook.sh").read_bytes(), 0o755, RUNNER_UID)
    # What test jobs run as their steps, outside the runner's folder like a checked-out repository.
    for script in sorted((RUNNER_STANDINS / "jobs").glob("*.sh")):
        rootfs.file(f"{JOBS_DIR}/{script.name}", script.read_bytes(), 0o755)
    return rootfs
