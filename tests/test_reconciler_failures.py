"""Failures a user sees on the pool, against the real API server: refused creates and stuck pods.

The API server's own ResourceQuota admission refuses the pods here (no quota controller runs,
so the test writes the quota's status as that controller would). Nothing runs pods either, so
the kubelet's container statuses are written by hand. The create backoff runs on a clock the
test moves, and the create attempts are counted on the FailedCreate Event, as a user reads them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, metrics, naming
from runnerpool.fakes import FakeRunnerJobs, FakeSecretUpdater
from runnerpool.pods.create_backoff import CreateBackoff
from runnerpool.reconciler import REFUSAL_RETELL, Reconciler
from runnerpool.settings import QueueSettings, Settings
from tests.admission import refusing
from tests.helpers import wait_for
from tests.pools import LiveReader, create_pool, fill_token, play_kubelet, pool_manifest
from tests.reconcilers import make_reconciler
from testworld.envtest.controlplane import ControlPlane
from testworld.wait import poll_until

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

FUTURE = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
QUOTA = "no-pods"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def reconciler(api_client: client.ApiClient, clock: _Clock) -> Reconciler:
    return make_reconciler(
        api_client,
        settings=Settings(queue=QueueSettings(status_coalesce=0.0)),
        backoff=CreateBackoff(base=2.0, cap=120.0, clock=clock),
    )


def _ready_pool(api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str) -> None:
    """A pool with its token: the next pass creates its pods."""
    create_pool(api_client, namespace, pool_manifest(name))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)


def _pool(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found = LiveReader(api_client).get_pool(namespace, name)
    assert found is not None
    return found


def _ready(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    conds = _pool(api_client, namespace, name)["status"]["conditions"]
    return next(c for c in conds if c["type"] == "Ready")


def _events(api_client: client.ApiClient, namespace: str, reason: str) -> list[client.CoreV1Event]:
    items = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    return [e for e in items if e.reason == reason and e.involved_object.kind == "RunnerPool"]


def _quota(api_client: client.ApiClient, namespace: str, pods: int = 0, *, resource: str = "pods") -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": QUOTA}, "spec": {"hard": {resource: str(pods)}}}
    )
    # What the quota controller writes; admission refuses against status.hard (and counts the
    # objects it admits into status.used itself).
    core.patch_namespaced_resource_quota_status(
        QUOTA, namespace, {"status": {"hard": {resource: str(pods)}, "used": {resource: "0"}}}
    )


def _pods(api_client: client.ApiClient, namespace: str, pool: str) -> list[str]:
    return [p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, pool)]


def test_a_refused_create_is_an_event_and_a_condition_naming_the_quota_and_backs_off(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: _Clock
) -> None:
    _quota(api_client, namespace)
    _ready_pool(api_client, namespace, reconciler, "quota")

    result = reconciler(f"{namespace}/quota")

    assert result.requeue_after == 2.0, "looked at again when the backoff ends, not at once"
    ready = _ready(api_client, namespace, "quota")
    assert (ready["status"], ready["reason"]) == ("False", "PodCreateFailed")
    assert f"exceeded quota: {QUOTA}" in ready["message"], ready["message"]
    [event] = _events(api_client, namespace, "FailedCreate")
    assert event.type == "Warning" and f"exceeded quota: {QUOTA}" in event.message, event.message
    assert "HTTP response" not in event.message and "\n" not in event.message
    written = _pool(api_client, namespace, "quota")["metadata"]["resourceVersion"]

    # A minute of reconciles, one a second (as watch events would bring them): the creates
    # back off (2, 4, 8, 16 s apart) and the status, unchanged, is not written again.
    for _ in range(60):
        clock.now += 1.0
        reconciler(f"{namespace}/quota")

    [event] = _events(api_client, namespace, "FailedCreate")
    assert event.count == 5, "attempts at 0, 2, 6, 14 and 30 s; the next at 62 s"
    assert _pool(api_client, namespace, "quota")["metadata"]["resourceVersion"] == written
    assert _pods(api_client, namespace, "quota") == []

    # The quota goes: the next attempt (at most the backoff's cap later) creates the pod.
    client.CoreV1Api(api_client).delete_namespaced_resource_quota(QUOTA, namespace)
    clock.now += 2.0
    reconciler(f"{namespace}/quota")
    assert len(_pods(api_client, namespace, "quota")) == 1
    ready = _ready(api_client, namespace, "quota")
    assert (ready["status"], ready["reason"]) == ("False", "RunnersStarting")


def test_a_refused_token_secret_is_a_condition_and_an_event_and_is_tried_again(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """It raised out of the pass before: no condition, no Event, the pool silently without pods."""
    _quota(api_client, namespace, resource="secrets")
    create_pool(api_client, namespace, pool_manifest("tokenless"))

    result = reconciler(f"{namespace}/tokenless")

    assert result.requeue_after == 30.0
    ready = _ready(api_client, namespace, "tokenless")
    assert (ready["status"], ready["reason"]) == ("False", "ChildRefused")
    secret = naming.token_secret_name("tokenless")
    assert f"creating secrets {secret} was refused" in ready["message"], ready["message"]
    assert f"exceeded quota: {QUOTA}" in ready["message"], ready["message"]
    written = _pool(api_client, namespace, "tokenless")["metadata"]["resourceVersion"]
    reconciler(f"{namespace}/tokenless")
    [event] = _events(api_client, namespace, "ChildRefused")
    assert event.type == "Warning" and event.count == 1 and f"exceeded quota: {QUOTA}" in event.message
    assert _pool(api_client, namespace, "tokenless")["metadata"]["resourceVersion"] == written

    client.CoreV1Api(api_client).delete_namespaced_resource_quota(QUOTA, namespace)
    reconciler(f"{namespace}/tokenless")
    assert LiveReader(api_client).get_secret(namespace, secret) is not None
    assert _ready(api_client, namespace, "tokenless")["reason"] != "ChildRefused"


def test_a_refused_jit_secret_is_told_as_a_refused_pod_and_backs_off(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: _Clock
) -> None:
    """A quota on Secrets in a JIT pool's namespace: its pods came, their Secrets did not, and
    the pool said nothing while they waited for good (the pass raised before its status)."""
    _quota(api_client, namespace, resource="secrets")
    create_pool(api_client, namespace, pool_manifest("jit", registration="jit"))
    reconciler(f"{namespace}/jit")
    reconciler(f"{namespace}/jit")

    [pod] = _pods(api_client, namespace, "jit")
    ready = _ready(api_client, namespace, "jit")
    assert (ready["status"], ready["reason"]) == ("False", "PodCreateFailed")
    assert "the JIT Secret of 1 pod(s) was refused" in ready["message"], ready["message"]
    assert f"exceeded quota: {QUOTA}" in ready["message"]
    assert 'secrets "runner-jit-jit-*" is forbidden' in ready["message"], ready["message"]
    written = _pool(api_client, namespace, "jit")["metadata"]["resourceVersion"]
    result = reconciler(f"{namespace}/jit")  # asked again, refused again: one Event counting, no status write
    assert result.requeue_after is not None and result.requeue_after <= 4.0, (
        "asked again when the backoff ends"
    )
    [event] = _events(api_client, namespace, "FailedCreate")
    assert (
        event.type == "Warning" and event.count == 2 and "JIT Secret of 1 pod(s) was refused" in event.message
    )
    assert _pool(api_client, namespace, "jit")["metadata"]["resourceVersion"] == written

    client.CoreV1Api(api_client).delete_namespaced_resource_quota(QUOTA, namespace)
    clock.now += 10.0
    reconciler(f"{namespace}/jit")
    assert LiveReader(api_client).list_secrets(namespace), "the pod's Secret, at last"
    assert _ready(api_client, namespace, "jit")["reason"] == "RunnersStarting"
    assert _pods(api_client, namespace, "jit") == [pod]


def test_a_refused_jit_secret_of_a_pod_gone_is_no_longer_reported(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """The pod whose Secret was refused went (scaled away): the pool kept saying PodCreateFailed
    for good, since no Secret and no pod was made again to end it."""
    _quota(api_client, namespace, resource="secrets")
    create_pool(api_client, namespace, pool_manifest("gone", registration="jit"))
    reconciler(f"{namespace}/gone")
    reconciler(f"{namespace}/gone")
    assert _ready(api_client, namespace, "gone")["reason"] == "PodCreateFailed"

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "gone", {"spec": {"replicas": 0}}
    )
    [pod] = _pods(api_client, namespace, "gone")
    client.CoreV1Api(api_client).delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    wait_for(lambda: not _pods(api_client, namespace, "gone"), message="the pod to go")
    reconciler(f"{namespace}/gone")

    ready = _ready(api_client, namespace, "gone")
    assert (ready["status"], ready["reason"]) == ("True", "RunnersReady"), ready


def test_a_pods_jit_secret_made_does_not_hide_a_refused_pod(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """A JIT pool under a full pod quota: the Secret of the pod that was admitted went through,
    and that wiped the refusal of the second pod: the pool said RunnersStarting and created at
    once again, refused again, at every pass."""
    _quota(api_client, namespace, pods=1)
    create_pool(api_client, namespace, pool_manifest("half", registration="jit", replicas=2))
    reconciler(f"{namespace}/half")  # one pod admitted, the second refused
    reconciler(f"{namespace}/half")  # the admitted pod's Secret made

    assert len(_pods(api_client, namespace, "half")) == 1
    assert [s["metadata"]["name"] for s in LiveReader(api_client).list_secrets(namespace)]
    ready = _ready(api_client, namespace, "half")
    assert (ready["status"], ready["reason"]) == ("False", "PodCreateFailed"), ready
    assert f"exceeded quota: {QUOTA}" in ready["message"]


def test_a_refused_disruption_budget_is_an_event_and_the_pods_come_all_the_same(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """A policy that wants every budget to allow a disruption: the runners matter more than
    their eviction protection, and the user hears which they lack."""
    _quota(api_client, namespace, resource="count/poddisruptionbudgets.policy")
    _ready_pool(api_client, namespace, reconciler, "unprotected")

    reconciler(f"{namespace}/unprotected")

    assert len(_pods(api_client, namespace, "unprotected")) == 1
    [event] = _events(api_client, namespace, "ChildRefused")
    assert event.type == "Warning" and f"exceeded quota: {QUOTA}" in event.message, event.message
    assert f"creating poddisruptionbudgets {naming.BUSY_DISRUPTION_BUDGET} was refused" in event.message
    assert "the pods it covers are not protected from eviction" in event.message
    reconciler(f"{namespace}/unprotected")  # refused again: told once while it lasts
    [event] = _events(api_client, namespace, "ChildRefused")
    assert event.count == 1


def test_a_quiet_pool_whose_budget_is_refused_is_looked_at_again_to_retell_it(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Told by an Event alone, which the API server drops after an hour: a converged JIT pool
    has nothing else that wakes it, and the refusal went untold for good."""
    _quota(api_client, namespace, resource="count/poddisruptionbudgets.policy")
    create_pool(api_client, namespace, pool_manifest("quiet", registration="jit", replicas=0))
    for _ in range(2):
        result = reconciler(f"{namespace}/quiet")

    [event] = _events(api_client, namespace, "ChildRefused")
    assert event.count == 1
    assert result.requeue_after is not None and result.requeue_after <= REFUSAL_RETELL


