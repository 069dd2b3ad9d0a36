"""The node's own cgroup subtree: created before the kubelet starts, emptied and removed after.

cgroups are global even inside the sealed namespaces: the kubelet puts every pod under
``cgroupRoot`` and runc adds its own directories, in every hierarchy.  One name is used
(only one node per machine runs, under a file lock), so whatever a crashed run left
behind is found by that name at the next start.  Processes still in it are found by
cgroup membership, never by name: the subtree is frozen (so nothing forks meanwhile),
each member is killed, then thawed so the kill is delivered, and the directories are
removed deepest first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from testworld.wait import poll_until

#: The kubelet's cgroupRoot: every pod and container of the test node lives below it.
CGROUP_ROOT = "runnerpool-testworld"
#: Below the root, beside the kubelet's kubepods: containerd, the kubelet and the shims.
DAEMONS = "daemons"
_GONE_TIMEOUT = 10.0


def hierarchies() -> list[Path]:
    """Mount points of every cgroup (v1 and v2) hierarchy on this machine."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fstype = after.split()[0] if after else ""
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(before.split()[4]))
    return found


def _freezer() -> Path | None:
    """The v1 freezer's copy of the subtree (cgroup v2 uses ``cgroup.freeze`` instead)."""
    for mount in hierarchies():
        if (mount / "freezer.state").exists() or mount.name == "freezer":
            return mount / CGROUP_ROOT
    return None


def _subtree(top: Path) -> Iterator[Path]:
    """``top`` and every directory below it, deepest first."""
    if not top.is_dir():
        return
    for folder, _dirs, _files in os.walk(top, topdown=False):
        yield Path(folder)


def members() -> set[int]:
    """Every process in the subtree, in any hierarchy."""
    pids: set[int] = set()
    for mount in hierarchies():
        for folder in _subtree(mount / CGROUP_ROOT):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
    return pids


def create() -> None:
    """Make ``CGROUP_ROOT`` (and the daemons' folder) in every hierarchy: the kubelet needs it."""
    for mount in hierarchies():
        (mount / CGROUP_ROOT / DAEMONS).mkdir(parents=True, exist_ok=True)


def join_daemons(pid: int) -> None:
    """Move ``pid`` into the daemons' folder in every hierarchy, so its children are ours too."""
    for mount in hierarchies():
        target = mount / CGROUP_ROOT / DAEMONS / "cgroup.procs"
        with contextlib.suppress(OSError):
            target.write_text(str(pid))


def _set_frozen(frozen: bool) -> None:
    freezer = _freezer()
    if freezer is not None and (freezer / "freezer.state").exists():
        (freezer / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
    for mount in hierarchies():
        flag = mount / CGROUP_ROOT / "cgroup.freeze"
        if flag.exists():
            flag.write_text("1" if frozen else "0")


def kill_members() -> list[int]:
    """Freeze, SIGKILL every member, thaw; returns the pids that were killed."""
    pids = members() - {os.getpid()}
    if not pids:
        return []
    _set_frozen(True)
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        _set_frozen(False)
    return sorted(pids)


def remove() -> list[str]:
    """Kill what is left in the subtree and remove its directories; returns what could not go."""
    kill_members()
    poll_until(lambda: not members(), _GONE_TIMEOUT, 0.02)
    left = []
    for mount in hierarchies():
        for folder in _subtree(mount / CGROUP_ROOT):
            if not poll_until(functools.partial(_rmdir, folder), _GONE_TIMEOUT, 0.02):
                left.append(str(folder))
    return left


def _rmdir(folder: Path) -> bool:
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def container_state(container_id: str) -> str:
    """What the kernel says of one container's processes: its v1 freezer state and each
    process's state (``R``, ``S``, ``D``: uninterruptible, ``T``: stopped, ``Z``) and wait
    channel. For a pod that outlives its grace: a frozen cgroup (runc 1.1 freezes a cgroup v1
    container around updates and ``kill --all``) takes no SIGKILL until thawed, and a process
    in ``D`` none at all."""
    freezer = _freezer()
    found = next((d for d in _subtree(freezer) if d.name == container_id), None) if freezer else None
    if found is None:
        return "no freezer cgroup"
    try:
        state = (found / "freezer.state").read_text().strip()
        pids = [int(p) for p in (found / "cgroup.procs").read_text().split()]
    except OSError as err:
        return f"freezer unreadable ({err.strerror})"
    described = []
    for pid in pids[:8]:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
        except OSError:
            continue
        comm, _, rest = stat.partition("(")[2].rpartition(")")
        described.append(f"{pid} {rest.split()[0]} ({comm}, wchan {wchan})")
    return f"freezer {state}; " + (", ".join(described) or "no process")
