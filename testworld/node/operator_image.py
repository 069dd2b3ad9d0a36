"""The operator's image for the test node, packed from the host's Python and the project's wheel.

``deploy/images/operator/Dockerfile`` builds the real image (``pip install .`` on
python:3.11-slim, bytecode compiled, uid 65532).  Nothing can be pulled here and there is
no container engine, so the same contents are packed from what this machine has, as one
layer with ``images``' machinery (like the runner test image):

* the interpreter the tests themselves run on (``sys.base_prefix``, pyenv's 3.11 here) at
  its own path, because its RUNPATH names that prefix for ``libpython``; its standard
  library without what no server imports (the test suite, IDLE, tkinter, ...), and every
  shared library ``ldd`` names for it, its extension modules and the dependencies' ones;
* a virtual environment ``/opt/runnerpool`` over it, as ``python -m venv`` + ``pip install``
  make it: the project's wheel, built offline from the checkout, and every distribution of
  its dependency closure, copied file by file (by its RECORD) from the environment running
  this, so the image holds exactly the versions the rest of the suite tests, minus
  ``kubernetes.aio`` (the asyncio client: 34 MB that the operator never imports);
* bytecode for all of it as unchecked-hash pycs (PEP 552): the layer's files have mtime 0
  and the root filesystem is read-only, so timestamp pycs would be stale and every start
  would compile the stdlib and the client again (5 s of CPU, says the Dockerfile);
* the interpreter's own binaries without debug info (``strip --strip-debug``: 50 -> 40 MB);
* user 65532 (deploy/'s ``runAsUser``), the console script as entrypoint.

The archive is cached by a digest of the inputs (every copied file, the project's sources),
taken before the wheel is built or anything compiled: a warm call reads and hashes them.
"""

from __future__ import annotations

import configparser
import hashlib
import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testworld.envtest.assets import AssetError
from testworld.node.images import REPO_ROOT, Image, Rootfs, cached, oci_archive

NAME = "runnerpool-operator-test"
PROJECT = "runnerpool-operator"
#: deploy/manager/deployment.yaml's runAsUser and the Dockerfile's USER.
OPERATOR_UID = 65532
#: The virtual environment the wheel and its dependencies are installed into.
PREFIX = "/opt/runnerpool"
#: Bumped when the packing changes, so an archive of the old kind is not reused.
_FORMAT = "2"
#: Standard library folders no server imports.
_STDLIB_SKIP = {
    "__pycache__",
    "ensurepip",
    "idlelib",
    "lib2to3",
    "pydoc_data",
    "site-packages",
    "test",
    "tkinter",
    "turtledemo",
}
#: Extension modules of the same kind (the stdlib's own test helpers, Tk).
_DYNLOAD_SKIP = ("_test", "_ctypes_test", "_tkinter", "_xxtestfuzz", "xx")
#: Parts of dependencies the operator never imports (see the module docstring).
_PRUNED = ("kubernetes/aio/",)
#: As tests/test_packaging.py builds it: nothing fetched, this environment's setuptools.
_OFFLINE = ("--no-deps", "--no-build-isolation", "--no-index")
_ENTRYPOINT = f"{PREFIX}/bin/{PROJECT}"
_PROJECT_SOURCES = ("pyproject.toml", "README.md", "runnerpool", "secret_updater")
#: Fast enough on 2 cores; the archive is written once per change of its inputs.
_COMPRESSLEVEL = 6


def _version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _site_packages() -> str:
    return f"{PREFIX}/lib/python{_version()}/site-packages"


def _closure(root: str) -> list[metadata.Distribution]:
    """``root``'s installed dependencies, recursively, with the extras each asks for; not ``root``."""
    found: dict[str, metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(root, "")]
    while todo:
        name, extra = todo.pop()
        key = canonicalize_name(name)
        if (key, extra) in done:
            continue
        done.add((key, extra))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise AssetError(f"{name} (needed by the operator image) is not installed: make venv") from None
        if key != canonicalize_name(root):
            found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                todo.append((requirement.name, ""))
                todo.extend((requirement.name, wanted) for wanted in requirement.extras)
    return [found[key] for key in sorted(found)]


