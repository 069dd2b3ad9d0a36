"""Runner pods that ended badly are told on the pool (runnerpool/pods/endings.py): the rule, and
the reconciler's memory that tells each pod once."""

from __future__ import annotations

from typing import Any

import pytest

from runnerpool import naming
from runnerpool.pods import endings
from runnerpool.pods.expectations import Expectations
from runnerpool.reasons import Reason
from runnerpool.reconciler import PoolStates

EVICTED = "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi."


def _pod(uid: str = "u1", *, busy: bool = False, limit: str | None = "2Gi", **status: Any) -> dict[str, Any]:
    labels = {naming.BUSY_LABEL: naming.BUSY_VALUE} if busy else {}
    resources = {"limits": {"memory": limit}} if limit else {}
    return {
        "metadata": {"name": f"p-{uid}", "uid": uid, "labels": labels},
        "spec": {"containers": [{"name": "runner", "resources": resources}, {"name": "docker"}]},
        "status": {"phase": "Running", **status},
    }


def _oom(container: str = "runner", state: str = "lastState") -> dict[str, Any]:
    """``lastState``: the kubelet restarted the container since; ``state``: it has not yet."""
    ended = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    return {"containerStatuses": [{"name": container, "state": {"running": {}}, state: ended}]}


def test_a_container_killed_for_memory_is_told_with_its_limit_busy_or_not() -> None:
    """An idle runner does not run out of memory: a job did, and failed."""
    [found] = endings.bad_endings([_pod(**_oom())])
    assert found.reason is Reason.RUNNER_OOM_KILLED
    assert "pod p-u1: container runner was killed for passing its memory limit (2Gi)" in found.message
    [daemon] = endings.bad_endings([_pod(limit=None, **_oom("docker", state="state"))])
    assert "container docker" in daemon.message and "none set" in daemon.message


@pytest.mark.parametrize(
    ("status", "quoted"),
    [
        pytest.param(
            {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "message": "Preempted in order to admit critical pod",
                    }
                ]
            },
            "PreemptionByScheduler: Preempted in order to admit critical pod",
            id="preempted",
        ),
        pytest.param(
            {"phase": "Failed", "reason": "Evicted", "message": EVICTED}, EVICTED, id="kubelet-eviction"
        ),
    ],
)
def test_a_busy_pod_taken_away_is_told_an_idle_one_is_not(status: dict[str, Any], quoted: str) -> None:
    [found] = endings.bad_endings([_pod(busy=True, **status)])
    assert found.reason is Reason.RUNNER_POD_DISRUPTED and quoted in found.message
    assert endings.bad_endings([_pod(busy=False, **status)]) == [], "an idle pod's replacement is routine"


def test_a_normal_end_and_a_false_disruption_condition_are_no_news() -> None:
    finished = {"containerStatuses": [{"name": "runner", "state": {"terminated": {"reason": "Completed"}}}]}
    cleared = {"conditions": [{"type": "DisruptionTarget", "status": "False", "reason": "x"}]}
    assert endings.bad_endings([_pod(busy=True, **finished), _pod("u2", busy=True, **cleared)]) == []


def test_each_pod_is_told_once_and_forgotten_once_gone() -> None:
    state = PoolStates(Expectations()).of("ns/p")
    killed = _pod(**_oom())
    assert [e.uid for e in state.endings_news([killed])] == ["u1"]
    assert state.endings_news([killed, _pod("u2")]) == [], "told already"
    assert state.endings_news([]) == []
    assert [e.uid for e in state.endings_news([killed])] == ["u1"], "a pod seen again after it went is news"


def test_an_init_container_killed_for_memory_ran_no_job() -> None:
    """The register container runs before any job: one killed at start is a stuck pod, told by
    the failures rule, not a lost job."""
    killed = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    assert (
        endings.bad_endings([_pod(initContainerStatuses=[{"name": "register", "lastState": killed}])]) == []
    )
