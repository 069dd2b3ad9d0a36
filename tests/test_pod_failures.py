"""The rules of failures users see: which stuck pods are reported how, and the create backoff.

Pure rules, no API server: runnerpool/pods/failures.py (the vocabulary), the create backoff
(runnerpool/pods/create_backoff.py), the Ready condition they lead to (runnerpool/status.py)
and the memory that keeps Events to one per change (the pool's ``PoolState`` in runnerpool/reconciler.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api, conditions, metrics, naming
from runnerpool.pods import failures
from runnerpool.pods.create_backoff import CreateBackoff
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.outdated import refused_version
from runnerpool.pods.scaling import PodCounts
from runnerpool.pods.start_backoff import StartBackoff
from runnerpool.reconciler import PoolStates
from runnerpool.status import ready_condition

STAMP = conditions.Stamp(1, datetime(2026, 1, 1, tzinfo=UTC))
#: When the kubelet's reasons are judged (they do not depend on the time).
JUDGED_AT = datetime(2026, 1, 2, tzinfo=UTC)
TOKEN_OK = {"status": "True"}


def _pod(name: str, *waiting: tuple[str, str], init: bool = False, phase: str = "Pending") -> dict[str, Any]:
    statuses = [
        {
            "name": container,
            "image": "localhost/missing:1",
            "state": {"waiting": {"reason": reason, "message": f"{reason} of {container} at {name}"}},
        }
        for container, reason in waiting
    ]
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "status": {"phase": phase, key: statuses}}


def _failing(pods: list[dict[str, Any]], now: datetime = JUDGED_AT) -> tuple[failures.Failing, ...]:
    return failures.judge(pods, now).failing


def _pool(replicas: int = 2) -> api.RunnerPool:
    return api.RunnerPool.model_validate(
        {
            "apiVersion": f"{api.GROUP}/{api.VERSION}",
            "kind": api.KIND,
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"repository": "o/r", "replicas": replicas},
        }
    )


def test_the_kubelets_pull_retries_are_one_reason_that_names_the_image() -> None:
    pods = [_pod("p-b", ("runner", "ImagePullBackOff")), _pod("p-a", ("runner", "ErrImagePull"))]

    found = _failing(pods)

    assert found == (failures.Failing("ImagePullBackOff", 2, "image localhost/missing:1"),)
    assert failures.describe(found) == "2 runner pod(s) in ImagePullBackOff (image localhost/missing:1)"
    # The next retry swaps the two reasons: the report stays the same, word for word.
    swapped = [_pod("p-b", ("runner", "ErrImagePull")), _pod("p-a", ("runner", "ImagePullBackOff"))]
    assert _failing(swapped) == found


def test_a_normal_start_finished_pods_and_other_reasons_are_not_failures() -> None:
    pods = [
        _pod("starting", ("runner", "ContainerCreating")),
        _pod("done", ("runner", "CrashLoopBackOff"), phase="Failed"),
        {"metadata": {"name": "new"}, "status": {"phase": "Pending"}},
    ]
    assert _failing(pods) == ()


def test_each_stuck_pod_counts_once_under_its_first_stuck_container_init_first() -> None:
    init = _pod("p-init", ("fetch", "CreateContainerConfigError"), init=True)
    init["status"]["containerStatuses"] = [
        {"name": "runner", "state": {"waiting": {"reason": "PodInitializing"}}}
    ]
    crash = _pod("p-crash", ("sidecar", "CrashLoopBackOff"), ("runner", "ErrImagePull"))

    found = _failing([init, crash])

    assert found == (
        failures.Failing("CrashLoopBackOff", 1, "container sidecar"),
        failures.Failing(
            "CreateContainerConfigError", 1, "container fetch: CreateContainerConfigError of fetch at p-init"
        ),
    )
    assert {f.reason for f in found} <= set(failures.REPORTED)


def test_refused_pods_and_stuck_pods_make_ready_false_with_their_cause() -> None:
    pool = _pool(replicas=2)
    stuck = PodCounts(
        desired=2,
        active=2,
        ready=2,
        updated=2,
        failing=_failing([_pod("x", ("runner", "ErrImagePull"))]),
    )

    refused = ready_condition(
        STAMP, pool, TOKEN_OK, PodCounts(desired=2), refused="403 Forbidden: exceeded quota: q"
    )
    failing = ready_condition(STAMP, pool, TOKEN_OK, stuck)

    assert (refused["status"], refused["reason"]) == ("False", "PodCreateFailed")
    assert (
        refused["message"]
        == "0/2 runner pods ready; the API server refuses new runner pods: 403 Forbidden: exceeded quota: q"
    )
    # Even at full strength: a new pod that cannot come is a rollout that never ends.
    assert (failing["status"], failing["reason"]) == ("False", "RunnerPodsFailing")
    assert (
        failing["message"]
        == "2/2 runner pods ready; 1 runner pod(s) in ImagePullBackOff (image localhost/missing:1)"
    )
    # No token is told first: without one no pod can run anyway.
    assert ready_condition(STAMP, pool, {"status": "False"}, stuck, refused="x")["reason"] == "TokenNotReady"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_backoff_doubles_up_to_its_cap_and_a_success_resets_it() -> None:
    clock = _Clock()
    backoff = CreateBackoff(base=2.0, cap=10.0, clock=clock)
    assert backoff.wait("ns/p", "h1") is None, "nothing refused: create now"

    delays = [backoff.failed("ns/p", "h1", "403 Forbidden").delay for _ in range(5)]

    assert delays == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.wait("ns/p", "h1") == 10.0
    clock.now += 9.5
    assert backoff.wait("ns/p", "h1") == pytest.approx(0.5)
    clock.now += 0.5
    assert backoff.wait("ns/p", "h1") is None, "the backoff is over: try again"
    assert backoff.failure("ns/p", "h1") is not None, "the refusal is still what the pool reports"
    backoff.succeeded("ns/p")
    assert backoff.failure("ns/p", "h1") is None
    assert backoff.failed("ns/p", "h1", "again").delay == 2.0


def test_a_changed_template_is_tried_at_once_and_pools_back_off_apart() -> None:
    clock = _Clock()
    backoff = CreateBackoff(clock=clock)
    backoff.failed("ns/p", "old", "403 Forbidden: hostPath volumes")

    assert backoff.wait("ns/p", "new") is None and backoff.failure("ns/p", "new") is None
    assert backoff.wait("ns/other", "old") is None
    # The new template refused too: its own count starts at one.
    assert backoff.failed("ns/p", "new", "still").failures == 1


def test_a_state_is_news_once_until_it_changes() -> None:
    states = PoolStates(Expectations())
    told = states.of("ns/p")
    seen = [told.failing_changed(frozenset(state)) for state in ("a", "a", "b", "b", "a")]
    assert seen == [True, False, True, False, True]
    states.forget("ns", "p")
    assert states.of("ns/p").failing_changed(frozenset("a"))


def test_the_failing_gauge_has_a_series_per_stuck_reason_only() -> None:
    pool = _pool()
    status = {"desiredReplicas": 2, "readyReplicas": 0, "conditions": []}
    stuck = _failing([_pod("x", ("runner", "ErrImagePull")), _pod("y", ("runner", "CrashLoopBackOff"))])

    metrics.observe_pool(pool, status, stuck)
    assert _failing_series() == {("ns", "p", "CrashLoopBackOff"): 1.0, ("ns", "p", "ImagePullBackOff"): 1.0}
    metrics.observe_pool(pool, status, stuck[1:])
    assert _failing_series() == {("ns", "p", "ImagePullBackOff"): 1.0}
    metrics.forget_pool("ns", "p")
    assert _failing_series() == {}


def _failing_series() -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["namespace"], s.labels["pool"], s.labels["reason"]): s.value
        for family in metrics.RUNNER_PODS_FAILING.collect()
        for s in family.samples
        if s.labels.get("namespace") == "ns"
    }


def test_a_jit_pod_waiting_for_its_secret_to_be_filled_is_not_failing() -> None:
    # The kubelet retries a Secret volume whose key is missing (FailedMount events); meanwhile
    # the register init container and the runner container wait as in any start.
    waiting = _pod("p-jit", ("register", "PodInitializing"), init=True)
    waiting["status"]["containerStatuses"] = [
        {"name": "runner", "state": {"waiting": {"reason": "PodInitializing"}}}
    ]
    also = _pod("p-jit2", ("register", "ContainerCreating"), init=True)

    assert _failing([waiting, also]) == ()


def _runner_ended(uid: str, code: int, message: str) -> dict[str, Any]:
    """A pod whose runner container ended at once, with its termination message."""
    at = "2026-01-01T00:00:00Z"
    ended = {"exitCode": code, "reason": "Completed", "startedAt": at, "finishedAt": at, "message": message}
    status = {"name": naming.RUNNER_CONTAINER, "state": {"terminated": ended}}
    return {
        "metadata": {"uid": uid, "labels": {naming.TEMPLATE_HASH_LABEL: "t1"}},
        "status": {"containerStatuses": [status]},
    }


REFUSED = "An error occurred: Runner version v2.334.0 is deprecated and cannot receive messages.\n"


def test_a_runner_github_refuses_as_outdated_is_its_own_reason_whatever_its_exit_code() -> None:
    """The runner exits 0 without ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE: before, such
    a pod counted as a runner that did its job, and the pool made the next one at once."""
    assert refused_version({"message": REFUSED + "runner exited with code 7"}) == "2.334.0"
    assert (
        refused_version(
            {"message": "Error: Forbidden Runner version 2.320.0 is deprecated and cannot receive messages."}
        )
        == "2.320.0"
    )
    assert refused_version({"message": "runner exited with code 1"}) is None
    assert refused_version({}) is None

    starts = StartBackoff(clock=lambda: datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    starts.observe("ns/old", 1, "t1", [_runner_ended("a", 0, REFUSED + "runner exited with code 0")])
    found = starts.failing("ns/old", 1)

    assert found is not None and found.reason == "RunnerVersionOutdated"
    assert found.detail == (
        "container runner: GitHub refuses runner version 2.334.0 as outdated; use a newer runner image;"
        " the next pod waits 10 s"
    )
    assert starts.wait("ns/old", 1) is not None, "the pool backs off"
    # An ordinary exit at start stays ExitedAtStart.
    starts.observe("ns/crash", 1, "t1", [_runner_ended("b", 1, "runner exited with code 1")])
    crashed = starts.failing("ns/crash", 1)
    assert crashed is not None and crashed.reason == "ExitedAtStart"


def test_an_outdated_runner_is_the_ready_reason_and_the_event_s() -> None:
    outdated = failures.Failing(
        "RunnerVersionOutdated", 2, "container runner: GitHub refuses runner version 2.334.0"
    )
    stuck = _failing([_pod("x", ("runner", "ErrImagePull"))])
    counts = PodCounts(desired=1, failing=(*stuck, outdated))

    ready = ready_condition(STAMP, _pool(replicas=1), TOKEN_OK, counts)

    assert (ready["status"], ready["reason"]) == ("False", "RunnerVersionOutdated")
    assert "2 runner pod(s) in RunnerVersionOutdated (container runner: GitHub refuses" in ready["message"]
    assert failures.ready_reason(stuck) == "RunnerPodsFailing"
    assert "RunnerVersionOutdated" in failures.REPORTED, "the failing gauge's reason label takes it"


# -- pods the scheduler cannot place -----------------------------------------------------------

SCHEDULED_AT = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NO_NODE_FITS = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."


def _unschedulable(name: str, message: str = NO_NODE_FITS) -> dict[str, Any]:
    """A pod as the scheduler leaves one it cannot place: no container status, only its condition."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": SCHEDULED_AT.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": [condition]}}