def test_a_refused_repair_of_a_child_is_told_and_stops_no_runner(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A policy that refuses changes of the token Secret (a label to put back, say): told once,
    and the pool runs on. Stopping its jobs for it would stop its busy marks and its token."""
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        settings=Settings(queue=QueueSettings(status_coalesce=0.0)),
    )
    _ready_pool(api_client, namespace, reconciler, "kept")
    reconciler(f"{namespace}/kept")
    secret = naming.token_secret_name("kept")
    core = client.CoreV1Api(api_client)
    core.patch_namespaced_secret(secret, namespace, {"metadata": {"labels": {naming.POOL_LABEL: None}}})
    message = "token Secrets are changed only by their owners' pipelines here"

    def dry_run() -> object:
        return core.patch_namespaced_secret(
            secret, namespace, {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
        )

    with refusing(
        api_client,
        namespace,
        operation="UPDATE",
        resource=("", "v1", "secrets"),
        allowed=f"object.metadata.name != '{secret}'",
        message=message,
        probe=dry_run,
    ):
        for _ in range(2):
            reconciler(f"{namespace}/kept")

    [event] = _events(api_client, namespace, "ChildRefused")
    assert event.count == 1 and f"changing secrets {secret} was refused" in event.message, event.message
    assert message in event.message
    assert _ready(api_client, namespace, "kept")["reason"] != "ChildRefused"
    assert (tokens.stopped, runners.stopped) == ([], []), "the pool's jobs run on"
    assert len(_pods(api_client, namespace, "kept")) == 1


def test_a_refused_finalizer_removal_is_a_condition_and_an_event_and_is_tried_again(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """An admission policy that keeps finalizers on: the deletion was retried in silence, ever
    more slowly (the queue's backoff), the pool Terminating with nothing saying why."""
    pools = client.CustomObjectsApi(api_client)
    _ready_pool(api_client, namespace, reconciler, "held")  # a token issued: runners maybe
    message = "pools keep their finalizers here"

    def dry_run() -> object:
        unfinalized = {"metadata": {"finalizers": None}}
        return pools.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, "held", unfinalized, dry_run="All"
        )

    with refusing(
        api_client,
        namespace,
        operation="UPDATE",
        resource=(api.GROUP, api.VERSION, api.PLURAL),
        allowed="has(object.metadata.finalizers) && size(object.metadata.finalizers) > 0",
        message=message,
        probe=dry_run,
    ):
        pools.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, "held")
        versions = []
        for _ in range(3):
            result = reconciler(f"{namespace}/held")
            assert result.requeue_after == 30.0
            versions.append(_pool(api_client, namespace, "held")["metadata"]["resourceVersion"])

        conds = _pool(api_client, namespace, "held")["status"]["conditions"]
        [held] = [c for c in conds if c["type"] == "RunnersDeregistered"]
        assert (held["status"], held["reason"]) == ("False", "DeletionRefused")
        assert message in held["message"], held["message"]
        [event] = _events(api_client, namespace, "DeletionRefused")
        assert event.type == "Warning" and event.count == 1 and message in event.message
        assert versions[1] == versions[2], "said once: not written again at each attempt"

    def gone() -> bool:  # (the API server drops the policy from its cache a moment later)
        reconciler(f"{namespace}/held")
        return LiveReader(api_client).get_pool(namespace, "held") is None

    wait_for(gone, message="the pool to go once the policy is gone")


