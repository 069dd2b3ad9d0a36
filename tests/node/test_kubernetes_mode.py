"""``containerMode: kubernetes`` on a real node: the job runs in pods the runner makes itself.

The pool's runner pod gets the container hooks' settings, its own ServiceAccount and that
account's token; the runner stand-in runs the job through the stand-in hooks
(testworld/runner_image/worker.sh, k8s-hook.sh), which follow the hooks' contract: before each
command they ask the API server whether the account holds every permission the real hooks
require, then create the job pod, a step pod whose environment comes from a Secret, read its
log, and clean up, all with the runner's token over the in-cluster API. The API server's audit
log says who made each object; the job's conclusion on the fake GitHub says whether the step ran.

In the sealed world the ``kubernetes`` Service's ClusterIP leads nowhere (no kube-proxy), so
the pool points the in-cluster client at the Service's endpoint, the API server on the node's
bridge, with ``KUBERNETES_SERVICE_HOST``/``_PORT`` in ``spec.env``, as the install tests do.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, naming
from runnerpool.hook_access import HOOK_RULES, RBAC_GROUP, RUNNER_HOOKS_CLUSTER_ROLE
from tests.e2e.runners import REPO, get_pool
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import (
    START_TIMEOUT,
    refused_eviction,
    registered_pods,
    wait_budget_counts,
    wait_done,
)
from tests.pools import LiveReader, create_pool
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.fakegithub import FakeGitHub
from testworld.node.node import Node
from testworld.simulator import OperatorProcess

JOB_SECONDS = 2.0
#: Long enough for the test to find the job's pods running and try to evict them.
LONG_JOB_SECONDS = 30.0


def _pool(control_plane: ControlPlane, node: Node) -> dict[str, Any]:
    assert control_plane.pod_address is not None, "the node test runs sealed"
    env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": control_plane.pod_address},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(control_plane.port)},
        # The workflow's `container:`: an image the node has.
        {"name": "STANDIN_JOB_CONTAINER", "value": node.runner_image.reference},
    ]
    return node_pool("km", containerMode=api.KUBERNETES_MODE, env=env)


def _requests_as(control_plane: ControlPlane, user: str, since: int) -> list[dict[str, Any]]:
    return [
        e
        for e in audit.complete_events(control_plane.audit_log, since)
        if e.get("user", {}).get("username") == user and "objectRef" in e
    ]


def _did(requests: list[dict[str, Any]], verb: str, resource: str, subresource: str = "") -> list[str]:
    """Names of the objects the requests ``verb``-ed (a create's name is in its objectRef)."""
    return [
        str(e["objectRef"].get("name", ""))
        for e in requests
        if e["verb"] == verb
        and e["objectRef"]["resource"] == resource
        and e["objectRef"].get("subresource", "") == subresource
        and (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "allow"
    ]


@pytest.fixture
def one_runner(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    node: Node,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
) -> tuple[client.CoreV1Api, str]:
    """The mode's pool ``km`` of one runner, registered: the core API and the runner pod's name."""
    create_pool(api_client, namespace, _pool(control_plane, node))
    core = client.CoreV1Api(api_client)
    [runner] = registered_pods(core, fake_github, namespace, "km", 1)
    return core, runner


def test_a_job_runs_in_pods_the_runner_creates_with_its_own_service_account(
    one_runner: tuple[client.CoreV1Api, str],
    control_plane: ControlPlane,
    namespace: str,
    fake_github: FakeGitHub,
    gc_follows_pools: None,
) -> None:
    core, runner = one_runner
    account = naming.runner_account_name("km")
    spec = core.read_namespaced_pod(runner, namespace).spec
    assert (spec.service_account_name, spec.automount_service_account_token) == (account, True)
    since = audit.end_of_complete_events(control_plane.audit_log)

    job_id = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "km")], JOB_SECONDS)

    done = wait_done(fake_github, [job_id])[job_id]
    log = _log(core, namespace, runner)
    assert (done["conclusion"], done["runner_name"]) == ("success", runner), log
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector=f"runner-pod={runner}").items,
        START_TIMEOUT,
        message=f"cleanup_job to leave no job pod; the runner's log:\n{log}",
    )
    user = f"system:serviceaccount:{namespace}:{account}"
    # The API server flushes its audit log when it likes: wait for cleanup_job's last delete.
    requests: list[dict[str, Any]] = wait_for(
        lambda: (
            (r := _requests_as(control_plane, user, since))
            and f"{runner}-workflow" in _did(r, "delete", "pods")
            and r
        ),
        START_TIMEOUT,
        message=f"the audit log to show the job pod's deletion; the runner's log:\n{log}",
    )
    refused = [
        e["requestURI"]
        for e in requests
        if (e.get("annotations") or {}).get("authorization.k8s.io/decision") != "allow"
    ]
    assert not refused, f"the runner's account was refused: {refused}"
    created = _did(requests, "create", "pods")
    assert f"{runner}-workflow" in created, created  # the job pod, on the runner's node
    [step] = [name for name in created if name.startswith(f"{runner}-step-")]
    # The step's output, read back (a log request is long-running: the audit log has its start too).
    assert set(_did(requests, "get", "pods", "log")) == {step}
    [secret] = _did(requests, "create", "secrets")  # the step's environment
    assert secret in _did(requests, "delete", "secrets")
    assert {f"{runner}-workflow", step} <= set(_did(requests, "delete", "pods")), log
    # The hooks' own permission check came first: a SelfSubjectAccessReview per required verb.
    reviews = _did(requests, "create", "selfsubjectaccessreviews")
    # (The stand-in plays k8s-novolume, hooks 0.8: the core-group rules; Jobs are 0.7's.)
    assert len(reviews) >= sum(len(rule["verbs"]) for rule in HOOK_RULES if rule["apiGroups"] == [""])