def _dist_files(dist: metadata.Distribution) -> Iterator[tuple[str, Path]]:
    """(path under site-packages, host file) of what pip installed for ``dist``, bytecode aside."""
    for entry in dist.files or []:
        relative = entry.as_posix()
        if relative.startswith("../") or "__pycache__/" in relative or relative.startswith(_PRUNED):
            continue  # scripts in bin/ (the image has its own entry point) and compiled files
        host = Path(str(dist.locate_file(entry)))
        if host.is_file():
            yield relative, host


def _add_file(rootfs: Rootfs, path: str, host: Path) -> None:
    mode = 0o755 if host.stat().st_mode & 0o111 else 0o644
    rootfs.file(path, host.read_bytes(), mode)


def _interpreter(rootfs: Rootfs) -> tuple[Path, list[str]]:
    """The interpreter and its stdlib at their host paths; the extension modules for ldd."""
    executable = Path(sys.base_prefix) / "bin" / f"python{_version()}"
    if not executable.is_file():
        raise AssetError(f"the host's Python has no {executable} (sys.base_prefix {sys.base_prefix})")
    rootfs.host_path(str(executable))
    stdlib = Path(sysconfig.get_paths(vars={"installed_base": sys.base_prefix})["stdlib"])
    extensions = []
    for folder, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP and not d.startswith("config-"))
        for name in sorted(files):
            host = Path(folder) / name
            if name.endswith(".so"):
                if name.startswith(_DYNLOAD_SKIP):
                    continue
                extensions.append(str(host))
            _add_file(rootfs, str(host), host)
    return executable, extensions


def _venv(rootfs: Rootfs, executable: Path) -> None:
    """What ``python -m venv PREFIX`` writes: pyvenv.cfg and the interpreter's symlinks."""
    rootfs.file(
        f"{PREFIX}/pyvenv.cfg",
        f"home = {executable.parent}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n".encode(),
    )
    rootfs.symlink(f"{PREFIX}/bin/python", str(executable))
    rootfs.symlink(f"{PREFIX}/bin/python3", "python")
    rootfs.symlink(f"{PREFIX}/bin/python{_version()}", "python")


def _inputs() -> Rootfs:
    """Everything copied from the host (read, not yet compiled), and the shared objects in it."""
    rootfs = Rootfs()
    executable, extensions = _interpreter(rootfs)
    _venv(rootfs, executable)
    site = _site_packages()
    for dist in _closure(PROJECT):
        for relative, host in _dist_files(dist):
            _add_file(rootfs, f"{site}/{relative}", host)
            if relative.endswith(".so"):
                extensions.append(str(host))
    rootfs.shared_libraries([str(executable), *extensions])
    rootfs.file(
        "/etc/passwd",
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{OPERATOR_UID}:{OPERATOR_UID}::/home/nonroot:"
        "/sbin/nologin\n".encode(),
    )
    rootfs.file("/etc/group", f"root:x:0:\nnonroot:x:{OPERATOR_UID}:\n".encode())
    rootfs.directory("/home/nonroot", 0o755, OPERATOR_UID)
    rootfs.directory("/tmp", 0o1777)
    return rootfs


