"""The full webhook path for ``bench.webhook_load``: a real API server under the receiver.

``bench.webhook_load`` first measured the receiver over a no-op Kube (a PATCH answered at
once): what a delivery costs before its write. GitHub and its users wait for the write too,
so the headline figure is this one: the receiver as its component builds it
(``webhook_component.ReceiverCache``, a RunnerPool informer, and ``DemandWriter`` over a real
``Kube``), over a kube-apiserver and etcd started here (``testworld.envtest``), with the
bench's pools created in it. Every delivery is then signed, verified, parsed, written into
its pools' ``status.demand`` by a merge patch and answered 200 once written.

No operator runs: the receiver is its own Deployment (``--component webhook-receiver``), and
the operator's reconciles of the pools the writes move are the operator's CPU, measured by
``bench.run``. The API server and etcd share this machine's cores with the receiver, as in
a one-node cluster; only the receiver's process CPU is counted per delivery.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from bench.webhook_cpu import API_URL, NAMESPACES
from runnerpool import api
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.webhook_component import ReceiverCache
from testworld.demo import install_crd
from testworld.envtest.controlplane import ControlPlane

__all__ = ["CountingKube", "cpu_seconds", "full_path"]


class CountingKube(Kube):
    """A real ``Kube`` that counts its requests by kind, for the API requests per delivery."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, what: str) -> None:
        with self._lock:
            self.requests[what] += 1

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        self._count("get")
        return super().get(resource, namespace, name)

    def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._count("patch")
        try:
            return super().patch(*args, **kwargs)
        except ApiException as err:
            self._count(f"patch_{err.status}")
            raise


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of ``pids`` so far (the API server and etcd)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _api_client(kubeconfig: Path) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32  # one per webhook thread and then some
    return client.ApiClient(configuration)


def _create_pools(api_client: client.ApiClient, pools: list[dict[str, Any]]) -> None:
    """The pools as users create them (spec only); their status is the operator's, absent here."""
    core = client.CoreV1Api(api_client)
    for number in range(NAMESPACES):
        core.create_namespace({"metadata": {"name": f"team-{number}"}})
    custom = client.CustomObjectsApi(api_client)
    for pool in pools:
        meta = pool["metadata"]
        body = {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": pool["spec"],
        }
        custom.create_namespaced_custom_object(api.GROUP, api.VERSION, meta["namespace"], api.PLURAL, body)


@contextlib.contextmanager
def full_path(pools: list[dict[str, Any]]) -> Any:
    """Yields ``(cache, kube, pids)`` over a fresh API server holding ``pools`` (``pids``: the
    API server's and etcd's); stops it all after."""
    with contextlib.ExitStack() as stack:
        plane = ControlPlane(with_controller_manager=False)  # no controller acts on RunnerPools
        stack.callback(plane.stop)
        plane.start()
        api_client = _api_client(plane.kubeconfig)
        stack.callback(api_client.close)
        install_crd(api_client)
        _create_pools(api_client, pools)
        cache = ReceiverCache(api_client, None, default_api_url=API_URL)
        cache.start()
        stack.callback(cache.stop)
        if not cache.wait_for_sync(60):
            raise RuntimeError("the receiver's pool cache did not sync in 60 s")
        deadline = time.monotonic() + 60
        while len(cache.autoscaling_pools()) < sum(1 for p in pools if "autoscaling" in p["spec"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the receiver's pool cache did not get every pool in 60 s")
            time.sleep(0.1)
        yield cache, CountingKube(api_client), plane.pids
