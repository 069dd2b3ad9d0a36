"""Shared fixtures: one real control plane per test session, a fresh namespace per test.

A control plane that cannot start fails the session with the component's log
tail; it is never skipped.  The control plane always has a scheduler and the
node controllers; the real node (``node``) starts with the first test that asks
for it, inside the sealed world that ``make test`` runs pytest in, and fails (never
skips) every test that needs it when it cannot start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool.github import transport
from runnerpool.runtime.kube import Kube
from tests.helpers import process_alive, wait_for
from testworld.envtest.controlplane import ComponentGroup, ControlPlane
from testworld.envtest.serviceaccount import enable_namespace, operator_kubeconfig
from testworld.node.node import Node

REPO_ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = REPO_ROOT / "crds" / "runnerpool.yaml"


@pytest.fixture(autouse=True)
def _fresh_slow_host_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no host or tenant held slow: the gate is process-wide, and a
    tenant one test timed out (namespaces like ``ns`` recur) would make the next test's calls
    in that namespace go one at a time."""
    monkeypatch.setattr(transport, "HOSTS", transport.SlowHosts())


def _stop_and_check(group: ComponentGroup, what: str) -> None:
    """Stop ``group``; none of its processes may outlive that."""
    pids = group.pids
    group.stop()
    leftovers = [pid for pid in pids if process_alive(pid)]
    assert not leftovers, f"{what} processes still running after stop: {leftovers}"


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(for_node=True)
    plane.start()
    try:
        yield plane
    finally:
        _stop_and_check(plane, "control plane")
        assert not plane.workdir.exists(), f"control plane folder not removed: {plane.workdir}"


@pytest.fixture(scope="session")
def node(control_plane: ControlPlane) -> Iterator[Node]:
    """The test node: kubelet + containerd + runc, Ready, tainted so only node tests' pods land on it."""
    started = Node(control_plane)
    started.start()
    try:
        yield started
    finally:
        _stop_and_check(started, "node")


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    yield api
    api.close()


@pytest.fixture
def operator_kube(control_plane: ControlPlane) -> Iterator[Kube]:
    """The operator's own client: logged in as deploy/'s ServiceAccount, with its permissions."""
    api = config.new_client_from_config(config_file=str(operator_kubeconfig(control_plane)))
    yield Kube(api)
    api.close()


def _fresh_namespace(api_client: client.ApiClient, *, enabled: bool = True) -> Iterator[str]:
    """A new namespace, deleted after the test; ``enabled``: the operator may make runners
    there (the RoleBinding a platform team makes, ``enable_namespace``)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    if enabled:
        enable_namespace(api_client, name)
    yield name
    try:
        core.delete_namespace(name)
    except ApiException as err:  # pragma: no cover - only on a broken test
        if err.status != 404:
            raise


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    yield from _fresh_namespace(api_client)


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A second tenant's namespace."""
    yield from _fresh_namespace(api_client)


@pytest.fixture
def disabled_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A namespace the platform team did not enable: the operator may not write there."""
    yield from _fresh_namespace(api_client, enabled=False)


@pytest.fixture(scope="session")
def runnerpool_crd(api_client: client.ApiClient) -> dict:  # type: ignore[type-arg]
    """Install the generated CRD and wait until the API server serves it."""
    manifest = yaml.safe_load(CRD_FILE.read_text())
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(manifest)
    except ApiException as err:
        if err.status != 409:
            raise
    name = manifest["metadata"]["name"]

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, message=f"CRD {name} to be Established")
    group, plural = manifest["spec"]["group"], manifest["spec"]["names"]["plural"]
    custom = client.CustomObjectsApi(api_client)
    # Discovery can lag the Established condition by a moment.
    wait_for(lambda: _served(custom, group, plural), message=f"{plural}.{group} to be served")
    return manifest  # type: ignore[no-any-return]


def _served(custom: client.CustomObjectsApi, group: str, plural: str) -> bool:
    try:
        custom.list_cluster_custom_object(group, "v1alpha1", plural, limit=1)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
