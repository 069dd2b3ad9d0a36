"""Failures a user sees on the pool itself, on the real node: refused pods and pods that cannot start.

Before, the API server refusing a runner pod (a ResourceQuota, Pod Security) or a pod that
could not pull its image left a trace only in the operator's log. Here each shows on the pool:
a Warning Event, the Ready condition's reason and message, and for stuck pods a metric by
reason; and each recovers once its cause is fixed.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from runnerpool import api, naming
from tests.e2e.runners import get_pool
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, live_pods, registered_pods
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

QUOTA = "no-pods"
MISSING_IMAGE = "localhost/missing:1"


def _ready(api_client: client.ApiClient, namespace: str, pool: str) -> dict[str, Any]:
    conds = ((get_pool(api_client, namespace, pool) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def _wait_ready_reason(
    api_client: client.ApiClient, namespace: str, pool: str, reason: str
) -> dict[str, Any]:
    def reached() -> dict[str, Any]:
        ready = _ready(api_client, namespace, pool)
        return ready if ready.get("reason") == reason else {}

    found: dict[str, Any] = wait_for(
        reached,
        START_TIMEOUT,
        0.5,
        f"pool {pool}'s Ready reason {reason}",
    )
    return found


def _events(core: client.CoreV1Api, namespace: str, reason: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.reason == reason and e.involved_object.kind == api.KIND
    ]


def _wait_event(core: client.CoreV1Api, namespace: str, reason: str) -> client.CoreV1Event:
    event: client.CoreV1Event = wait_for(
        lambda: next(iter(_events(core, namespace, reason)), None), START_TIMEOUT, 0.5, f"a {reason} Event"
    )
    return event


def test_a_quota_that_allows_no_pod_is_named_on_the_pool_until_it_goes(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": QUOTA}, "spec": {"hard": {"pods": "0"}}}
    )
    create_pool(api_client, namespace, node_pool("quota"))

    event = _wait_event(core, namespace, "FailedCreate")
    ready = _wait_ready_reason(api_client, namespace, "quota", "PodCreateFailed")

    assert event.type == "Warning" and f"quota: {QUOTA}" in event.message, event.message
    assert ready["status"] == "False" and f"quota: {QUOTA}" in ready["message"], ready["message"]
    assert live_pods(core, namespace, "quota") == []

    core.delete_namespaced_resource_quota(QUOTA, namespace)

    registered_pods(core, fake_github, namespace, "quota", 1)
    _wait_ready_reason(api_client, namespace, "quota", "RunnersReady")


def test_a_pod_pod_security_refuses_is_named_on_the_pool_and_a_fixed_spec_runs(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    core = client.CoreV1Api(api_client)
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}
    )
    host = [{"name": "host", "hostPath": {"path": "/tmp"}}]
    create_pool(api_client, namespace, node_pool("psa", volumes=host))

    event = _wait_event(core, namespace, "FailedCreate")
    ready = _wait_ready_reason(api_client, namespace, "psa", "PodCreateFailed")

    assert 'violates PodSecurity "baseline:latest": hostPath volumes' in event.message, event.message
    assert "hostPath volumes" in ready["message"], ready["message"]
    assert live_pods(core, namespace, "psa") == []

    # The spec fixed: a new pod template, tried at once rather than after the backoff.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "psa", {"spec": {"volumes": []}}
    )
    registered_pods(core, fake_github, namespace, "psa", 1)
    _wait_ready_reason(api_client, namespace, "psa", "RunnersReady")


def _failing_gauge(operator: OperatorProcess, namespace: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pool"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(operator.metrics())
        if family.name == "runnerpool_runner_pods_failing"
        for s in family.samples
        if s.labels["namespace"] == namespace
    }


def _waiting_reason(core: client.CoreV1Api, namespace: str, pod: str) -> str | None:
    status = core.read_namespaced_pod(pod, namespace).status
    # The register init container pulls the image first: a pull that fails shows there.
    statuses = [*(status.init_container_statuses or []), *(status.container_statuses or [])]
    waiting = next(
        (c.state.waiting for c in statuses if c.state is not None and c.state.waiting is not None), None
    )
    return waiting.reason if waiting is not None else None


def test_an_image_that_cannot_be_pulled_is_a_reason_an_event_and_a_metric(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, node_pool("pull", runnerImage=MISSING_IMAGE))

    ready = _wait_ready_reason(api_client, namespace, "pull", "RunnerPodsFailing")
    event = _wait_event(core, namespace, "RunnerPodsFailing")

    assert ready["status"] == "False"
    assert (
        ready["message"]
        == f"0/1 runner pods ready; 1 runner pod(s) in ImagePullBackOff (image {MISSING_IMAGE})"
    )
    assert (event.type, event.message) == (
        "Warning",
        f"1 runner pod(s) in ImagePullBackOff (image {MISSING_IMAGE})",
    )
    wait_for(
        lambda: _failing_gauge(operator, namespace) == {("pull", "ImagePullBackOff"): 1.0},
        START_TIMEOUT,
        0.5,
        "runnerpool_runner_pods_failing for the pool",
    )

    # The kubelet retries, ErrImagePull and ImagePullBackOff in turn: still one Event, told once.
    [pod] = live_pods(core, namespace, "pull")
    seen: set[str | None] = set()

    def both_seen() -> bool:
        seen.add(_waiting_reason(core, namespace, pod))
        return {"ErrImagePull", "ImagePullBackOff"} <= seen

    wait_for(
        both_seen,
        START_TIMEOUT,
        0.5,
        "the kubelet to retry the pull",
    )
    [event] = _events(core, namespace, "RunnerPodsFailing")
    assert event.count == 1
    assert not _events(core, namespace, "FailedCreate")


def test_a_runner_that_exits_at_once_backs_off_its_pods_and_github_requests(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    """Before: 41 pods and 126 GitHub requests in 90 s, and only ``RunnersStarting`` on the pool."""
    core = client.CoreV1Api(api_client)
    template = {"spec": {"containers": [{"name": naming.RUNNER_CONTAINER, "command": ["false"]}]}}
    asked_before = len(fake_github.requests)
    create_pool(api_client, namespace, node_pool("crash", template=template))

    # A measurement over a fixed window: every pod the pool makes in 90 s, sampled twice a second.
    made: set[str] = set()
    window_ends = time.monotonic() + 90.0
    while time.monotonic() < window_ends:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}=crash").items
        made |= {p.metadata.uid for p in pods}
        time.sleep(0.5)
    asked = len(fake_github.requests) - asked_before

    print(f"crash-looping pool, 90 s: {len(made)} pods, {asked} GitHub requests")
    assert len(made) <= 6, f"{len(made)} pods in 90 s: 10 s doubling allows 5 (at 0, 10, 30, 70 s)"
    assert asked <= 50, f"{asked} GitHub requests in 90 s (32 measured: registrations, listings, deletions)"
    ready = _ready(api_client, namespace, "crash")
    assert (ready.get("status"), ready.get("reason")) == ("False", "RunnerPodsFailing"), ready
    assert "ExitedAtStart" in ready["message"] and "exit code 1" in ready["message"], ready["message"]
    event = _wait_event(core, namespace, "RunnerPodsFailing")
    assert event.type == "Warning" and "exit code 1" in event.message, event.message


def _termination_messages(pods: list[client.V1Pod]) -> set[str]:
    """The runner containers' termination messages, current or before a restart."""
    said: set[str] = set()
    for pod in pods:
        for status in pod.status.container_statuses or []:
            if status.name != naming.RUNNER_CONTAINER:
                continue
            for state in (status.state, status.last_state):
                if state is not None and state.terminated is not None and state.terminated.message:
                    said.add(state.terminated.message)
    return said


