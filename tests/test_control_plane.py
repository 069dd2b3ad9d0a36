"""The test harness is a real API server: it validates, watches, and honours finalizers."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.helpers import process_alive, wait_for
from testworld.envtest.controlplane import Component, ControlPlane, ControlPlaneError
from testworld.ports import free_port


def _configmap(name: str, **extra: object) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, **extra), data={"k": "v"})


def test_server_side_validation_rejects_an_invalid_name(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(namespace, _configmap("Not_A_Valid_Name"))
    assert err.value.status == 422
    assert "RFC 1123" in err.value.body


def test_a_merge_patch_that_changes_nothing_keeps_the_resource_version(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    created = core.create_namespaced_config_map(namespace, _configmap("same"))
    patched = core.patch_namespaced_config_map("same", namespace, {"data": {"k": "v"}})
    assert patched.metadata.resource_version == created.metadata.resource_version
    changed = core.patch_namespaced_config_map("same", namespace, {"data": {"k": "w"}})
    assert changed.metadata.resource_version != created.metadata.resource_version


def test_a_watch_sees_a_change(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []
    watching = watch.Watch()

    def consume() -> None:
        for event in watching.stream(
            core.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=30
        ):
            # The controller manager publishes kube-root-ca.crt into every new namespace, at any
            # moment: only the test's own ConfigMap counts.
            if event["object"].metadata.name == "watched":
                seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "MODIFIED":
                watching.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    core.create_namespaced_config_map(namespace, _configmap("watched"))
    core.patch_namespaced_config_map("watched", namespace, {"data": {"k": "changed"}})
    thread.join(timeout=30)
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched")]


def test_a_finalizer_holds_the_object_until_removed(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, _configmap("held", finalizers=["example.com/hold"]))
    core.delete_namespaced_config_map("held", namespace)
    held = core.read_namespaced_config_map("held", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})

    def gone() -> bool:
        try:
            core.read_namespaced_config_map("held", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, message="the configmap to disappear once its finalizer is removed")


def test_garbage_collection_deletes_owned_objects(api_client: client.ApiClient, namespace: str) -> None:
    """The controller manager runs, so owner references behave as in a cluster."""
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, _configmap("owner"))
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(namespace, _configmap("owned", owner_references=[ref]))
    core.delete_namespaced_config_map("owner", namespace)

    def owned_gone() -> bool:
        names = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
        return "owned" not in names

    wait_for(owned_gone, timeout=60, message="garbage collection of the owned configmap")


def test_stop_leaves_no_process_and_no_folder() -> None:
    plane = ControlPlane(with_controller_manager=False)
    plane.start()
    pids, folder = plane.pids, plane.workdir
    assert len(pids) == 2 and all(process_alive(pid) for pid in pids)
    plane.stop()
    assert not any(process_alive(pid) for pid in pids)
    assert not folder.exists()


def test_a_failing_component_reports_its_log_tail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    process = Component(
        "broken",
        ["/bin/sh", "-c", "echo 'flag provided but not defined: --nope'; exit 3"],
        tmp_path / "broken.log",
    )
    process.start()
    assert process.popen is not None
    process.popen.wait(timeout=10)
    with pytest.raises(ControlPlaneError, match="flag provided but not defined") as err:
        process.check_alive()
    assert "exited with code 3" in str(err.value)


def test_free_ports_are_never_handed_out_twice() -> None:
    """The kernel gives a port that was just closed again within about a hundred binds: an
    operator given it for both its metrics and its probes could not start (a CI failure)."""
    ports = [free_port() for _ in range(500)]

    assert len(set(ports)) == len(ports)
