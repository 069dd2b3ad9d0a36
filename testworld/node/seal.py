"""Run a command inside namespaces of its own: the sealed world the test node lives in.

``python -m testworld.node.seal -- CMD ...`` (what ``make test`` runs) does, in order:

1. checks the prerequisites and fails with the list of what is missing;
2. reads the host's sysctls that the kubelet would rewrite;
3. takes the machine-wide node lock (one node per machine);
4. removes what an earlier run may have left in the node's cgroup subtree;
5. runs ``unshare --net --mount --propagation private --pid --fork --mount-proc
   --kill-child`` with PR_SET_PDEATHSIG, so nothing outlives this process, and inside
   it (PID 1 of the new PID namespace) sets up the world and runs CMD:
   ``lo`` up, a bridge ``10.88.0.1/24`` with a fixed MAC and no default route (nothing can leave the
   machine, no DNS lookup can succeed), tmpfs on ``/run``, ``/var/lib`` and ``/var/log``,
   files bind-mounted over the sysctls the kubelet sets (so it finds them set and never
   writes the host's), a private ``KUBECACHEDIR``;
6. afterwards removes the cgroup subtree again and fails if any host sysctl changed.

When PID 1 of the namespace exits, the kernel kills every process left in it, so a
crashed run leaves only empty cgroup directories, removed by the next start.  The shell
``unshare`` is util-linux's; Python 3.11 has no ``os.unshare`` (3.12 does).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testworld.node import cgroups, prereqs
from testworld.wait import poll_until

NODE_IP = "10.88.0.1"
NODE_CIDR = f"{NODE_IP}/24"
BRIDGE = "rpbr0"
#: The bridge's own, fixed MAC (locally administered).  A Linux bridge without one takes
#: the lowest MAC of its ports, so it changed whenever a pod came or went; pods kept the
#: old MAC for 10.88.0.1 in their neighbour cache and their packets to the node (the fake
#: GitHub) were dropped for ~20 s, until the entry was re-resolved.  Seen as a runner's
#: job report or session close taking 20 s right after another pod started.
BRIDGE_MAC = "02:72:70:00:00:01"
#: Set inside the seal; the node refuses to start anywhere else.
#: One per machine, like the node's cgroup subtree it guards (``cgroups``): not under the
#: binary cache, which another ``RUNNERPOOL_ENVTEST_CACHE`` would move, letting a second
#: run's cgroup clean-up kill the first run's pods.
NODE_LOCK = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "runnerpool-test-node.lock"
SEALED_ENV = "RUNNERPOOL_SEALED"
#: The host's sysctl values as read before the seal, JSON, for the test that compares them.
HOST_SYSCTLS_ENV = "RUNNERPOOL_HOST_SYSCTLS"
#: A procfs of its own, without the bind mounts, where the host's real values show.
HOST_PROC = Path("/run/testworld/host-proc")
#: What the kubelet sets (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables).
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
_PR_SET_PDEATHSIG = 1


class SealError(RuntimeError):
    """The sealed world cannot be made here; the message says why and what to do."""


def is_sealed() -> bool:
    return os.environ.get(SEALED_ENV) == "1"


def read_sysctls(proc: Path = Path("/proc")) -> dict[str, str]:
    return {name: (proc / "sys" / name).read_text().strip() for name in KUBELET_SYSCTLS}


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies, whatever the reason."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def _run(*cmd: str) -> None:
    done = subprocess.run(list(cmd), check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SealError(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}")


def _host_mounts_left() -> list[str]:
    """Node mounts that must never be on the host (they would be if the seal leaked)."""
    left = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4]
        if mount_point.startswith(("/var/lib/kubelet", "/run/containerd", "/var/lib/containerd")):
            left.append(mount_point)
    return left


def run_sealed(command: list[str]) -> int:
    """Run ``command`` in the sealed world; returns its exit code (or 1 if the seal failed)."""
    missing = prereqs.problems()
    if missing:
        raise SealError("the test node cannot start on this machine:\n  - " + "\n  - ".join(missing))
    before = read_sysctls()
    with NODE_LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another run's test node to finish ({NODE_LOCK})", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        leftovers = cgroups.members()
        left = cgroups.remove()
        if leftovers:
            print(
                f"killed {len(leftovers)} survivor(s) of an earlier run: {sorted(leftovers)}", file=sys.stderr
            )
        if left:
            raise SealError(f"cgroup directories of an earlier run cannot be removed: {left}")
        unshare = prereqs.which("unshare") or "unshare"
        inner = [sys.executable, "-m", "testworld.node.seal", "--inner", "--", *command]
        env = {**os.environ, HOST_SYSCTLS_ENV: json.dumps(before)}
        # The terminal's Ctrl-C reaches the command itself; this process only waits.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            child = subprocess.Popen(
                [
                    unshare,
                    "--net",
                    "--mount",
                    "--propagation",
                    "private",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    "--kill-child",
                    "--",
                    *inner,
                ],
                env=env,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            )
            _announce(child.pid)
            code = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
            left = cgroups.remove()
        problems = []
        after = read_sysctls()
        changed = {k: f"{before[k]} -> {after[k]}" for k in before if before[k] != after[k]}
        if changed:
            problems.append(f"host sysctls changed during the run: {changed}")
        if left:
            problems.append(f"cgroup directories left: {left}")
        mounts = _host_mounts_left()
        if mounts:
            problems.append(f"node mounts left on the host: {mounts}")
        if problems:
            print("sealed run left traces on the host:\n  - " + "\n  - ".join(problems), file=sys.stderr)
            return code or 1
        return code


def _announce(unshare_pid: int) -> None:
    """Say how to enter the world by hand: PID 1 of its namespaces is unshare's only child."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children")

    def inner_pid() -> str:
        try:
            return children.read_text().strip()
        except OSError:
            return ""

    if poll_until(lambda: bool(inner_pid()), 5.0, 0.01):
        pid = inner_pid().split()[0]
        print(
            f"sealed world: PID {pid} (enter with `nsenter --target {pid} --net --mount --pid`)",
            file=sys.stderr,
        )