def _project_digest() -> str:
    """The checkout's files that go into the wheel (sources, metadata, readme)."""
    sha = hashlib.sha256()
    for name in _PROJECT_SOURCES:
        top = REPO_ROOT / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            if "__pycache__" in path.parts:
                continue
            sha.update(f"{path.relative_to(REPO_ROOT)}\0".encode())
            sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def _install_wheel(rootfs: Rootfs) -> None:
    """Build the project's wheel offline and unpack it into site-packages; its console script."""
    with tempfile.TemporaryDirectory() as scratch:
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", *_OFFLINE, "-w", scratch, str(REPO_ROOT)],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if built.returncode != 0:
            raise AssetError(f"building the project's wheel failed:\n{built.stderr}")
        (wheel,) = Path(scratch).glob("runnerpool_operator-*.whl")
        site = _site_packages()
        entry_points = ""
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                data = archive.read(info)
                rootfs.file(f"{site}/{info.filename}", data)
                if info.filename.endswith(".dist-info/entry_points.txt"):
                    entry_points = data.decode()
    scripts = configparser.ConfigParser()
    scripts.read_string(entry_points)
    module, function = scripts["console_scripts"][PROJECT].split(":")
    # What pip writes for a console script.
    script = f"#!{PREFIX}/bin/python\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    rootfs.file(_ENTRYPOINT, script.encode(), 0o755)


def _compile(rootfs: Rootfs) -> None:
    """An unchecked-hash pyc beside every module, named by the path it has in the image."""
    for path, entry in list(rootfs.entries.items()):
        if entry.kind != "file" or not path.endswith(".py"):
            continue
        try:
            code = compile(entry.data, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue  # not importable on this Python anyway (a template, a Python 2 leftover)
        # PEP 552 header: magic, flags (bit 0: hash-based; bit 1 unset: never checked), hash.
        flags = (1).to_bytes(4, "little")
        header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(entry.data)
        rootfs.file(importlib.util.cache_from_source(path), header + marshal.dumps(code))


def _strip_debug_info(rootfs: Rootfs) -> None:
    """The interpreter's own binaries without their debug info (pyenv keeps it: 30 of 38 MB)."""
    strip = shutil.which("strip")
    if strip is None:
        raise AssetError("strip is needed to pack the operator image: apt-get install -y binutils")
    prefix = sys.base_prefix.rstrip("/") + "/"
    with tempfile.TemporaryDirectory() as scratch:
        for path, entry in list(rootfs.entries.items()):
            if entry.kind != "file" or not path.startswith(prefix) or not entry.data.startswith(b"\x7fELF"):
                continue
            source, stripped = Path(scratch) / "in", Path(scratch) / "out"
            source.write_bytes(entry.data)
            done = subprocess.run(
                [strip, "--strip-debug", "-o", str(stripped), str(source)], capture_output=True, check=False
            )
            if done.returncode != 0:
                raise AssetError(f"strip --strip-debug {path} failed: {done.stderr.decode().strip()}")
            rootfs.file(path, stripped.read_bytes(), entry.mode)


def _config(entrypoint: str) -> dict[str, Any]:
    return {
        "User": f"{OPERATOR_UID}:{OPERATOR_UID}",
        "WorkingDir": "/",
        "Entrypoint": [entrypoint],
        "Env": [
            f"PATH={PREFIX}/bin:/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ],
        "ExposedPorts": {"8080/tcp": {}, "8081/tcp": {}, "8082/tcp": {}},
    }


def operator_image() -> Image:
    """The operator's test image, from the cache when none of its inputs changed."""
    rootfs = _inputs()
    config = _config(_ENTRYPOINT)
    key = hashlib.sha256(
        f"{_FORMAT}\0{rootfs.digest()}\0{_project_digest()}\0{json.dumps(config, sort_keys=True)}".encode()
    ).hexdigest()[:16]

    def build(reference: str) -> bytes:
        started = time.monotonic()
        _install_wheel(rootfs)
        _compile(rootfs)
        _strip_debug_info(rootfs)
        archive = oci_archive(rootfs, reference, config, compresslevel=_COMPRESSLEVEL)
        print(
            f"packed {reference}: {len(archive) / 2**20:.0f} MiB in {time.monotonic() - started:.0f}s",
            file=sys.stderr,
        )
        return archive

    return cached(NAME, key, build)
