"""deploy/optional/busy-runner-deletion on a real API server: a busy runner pod cannot be deleted
with a grace period shorter than its own (which would kill its job), an idle one can, and the
documented escape hatch lets a busy one go.

The pods never run: they are bound to a node that does not exist (the API server deletes an
unscheduled pod at once, whatever grace period is asked for, so only a bound pod has a grace
period to shorten). What is tested is the API server's answer to each DELETE.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import naming
from runnerpool.runners import lifecycle
from runnerpool.runners.manager import KubePods
from runnerpool.runtime.kube import Kube
from tests.helpers import wait_for
from testworld.envtest import assets
from testworld.envtest.controlplane import ControlPlane

POLICY = Path(__file__).resolve().parent.parent / "deploy" / "optional" / "busy-runner-deletion"
ESCAPE_ANNOTATION = "runnerpool.dev/allow-short-grace"


def _kubectl(control_plane: ControlPlane, *args: str) -> None:
    kubectl = assets.ensure_binaries(("kubectl",))["kubectl"]
    done = subprocess.run(
        [str(kubectl), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _pod(core: client.CoreV1Api, namespace: str, name: str, *, busy: bool, **annotations: str) -> str:
    labels = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: "pool"}
    if busy:
        labels[naming.BUSY_LABEL] = naming.BUSY_VALUE
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {
                "nodeName": "nowhere",
                "terminationGracePeriodSeconds": 3690,
                "containers": [{"name": naming.RUNNER_CONTAINER, "image": "runner:1"}],
            },
        },
    )
    return name


def _delete(
    core: client.CoreV1Api, namespace: str, name: str, grace: int | None, dry_run: bool = False
) -> None:
    options: dict[str, Any] = {} if grace is None else {"grace_period_seconds": grace}
    if dry_run:
        options["dry_run"] = "All"
    core.delete_namespaced_pod(name, namespace, **options)


def _refusal(core: client.CoreV1Api, namespace: str, name: str, grace: int) -> ApiException:
    with pytest.raises(ApiException) as refused:
        _delete(core, namespace, name, grace)
    return refused.value


@pytest.fixture
def policy(control_plane: ControlPlane, api_client: client.ApiClient, namespace: str) -> Iterator[None]:
    """The optional policy installed as a user would, and removed again for the other tests."""
    _kubectl(control_plane, "apply", "-k", str(POLICY))
    try:
        core = client.CoreV1Api(api_client)
        probe = _pod(core, namespace, "probe", busy=True)

        def enforced() -> bool:
            try:
                _delete(core, namespace, probe, 0, dry_run=True)
            except ApiException as err:
                return err.status == 403
            return False

        # The API server compiles and binds a new policy shortly after it is created.
        wait_for(enforced, 30.0, 0.2, "the policy to be enforced")
        yield
    finally:
        _kubectl(control_plane, "delete", "-k", str(POLICY), "--ignore-not-found")


def test_a_busy_runner_pod_cannot_be_deleted_with_a_shorter_grace_period(
    api_client: client.ApiClient, namespace: str, policy: None
) -> None:
    core = client.CoreV1Api(api_client)
    busy = _pod(core, namespace, "busy", busy=True)

    for grace in (0, 1, 3689):
        refused = _refusal(core, namespace, busy, grace)
        assert refused.status == 403, refused.body
        assert "is running a GitHub Actions job" in str(refused.body)
        assert f"a grace period of {grace}s would kill it" in str(refused.body)
        assert ESCAPE_ANNOTATION in str(refused.body)
    core.read_namespaced_pod(busy, namespace)  # still there

    # Its own grace period (the default deletion) is fine: the job finishes first.
    _delete(core, namespace, busy, None)
    assert core.read_namespaced_pod(busy, namespace).metadata.deletion_grace_period_seconds == 3690


def test_idle_pods_and_the_escape_hatch_are_let_through(
    api_client: client.ApiClient, namespace: str, policy: None
) -> None:
    core = client.CoreV1Api(api_client)
    idle = _pod(core, namespace, "idle", busy=False)
    _delete(core, namespace, idle, 0)

    hatch = _pod(core, namespace, "hatch", busy=True)
    assert _refusal(core, namespace, hatch, 0).status == 403
    core.patch_namespaced_pod(hatch, namespace, {"metadata": {"annotations": {ESCAPE_ANNOTATION: "true"}}})
    _delete(core, namespace, hatch, 0)

    # Grace 0: both are gone at once.
    for name in (idle, hatch):
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_pod(name, namespace)
        assert gone.value.status == 404


def test_the_pod_garbage_collector_may_still_force_delete_a_busy_pod(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str, policy: None
) -> None:
    """It removes pods of nodes that are gone with grace 0 (the kubelet, in group system:nodes,
    removes every pod it stopped that way): the policy must not keep them for ever."""
    core = client.CoreV1Api(api_client)
    busy = _pod(core, namespace, "orphan", busy=True)
    collector = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    collector.set_default_header(
        "Impersonate-User", "system:serviceaccount:kube-system:pod-garbage-collector"
    )
    try:
        _delete(client.CoreV1Api(collector), namespace, busy, 0)
    finally:
        collector.close()
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod(busy, namespace)
    assert gone.value.status == 404


def test_the_operator_may_still_hurry_a_marked_pod_whose_runner_is_done(
    api_client: client.ApiClient, namespace: str, policy: None
) -> None:
    """A busy-marked pod deleted from outside (``kubectl delete pod``, its namespace going)
    keeps its mark; when its runner, idle or gone on GitHub, outlives its stop, the runner
    managers delete it again with a short grace (``lifecycle.hurried_grace``). The policy
    refused that every time: the pod held its node for its whole hour of grace."""
    core = client.CoreV1Api(api_client)
    name = _pod(core, namespace, "done", busy=True)
    _delete(core, namespace, name, None)  # deleted with its own grace: the job may finish
    pod = core.read_namespaced_pod(name, namespace)
    view = lifecycle.PodView.of(api_client.sanitize_for_serialization(pod))
    assert view.busy_marked and view.deleting
    unmark = lifecycle.BusyMark(view, False).patch()

    hurried = KubePods(Kube(api_client)).hurry_pod(
        namespace, name, view.uid, view.resource_version, 90, unmark=unmark
    )

    assert hurried, "refused, or taken for a pod changed since the decision"
    after = core.read_namespaced_pod(name, namespace)
    assert after.metadata.deletion_grace_period_seconds == 90
    assert naming.BUSY_LABEL not in (after.metadata.labels or {})