def _inner_setup() -> None:
    """Inside the new namespaces, before the command: network, filesystems, sysctls."""
    ip = prereqs.which("ip") or "ip"
    _run(ip, "link", "set", "lo", "up")
    _run(ip, "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
    _run(ip, "addr", "add", NODE_CIDR, "dev", BRIDGE)
    _run(ip, "link", "set", BRIDGE, "up")
    for folder in ("/run", "/var/lib", "/var/log"):
        _run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", folder)
    HOST_PROC.mkdir(parents=True)
    _run("mount", "-t", "proc", "-o", "ro,nosuid,nodev,noexec", "proc", str(HOST_PROC))
    values = Path("/run/testworld/sysctl")
    values.mkdir(parents=True)
    for name, value in KUBELET_SYSCTLS.items():
        stand_in = values / name.replace("/", ".")
        stand_in.write_text(value + "\n")
        _run("mount", "--bind", str(stand_in), f"/proc/sys/{name}")
    kube_cache = Path("/run/testworld/kubecache")
    kube_cache.mkdir(parents=True)
    os.environ["KUBECACHEDIR"] = str(kube_cache)
    os.environ[SEALED_ENV] = "1"


def _inner(command: list[str]) -> int:
    """PID 1 of the namespace: set up, run the command, reap orphans until it exits."""
    try:
        _inner_setup()
    except (SealError, OSError) as err:
        print(f"error: setting up the sealed world failed: {err}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child = subprocess.Popen(command, preexec_fn=_default_sigint)  # noqa: PLW1509
    while True:
        pid, status = os.wait()
        if pid == child.pid:
            # Leaving kills everything still in the namespace (the kernel does it for PID 1).
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str]) -> int:
    inner = argv[:1] == ["--inner"]
    args = argv[1:] if inner else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m testworld.node.seal -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    if inner:
        return _inner(args)
    started = time.monotonic()
    try:
        code = run_sealed(args)
    except SealError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"sealed run finished in {time.monotonic() - started:.0f}s, exit code {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