def test_a_runner_github_refuses_as_outdated_is_named_on_the_pool_and_its_pods_back_off(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    """GitHub's floor above the runner image's release (the stand-in reports it): each runner is
    refused its session and exits. Before: every pod a failure nobody named, replaced at once."""
    core = client.CoreV1Api(api_client)
    fake_github.min_runner_version = "2.999.0"
    try:
        create_pool(api_client, namespace, node_pool("old"))
        # A measurement over a fixed window: every pod the pool makes in 75 s, sampled twice a second.
        made: set[str] = set()
        said: set[str] = set()
        window_ends = time.monotonic() + 75.0
        while time.monotonic() < window_ends:
            pods = core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}=old").items
            made |= {p.metadata.uid for p in pods}
            said |= _termination_messages(pods)
            time.sleep(0.5)
        ready = _wait_ready_reason(api_client, namespace, "old", "RunnerVersionOutdated")
        event = _wait_event(core, namespace, "RunnerVersionOutdated")
    finally:
        fake_github.min_runner_version = None

    print(f"outdated runners, 75 s: {len(made)} pods")
    assert len(made) <= 5, f"{len(made)} pods in 75 s: 10 s doubling allows 4 (at 0, 10, 30, 70 s)"
    refused = "Runner version v2.336.0 is deprecated and cannot receive messages."
    assert any(refused in message and "runner exited with code 7" in message for message in said), said
    assert ready["status"] == "False"
    assert "GitHub refuses runner version 2.336.0 as outdated" in ready["message"], ready["message"]
    assert event.type == "Warning" and "runner version 2.336.0" in event.message, event.message
    assert _failing_gauge(operator, namespace).get(("old", "RunnerVersionOutdated"), 0) >= 1
