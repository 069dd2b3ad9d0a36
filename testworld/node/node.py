"""One real Kubernetes node: containerd + runc + CNI bridge + kubelet, joined to a ControlPlane.

It runs only inside the sealed world (``testworld.node.seal``): its IP is the bridge's
``10.88.0.1``, its state lives on the seal's tmpfs (``/run``, ``/var/lib``), and the
kubelet finds the sysctls it wants already set.  Settings are the ones
``shared/real-node.md`` found necessary on this kind of machine (cgroup v1, root
without CAP_SYS_RESOURCE, no registry); each is commented where it is set.

The node carries the taint ``NODE_TAINT``: only pods that tolerate it (the node tests
give their pools that toleration) run on it, so the many tests that only want
Pending pods from the control plane are never disturbed by a kubelet.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from testworld.envtest.controlplane import Component, ComponentGroup, ControlPlane, ControlPlaneError
from testworld.node import cgroups, images, seal
from testworld.node.assets import NodeBinaries, ensure_node_binaries
from testworld.wait import poll_until

NODE_NAME = "runnerpool-node"
NODE_TAINT = {"key": "runnerpool.test/node", "value": "true", "effect": "NoSchedule"}
#: What a pod spec adds to run on the test node.
NODE_TOLERATION = {"key": NODE_TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
POD_SUBNET = "10.88.0.0/24"
_STATE = Path("/run/testworld/node")
_CONTAINERD_SOCKET = Path("/run/containerd/containerd.sock")
_KUBELET_HEALTHZ_PORT = 10248


class NodeError(ControlPlaneError):
    """The node did not start; the message says which part and carries its log tail."""


@dataclass
class Node(ComponentGroup):
    """``with Node(plane) as node:`` until the Node object is Ready; ``node.runner_image`` to use."""

    plane: ControlPlane
    ready_timeout: float = 60.0
    binaries: NodeBinaries = field(init=False)
    pause_image: images.Image = field(init=False)
    runner_image: images.Image = field(init=False)
    started_in: float = field(init=False, default=0.0)
    _processes: list[Component] = field(init=False, default_factory=list)

    def start(self) -> None:
        if not seal.is_sealed():
            raise NodeError(
                "the test node runs only inside the sealed world: run `make test`, or "
                "`python -m testworld.node.seal -- COMMAND` (a kubelet outside it would rewrite "
                "the host's sysctls and use the host's network)"
            )
        self.binaries = ensure_node_binaries()
        self.pause_image = images.pause_image()
        self.runner_image = images.runner_image()
        started = time.monotonic()
        try:
            cgroups.create()
            _STATE.mkdir(parents=True, exist_ok=True)
            self._start_containerd()
            for image in (self.pause_image, self.runner_image):
                self.import_image(image)
            self._start_kubelet()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started

    def import_image(self, image: images.Image) -> None:
        """Make ``image`` available to pods (nothing can be pulled): e.g. the operator's own."""
        self._ctr("images", "import", "--platform", "linux/amd64", str(image.archive))

    def signal_container(self, container_id: str, signal: str) -> None:
        """Send ``signal`` (e.g. ``SIGTERM``) to a container's PID 1 through containerd.

        ``container_id`` as a pod's status shows it (``containerd://<id>``). This is how the
        kubelet stops a container (CRI StopContainer: the stop signal, SIGKILL after the
        grace period), without the kubelet: what a node shutdown does to a pod's containers
        where the kubelet's shutdown manager cannot run (see docs/busy-runners.md).
        """
        self._ctr("task", "kill", "--signal", signal, container_id.removeprefix("containerd://"))

    def stop(self) -> None:
        """The kubelet first (so nothing is restarted), then all of the node's cgroup subtree.

        containerd, its shims and every container are members of the subtree, so they go
        together, found by cgroup membership; then each started process is reaped.
        """
        for process in self._processes:
            if process.name == "kubelet":
                process.stop()
        left = cgroups.remove()
        for process in self._processes:
            process.stop()
        self._processes.clear()
        if left:
            raise NodeError(f"the node's cgroup directories could not be removed: {left}")

    # -- containerd ----------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Component:
        process = Component(name, args, self.plane.workdir / f"{name}.log", env=env)
        self._processes.append(process)
        process.start()
        if process.pid is not None:
            cgroups.join_daemons(process.pid)
        return process

    def _path(self) -> str:
        return os.pathsep.join(
            [str(self.binaries.containerd_dir), str(self.binaries.runc.parent), os.environ.get("PATH", "")]
        )

    def _containerd_config(self) -> str:
        cni_conf = _STATE / "cni"
        cni_conf.mkdir(exist_ok=True)
        (cni_conf / "10-runnerpool.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        runc = self.binaries.runc
        return f"""version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
# Nothing from the host's /etc/containerd.
imports = []

[grpc]
  address = "{_CONTAINERD_SOCKET}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Built here (pause.c); nothing can be pulled.
    sandbox = "{self.pause_image.reference}"

[plugins."io.containerd.cri.v1.runtime"]
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "runc create failed: can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      disable_pause_image_pull = true
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{self.binaries.cni_dir}"]
    conf_dir = "{cni_conf}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def _cni_config(self) -> dict[str, Any]:
        """The seal's bridge, no gateway, no masquerade, no routes: pods reach 10.88.0.1 only."""
        return {
            "cniVersion": "1.0.0",
            "name": "runnerpool-testworld",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": seal.BRIDGE,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [
                            [{"subnet": POD_SUBNET, "rangeStart": "10.88.0.10", "gateway": seal.NODE_IP}]
                        ],
                        "routes": [],
                        "dataDir": "/run/testworld/cni-ipam",
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _start_containerd(self) -> None:
        config_file = _STATE / "containerd.toml"
        config_file.write_text(self._containerd_config())
        process = self._spawn(
            "containerd",
            [str(self.binaries.containerd), "--config", str(config_file), "--log-level", "info"],
            env={**os.environ, "PATH": self._path()},
        )
        deadline = time.monotonic() + self.ready_timeout

        def answers() -> bool:
            process.check_alive()
            return _CONTAINERD_SOCKET.exists() and self._ctr_ok("version")

        if not poll_until(answers, max(0.0, deadline - time.monotonic()), 0.05):
            raise process.fail("did not answer on its socket")

    def _ctr_command(self, *args: str) -> list[str]:
        return [str(self.binaries.ctr), "--address", str(_CONTAINERD_SOCKET), "-n", "k8s.io", *args]

    def _ctr_ok(self, *args: str) -> bool:
        return subprocess.run(self._ctr_command(*args), check=False, capture_output=True).returncode == 0

    def _ctr(self, *args: str) -> None:
        done = subprocess.run(self._ctr_command(*args), check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {done.stderr.strip()}")

    # -- kubelet ---------------------------------------------------------------------------

    def _kubelet_config(self) -> dict[str, Any]:
        resolv = _STATE / "resolv.conf"
        # Pods get no nameserver: a lookup fails at once instead of trying the host's.
        resolv.write_text("# the sealed test world has no DNS\n")
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # v1.35+ refuses cgroup v1 unless told; this machine kind has cgroup v1.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{cgroups.CGROUP_ROOT}",
            "failSwapOn": False,
            "readOnlyPort": 0,
            "address": seal.NODE_IP,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": _KUBELET_HEALTHZ_PORT,
            # Reachable only inside the sealed namespace.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{_CONTAINERD_SOCKET}",
            "resolvConf": str(resolv),
            "registerWithTaints": [NODE_TAINT],
            # The disk is shared with everything else on the machine: evict only when nearly full.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            # Imported images cannot be pulled again: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s",
            # A changed Secret reaches a running pod in ~15 s.
            "syncFrequency": "10s",
            "serializeImagePulls": False,
            "maxPods": 110,
            # A runtime call that hangs (twice in CI: a runner container still "running" minutes
            # after its SIGKILL was due, the kubelet's kill never returning) is given up and tried
            # again after this, not after the default 2 minutes. Pulls, logs and exec are exempt.
            "runtimeRequestTimeout": "45s",
        }

    def _start_kubelet(self) -> None:
        config_file = _STATE / "kubelet.yaml"
        config_file.write_text(yaml.safe_dump(self._kubelet_config()))
        process = self._spawn(
            "kubelet",
            [
                str(self.binaries.kubelet),
                f"--config={config_file}",
                # system:masters: fine here, there is no NodeRestriction to satisfy.
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={seal.NODE_IP}",
                f"--cert-dir={_STATE / 'kubelet-pki'}",
                # 2: the pod lifecycle (SyncLoop events, "Killing container"), which a pod that
                # outlives its deletion is explained by.
                "--v=2",
            ],
            env={**os.environ, "PATH": self._path()},
        )
        self._kubelet = process

    def _wait_ready(self) -> None:
        api = config.new_client_from_config(config_file=str(self.plane.kubeconfig))
        core = client.CoreV1Api(api)

        def ready() -> bool:
            self._kubelet.check_alive()
            try:
                node = core.read_node(NODE_NAME)
            except ApiException as err:
                if err.status == 404:
                    return False
                raise
            conditions = node.status.conditions or []
            return any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
                t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or []
            )

        try:
            if not poll_until(ready, self.ready_timeout, 0.1):
                raise self._kubelet.fail(f"node {NODE_NAME} was not Ready within {self.ready_timeout:.0f}s")
        finally:
            with contextlib.suppress(Exception):
                api.close()