def test_a_drain_cannot_evict_the_pods_a_job_runs_in(
    one_runner: tuple[client.CoreV1Api, str],
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
) -> None:
    """The job runs in the hooks' pods, not in the runner pod that its busy mark protects: an
    eviction of the job pod (``kubectl drain``, a node autoscaler) failed the job."""
    core, runner = one_runner
    job_id = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "km")], LONG_JOB_SECONDS)

    def job_pods() -> list[Any]:
        """The hooks' pods of the job: the job pod and its step's."""
        selector = f"{naming.HOOKS_JOB_POD_LABEL}={runner}"
        return list(core.list_namespaced_pod(namespace, label_selector=selector).items)

    def both_running() -> list[str]:
        running = sorted(p.metadata.name for p in job_pods() if p.status.phase == "Running")
        return running if len(running) == 2 else []

    pods = wait_for(both_running, START_TIMEOUT, message="the job pod and its step's pod to run")
    wait_budget_counts(api_client, namespace, naming.JOB_PODS_DISRUPTION_BUDGET, len(pods))
    refusals = [refused_eviction(core, namespace, pod) for pod in pods]
    assert [err.status for err in refusals] == [429, 429], [err.body for err in refusals]
    assert fake_github.job(job_id)["status"] == "in_progress"

    done = wait_done(fake_github, [job_id])[job_id]
    assert (done["conclusion"], done["runner_name"]) == ("success", runner), _log(core, namespace, runner)
    # The hooks deleted their pods: nothing of the job is left for a drain to wait on.
    wait_for(lambda: not job_pods(), START_TIMEOUT, message="the hooks to delete the job's pods")


def _log(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """The runner pod's log (the stand-ins' and hooks' lines), while the pod is still there."""
    try:
        return str(core.read_namespaced_pod_log(pod, namespace, container=naming.RUNNER_CONTAINER))
    except client.ApiException as err:
        return f"(no log: {err.status})"


def test_the_runner_account_is_the_pools_and_goes_with_it(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    node: Node,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    gc_follows_pools: None,
) -> None:
    uid = create_pool(api_client, namespace, _pool(control_plane, node))["metadata"]["uid"]
    reader, name = LiveReader(api_client), naming.runner_account_name("km")

    def access() -> list[dict[str, Any] | None]:
        return [
            reader.get_service_account(namespace, name),
            reader.get_role_binding(namespace, name),
        ]

    found = wait_for(lambda: all(access()) and access(), START_TIMEOUT, message="the runner account")
    for obj in found:
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (api.KIND, uid, True)
    assert found[1]["roleRef"] == {
        "apiGroup": RBAC_GROUP,
        "kind": "ClusterRole",
        "name": RUNNER_HOOKS_CLUSTER_ROLE,
    }

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "km"
    )

    wait_for(lambda: get_pool(api_client, namespace, "km") is None, START_TIMEOUT, message="the pool to go")
    wait_for(lambda: access() == [None, None], START_TIMEOUT, message="the runner account to go with it")