def test_a_changed_spec_is_tried_at_once_despite_the_backoff(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    _quota(api_client, namespace)
    _ready_pool(api_client, namespace, reconciler, "edit")
    reconciler(f"{namespace}/edit")
    client.CoreV1Api(api_client).delete_namespaced_resource_quota(QUOTA, namespace)

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        "runnerpool.dev",
        "v1alpha1",
        namespace,
        "runnerpools",
        "edit",
        {"spec": {"runnerImage": "localhost/other:1"}},
    )
    reconciler(f"{namespace}/edit")

    assert len(_pods(api_client, namespace, "edit")) == 1, (
        "the new template is not held by the old one's backoff"
    )


def _stuck(api_client: client.ApiClient, namespace: str, pod: str, reason: str) -> None:
    """What the kubelet reports of a pod whose image cannot be pulled."""
    container = {
        "name": naming.RUNNER_CONTAINER,
        "image": "localhost/missing:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason, "message": f"{reason}: attempt at {datetime.now(UTC)}"}},
    }
    _pending(api_client, namespace, pod, containerStatuses=[container])


def _one_pod(api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str) -> str:
    """A ready pool of one pod, reconciled once more; its pod's name."""
    _ready_pool(api_client, namespace, reconciler, name)
    reconciler(f"{namespace}/{name}")
    [pod] = _pods(api_client, namespace, name)
    return pod


