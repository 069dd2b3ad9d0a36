"""The sealed world: nothing can leave the machine, and the host's sysctls stay as they were.

No test here sends a packet anywhere: that there is no route out is read from the routing
tables, and name lookups fail before any packet (no nameserver is reachable).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tests.helpers import wait_for
from testworld.node import cgroups, seal
from testworld.node.node import NODE_TOLERATION, Node

LOOKUP_LIMIT = 1.0


def _default_routes(route_table: str) -> list[str]:
    """Lines of /proc/net/route whose destination is 0.0.0.0 (a way out)."""
    return [line for line in route_table.splitlines()[1:] if line.split()[1] == "00000000"]


def test_the_test_process_has_no_way_out_and_lookups_fail_at_once(node: Node) -> None:
    assert _default_routes(Path("/proc/net/route").read_text()) == []
    started = time.monotonic()
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("api.github.com", 443)
    assert time.monotonic() - started < LOOKUP_LIMIT


def test_a_pod_has_no_way_out_and_its_lookups_fail_at_once(
    api_client: client.ApiClient, namespace: str, node: Node
) -> None:
    core = client.CoreV1Api(api_client)
    name = f"probe-{uuid.uuid4().hex[:6]}"
    script = (
        "cat /proc/net/route; s=$(date +%s%N); "
        "curl -sS --max-time 20 http://api.github.com/ 2>&1; echo curl=$?; "
        "echo ms=$(( ($(date +%s%N) - s) / 1000000 ))"
    )
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": [NODE_TOLERATION],
                "containers": [
                    {"name": "probe", "image": node.runner_image.reference, "command": ["bash", "-c", script]}
                ],
            },
        },
    )
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        60.0,
        message=f"pod {name} to finish",
    )
    log = core.read_namespaced_pod_log(name, namespace)
    assert _default_routes(log.split("\ncurl")[0]) == [], log
    assert "Could not resolve host: api.github.com" in log and "curl=6" in log, log
    elapsed_ms = int(log.rsplit("ms=", 1)[1].split()[0])
    assert elapsed_ms < LOOKUP_LIMIT * 1000, log


def _bridge_mac() -> str:
    shown = subprocess.run(
        ["ip", "-o", "link", "show", seal.BRIDGE], capture_output=True, text=True, check=True
    )
    return shown.stdout.split("link/ether ", 1)[1].split()[0]


def test_the_node_address_keeps_its_mac_when_a_pod_joins_the_bridge(node: Node) -> None:
    """Pods cache 10.88.0.1's MAC; if it changed as pods came and went, their packets to the
    node were dropped for ~20 s (a runner's job report lost, a session close 20 s late)."""
    port = f"rpt{uuid.uuid4().hex[:8]}"
    # The lowest MAC a port can have: a bridge that follows its ports would take it.
    subprocess.run(
        [
            "ip",
            "link",
            "add",
            port,
            "address",
            "02:00:00:00:00:01",
            "type",
            "veth",
            "peer",
            "name",
            port + "p",
        ],
        check=True,
    )
    try:
        subprocess.run(["ip", "link", "set", port, "master", seal.BRIDGE, "up"], check=True)
        assert _bridge_mac() == seal.BRIDGE_MAC
    finally:
        subprocess.run(["ip", "link", "del", port], check=True)
    assert _bridge_mac() == seal.BRIDGE_MAC


def test_the_host_sysctls_the_kubelet_sets_are_untouched(node: Node) -> None:
    before = json.loads(os.environ[seal.HOST_SYSCTLS_ENV])
    # The kubelet has started and set its sysctls: it found them in the seal's stand-ins ...
    assert seal.read_sysctls() == seal.KUBELET_SYSCTLS
    # ... while the host's own values, seen through a procfs without the stand-ins, are unchanged.
    assert seal.read_sysctls(seal.HOST_PROC) == before


def test_a_running_containers_processes_are_read_from_the_kernel(
    api_client: client.ApiClient, namespace: str, node: Node
) -> None:
    """What the soak shows of a pod that outlives its grace: its container's freezer state and
    its processes' states, found by the container's id."""
    core = client.CoreV1Api(api_client)
    name = f"sleeper-{uuid.uuid4().hex[:6]}"
    container = {"name": "sleep", "image": node.runner_image.reference, "command": ["sleep", "600"]}
    spec = {"terminationGracePeriodSeconds": 0, "tolerations": [NODE_TOLERATION], "containers": [container]}
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})

    def running_container() -> str | None:
        statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
        return statuses[0].container_id if statuses and statuses[0].state.running else None

    container_id = wait_for(running_container, 60.0, message=f"pod {name} to run")

    said = cgroups.container_state(container_id.rpartition("://")[2])

    assert said.startswith("freezer THAWED; ") and "(sleep, wchan " in said, said
    assert cgroups.container_state("no-such-container") == "no freezer cgroup"