def test_a_pod_the_scheduler_cannot_place_for_a_minute_fails_the_pool_with_the_scheduler_s_words() -> None:
    """No node fits the pool's pods (requests, a nodeSelector typo, an untolerated taint): the pool
    said RunnersStarting, with no Event, for as long as it lasted."""
    later = SCHEDULED_AT + failures.UNSCHEDULABLE_AFTER + timedelta(seconds=1)

    found = _failing([_unschedulable("p-b"), _unschedulable("p-a")], later)

    assert found == (failures.Failing("Unschedulable", 2, f"scheduler: {NO_NODE_FITS}"),)
    assert "Unschedulable" in failures.REPORTED, "the failing gauge refuses the reason"
    ready = ready_condition(STAMP, _pool(), TOKEN_OK, PodCounts(desired=2, active=2, failing=found))
    assert (ready["status"], ready["reason"]) == ("False", "RunnerPodsFailing")
    assert (
        ready["message"]
        == f"0/2 runner pods ready; 2 runner pod(s) in Unschedulable (scheduler: {NO_NODE_FITS})"
    )
    # The reasons changed from none: the reconciler's _tell_failing makes this its Warning Event.
    assert PoolStates(Expectations()).of("ns/p").failing_changed(frozenset(f.reason for f in found))


def test_a_pod_waiting_under_a_minute_for_room_is_still_starting_and_is_looked_at_again() -> None:
    """A cluster autoscaler's new node or a preemption often places the pod within the minute;
    no pod event comes when the minute is up, so the pool is requeued for it."""
    pod = _unschedulable("p-a")
    soon = SCHEDULED_AT + timedelta(seconds=20)

    assert _failing([pod], soon) == ()
    assert (
        failures.judge([pod], soon).recheck_in
        == (failures.UNSCHEDULABLE_AFTER - timedelta(seconds=20)).seconds
    )
    assert failures.judge([pod], SCHEDULED_AT + failures.UNSCHEDULABLE_AFTER).recheck_in is None
    scheduled = {
        **pod,
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
    assert failures.judge([scheduled], soon).recheck_in is None
    assert _failing([scheduled], soon + timedelta(hours=1)) == ()


def test_the_scheduler_s_message_of_a_big_cluster_is_cut_to_one_bounded_line() -> None:
    message = "0/900 nodes are available:\n" + " ".join(f"{n} node(s) had taint t{n}." for n in range(200))
    later = SCHEDULED_AT + timedelta(hours=1)

    [found] = _failing([_unschedulable("p-a", message)], later)

    assert len(found.detail) <= len("scheduler: ") + failures.SCHEDULER_MESSAGE_MAX
    assert found.detail.startswith("scheduler: 0/900 nodes are available: 0 node(s) had taint t0.")
    assert "\n" not in found.detail and found.detail.endswith("...")


def test_only_a_pending_pod_bound_to_no_node_counts_as_unschedulable() -> None:
    """A condition left over on a pod that runs (or one bound to a node) is no scheduler's verdict."""
    later = SCHEDULED_AT + timedelta(hours=1)
    running = _unschedulable("p-run")
    running["status"]["phase"] = "Running"
    bound = _unschedulable("p-bound")
    bound["spec"] = {"nodeName": "node-1"}

    assert _failing([running, bound], later) == ()
    assert failures.judge([running, bound], SCHEDULED_AT).recheck_in is None
