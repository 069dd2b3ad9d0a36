"""What the machine must offer before the test node can start, checked first and all at once.

Each problem comes with what to do about it, so a newcomer sees one list instead of the
kubelet's or runc's first cryptic failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: cgroup v1 controllers the kubelet and runc use (on cgroup v2 the same names in cgroup.controllers).
CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
_COMMANDS = {
    "runc": "apt-get install -y --no-install-recommends runc",
    "unshare": "apt-get install -y util-linux",
    # Test operators die with the process that started them (testworld.simulator).
    "setpriv": "apt-get install -y util-linux",
    "mount": "apt-get install -y mount",
    "ip": "apt-get install -y --no-install-recommends iproute2",
    "gcc": "apt-get install -y --no-install-recommends gcc libc6-dev",
    "ldd": "apt-get install -y libc-bin",
    "curl": "apt-get install -y --no-install-recommends curl",
}
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def _enabled_controllers() -> set[str]:
    enabled = set()
    cgroups = Path("/proc/cgroups")
    if cgroups.exists():
        for line in cgroups.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 4 and fields[3] == "1":
                enabled.add(fields[0])
    unified = Path("/sys/fs/cgroup/cgroup.controllers")
    if unified.exists():
        enabled.update(unified.read_text().split())
    if "cpu" in enabled:
        enabled.add("cpuacct")  # cgroup v2 accounts CPU in the cpu controller
    return enabled


def which(command: str) -> str | None:
    """``shutil.which`` that also looks in the sbin folders a non-login root PATH may lack."""
    return shutil.which(command) or shutil.which(command, path=os.pathsep.join(_SBIN))


def problems() -> list[str]:
    """Everything missing, each with how to get it; empty when the node can start."""
    found = []
    if os.geteuid() != 0:
        found.append("not root: the node mounts, makes namespaces and cgroups (run as root)")
    filesystems = Path("/proc/filesystems").read_text() if Path("/proc/filesystems").exists() else ""
    if "overlay" not in filesystems.split():
        found.append("overlayfs is not available to containerd: load it with `modprobe overlay`")
    missing = [c for c in CONTROLLERS if c not in _enabled_controllers()]
    if missing:
        found.append(f"cgroup controllers not enabled: {', '.join(missing)} (the kernel must provide them)")
    for command, hint in _COMMANDS.items():
        if which(command) is None:
            found.append(f"{command} is not installed: {hint}")
    if which("gcc") is not None and not any(
        Path(p).exists() for p in ("/usr/lib/x86_64-linux-gnu/libc.a", "/usr/lib/libc.a", "/usr/lib64/libc.a")
    ):
        found.append("static libc (libc.a) for the pause image is missing: apt-get install -y libc6-dev")
    return found
