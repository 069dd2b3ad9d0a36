"""Debian packages for the test images, unpacked in the test binaries' cache (nothing can be pulled).

``apt-get download`` from the machine's mirror, then ``dpkg-deb -x``: nothing is installed on
the host (the packages' maintainer scripts would start a daemon and add a group there). So this
needs the mirror once, outside the sealed world (``python -m testworld.node.assets`` builds the
images that use it); inside, the cached packages are reused. Used by the runner test image (its
``tini``) and the dind test images (Docker's packages).
"""

from __future__ import annotations

import fcntl
import subprocess
import time
from pathlib import Path

from testworld.envtest.assets import AssetError, cache_root, progress

__all__ = ["debian_packages"]


def debian_packages(names: tuple[str, ...]) -> dict[str, Path]:
    """Each package unpacked (``dpkg-deb -x``) in the cache: name -> its root folder.

    Downloaded once (``apt-get download``, after an ``apt-get update`` if the mirror's lists
    are missing) and kept: a newer Debian build is picked up only after the cache is cleared.
    """
    folder = cache_root() / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "debs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [name for name in names if _deb(folder, name) is None]
        if missing:
            started = time.monotonic()
            _download(folder, missing)
            progress(f"Debian packages {' '.join(missing)} downloaded", started)
        roots = {}
        for name in names:
            deb = _deb(folder, name)
            if deb is None:
                raise AssetError(f"apt-get download {name} left no {name}_*.deb in {folder}")
            root = deb.with_suffix("")
            if not root.is_dir():
                partial = root.with_suffix(".partial")
                _run(["rm", "-rf", str(partial)])
                _run(["dpkg-deb", "-x", str(deb), str(partial)])
                partial.rename(root)
            roots[name] = root
    return roots


def _deb(folder: Path, name: str) -> Path | None:
    found = sorted(folder.glob(f"{name}_*.deb"))
    return found[-1] if found else None


def _download(folder: Path, names: list[str]) -> None:
    command = ["apt-get", "download", *names]
    first = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if first.returncode == 0:
        return
    # A fresh machine may have no package lists yet.
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
    again = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    if again.returncode != 0:
        raise AssetError(
            f"`{' '.join(command)}` failed (it needs Debian's package mirror: build the test images "
            f"outside the sealed world with `python -m testworld.node.assets`):\n{again.stderr.strip()}"
        )


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssetError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