def _pending(api_client: client.ApiClient, namespace: str, pod: str, **status: Any) -> None:
    """The pod's status as the kubelet or the scheduler reports a pod that is not running yet."""
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Pending", **status}}
    )


def test_pods_stuck_pulling_are_one_event_one_condition_and_a_metric(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    pod = _one_pod(api_client, namespace, reconciler, "pull")

    _stuck(api_client, namespace, pod, "ErrImagePull")
    reconciler(f"{namespace}/pull")

    ready = _ready(api_client, namespace, "pull")
    assert (ready["status"], ready["reason"]) == ("False", "RunnerPodsFailing")
    assert (
        ready["message"]
        == "0/1 runner pods ready; 1 runner pod(s) in ImagePullBackOff (image localhost/missing:1)"
    )
    assert metrics.RUNNER_PODS_FAILING.labels(namespace, "pull", "ImagePullBackOff")._value.get() == 1
    written = _pool(api_client, namespace, "pull")["metadata"]["resourceVersion"]

    # The kubelet retries: the reason flips and its message moves on every time. No news.
    for reason in ("ImagePullBackOff", "ErrImagePull", "ImagePullBackOff"):
        _stuck(api_client, namespace, pod, reason)
        reconciler(f"{namespace}/pull")

    [event] = _events(api_client, namespace, "RunnerPodsFailing")
    assert (event.type, event.count) == ("Warning", 1)
    assert event.message == "1 runner pod(s) in ImagePullBackOff (image localhost/missing:1)"
    assert _pool(api_client, namespace, "pull")["metadata"]["resourceVersion"] == written
    assert not _events(api_client, namespace, "FailedCreate")

    # Fixed (the image arrived): Ready, the recovery is told, the series ends.
    play_kubelet(api_client, namespace, pod)
    reconciler(f"{namespace}/pull")
    assert _ready(api_client, namespace, "pull")["reason"] == "RunnersReady"
    assert [e.type for e in _events(api_client, namespace, "RunnersReady")] == ["Normal"]
    assert ("pull", "ImagePullBackOff") not in {
        (s.labels["pool"], s.labels["reason"])
        for family in metrics.RUNNER_PODS_FAILING.collect()
        for s in family.samples
        if s.labels["namespace"] == namespace
    }


def test_a_runner_killed_for_memory_is_one_warning_on_the_pool(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """The job failed and GitHub told its users only that the runner lost communication; the
    pool said nothing and the pod was replaced as after any job."""
    pod = _one_pod(api_client, namespace, reconciler, "oom")
    killed = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    runner = {"name": "runner", "image": "x", "imageID": "", "ready": False, "restartCount": 1}
    status = {**runner, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": killed}
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Running", "containerStatuses": [status]}}
    )
    for _ in range(2):  # the pod's next events: told once
        reconciler(f"{namespace}/oom")

    [event] = _events(api_client, namespace, "RunnerOOMKilled")
    assert (event.type, event.count) == ("Warning", 1)
    assert event.message.startswith(f"pod {pod}: container runner was killed for passing its memory limit")


def _unschedulable(api_client: client.ApiClient, namespace: str, pod: str, since: datetime) -> None:
    """What the scheduler reports of a pod no node can take: a condition, no container status."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu.",
        "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    _pending(api_client, namespace, pod, conditions=[condition])


def test_pods_the_scheduler_cannot_place_are_a_warning_and_a_condition_after_a_minute(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The pool said RunnersStarting, with no Event, for as long as no node fitted its pods. The
    minute is the reconciler's clock's (the scheduler's time is 3 minutes ahead of this
    machine's here: only a judge that reads that clock sees the minute pass; minutes, not more,
    since the pool's token is filled to expire an hour after the module was imported)."""
    now = [datetime.now(UTC)]
    reconciler = make_reconciler(
        api_client, settings=Settings(queue=QueueSettings(status_coalesce=0.0)), clock=lambda: now[0]
    )
    pod = _one_pod(api_client, namespace, reconciler, "unplaced")
    since = now[0] + timedelta(minutes=3)

    _unschedulable(api_client, namespace, pod, since)
    now[0] = since + timedelta(seconds=10)
    result = reconciler(f"{namespace}/unplaced")
    assert _ready(api_client, namespace, "unplaced")["reason"] == "RunnersStarting", "room may come yet"
    assert result.requeue_after is not None and result.requeue_after <= 50, "looked at again at the minute"

    now[0] = since + timedelta(minutes=2)
    reconciler(f"{namespace}/unplaced")

    told = "1 runner pod(s) in Unschedulable (scheduler: 0/3 nodes are available: 3 Insufficient cpu.)"
    ready = _ready(api_client, namespace, "unplaced")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "RunnerPodsFailing",
        f"0/1 runner pods ready; {told}",
    )
    [event] = _events(api_client, namespace, "RunnerPodsFailing")
    assert (event.type, event.message) == ("Warning", told)


def test_a_misspelt_template_field_is_template_invalid_and_keeps_the_current_pods(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Without strict field validation the API server drops an unknown field with a warning:
    the pool would roll its pods onto a template without what the user meant to set."""
    current = _one_pod(api_client, namespace, reconciler, "typo")

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        "runnerpool.dev",
        "v1alpha1",
        namespace,
        "runnerpools",
        "typo",
        {"spec": {"template": {"spec": {"priorityClassNam": "ci"}}}},
    )
    reconciler(f"{namespace}/typo")

    ready = _ready(api_client, namespace, "typo")
    assert (ready["status"], ready["reason"]) == ("False", "TemplateInvalid"), ready
    assert "priorityClassNam" in ready["message"] and "spec.template" in ready["message"], ready["message"]
    [event] = _events(api_client, namespace, "TemplateInvalid")
    assert "priorityClassNam" in event.message
    assert _pods(api_client, namespace, "typo") == [current], "the current pod stays, no new one"


def _pod_creates(plane: ControlPlane, namespace: str) -> list[int]:
    """The answers to every pod create in ``namespace``, as the API server's audit log has them."""
    return [
        e["responseStatus"]["code"]
        for e in plane.audit_events()
        if e.get("verb") == "create"
        and (e.get("objectRef") or {}).get("resource") == "pods"
        and (e.get("objectRef") or {}).get("namespace") == namespace
    ]


def test_a_burst_creates_in_slow_start_batches_and_a_refused_batch_stops_it(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, reconciler: Reconciler
) -> None:
    """Ten pods wanted, room for three: batches of 1 and 2 go through, the batch of 4 is
    refused, and no create is sent after it; the pool says why, as a single refused create does."""
    _quota(api_client, namespace, pods=3)
    create_pool(api_client, namespace, pool_manifest("burst", replicas=10))
    reconciler(f"{namespace}/burst")
    fill_token(api_client, namespace, "burst", "tok", FUTURE)

    result = reconciler(f"{namespace}/burst")

    assert result.requeue_after == 2.0, "backs off from the refusal"
    assert len(_pods(api_client, namespace, "burst")) == 3
    ready = _ready(api_client, namespace, "burst")
    assert (ready["status"], ready["reason"]) == ("False", "PodCreateFailed")
    assert f"exceeded quota: {QUOTA}" in ready["message"], ready["message"]
    [event] = _events(api_client, namespace, "FailedCreate")
    assert event.count == 1 and f"exceeded quota: {QUOTA}" in event.message, event.message
    # The audit log is written as each request ends: wait for the seven creates, then no more.
    assert poll_until(lambda: len(_pod_creates(control_plane, namespace)) >= 7, timeout=10), _pod_creates(
        control_plane, namespace
    )
    assert sorted(_pod_creates(control_plane, namespace)) == [201] * 3 + [403] * 4
