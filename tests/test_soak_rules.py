"""The chaos soak's own judgements (bench/soak.py), on made-up observations: each invariant
the soak reports as kept must be one it would report as broken when it is."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from bench import soak, soak_plot


def _samples(rss: list[float], step: float = 2.0) -> list[dict[str, Any]]:
    return [
        {"t": i * step, "rss_mib": {"soak-a": value, "soak-b": None}, "cpu_percent": 1.0}
        for i, value in enumerate(rss)
    ]


def test_rss_growth_counts_only_after_the_warm_up_against_its_end() -> None:
    record = soak.Record()
    # 180 s run: warm-up 60 s; early growth is free, 84 -> 90 (+7 %) after it is fine, 95 is not.
    record.samples = _samples([60.0] * 10 + [84.0] * 21 + [90.0] * 30 + [95.0] * 30)
    resources = soak.judge_rss(record, 180.0)
    rss = record.invariants["RSS growth after warm-up <= 10 %"]
    assert resources["warmup_seconds"] == 60.0
    assert resources["rss_baseline_mib"] == 84.0
    assert rss.checks == 60
    assert rss.violations == 30
    assert resources["rss_mib"] == {"start": 60.0, "peak": 95.0, "end": 95.0}


def _pod(*, running: bool = True, deleting: bool = False) -> Any:
    ready = SimpleNamespace(type="Ready", status="True" if running else "False")
    return SimpleNamespace(
        metadata=SimpleNamespace(deletion_timestamp="now" if deleting else None),
        status=SimpleNamespace(phase="Running" if running else "Pending", conditions=[ready]),
    )


def _pool(replicas: int, status: dict[str, Any], autoscaling: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas}
    if autoscaling:
        spec["autoscaling"] = {"minReplicas": 0, "maxReplicas": 3}
    ready = {"type": "Ready", "status": "True", "reason": "RunnersReady"}
    return {
        "metadata": {"namespace": "soak-0", "name": "p", "generation": 3},
        "spec": spec,
        "status": {"observedGeneration": 3, "conditions": [ready], **status},
    }


def test_a_converged_pool_has_what_it_wants_and_nothing_else() -> None:
    converged = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}
    assert soak._pool_unconverged(_pool(2, converged), [_pod(), _pod()]) == []
    # A pod still going (a busy one after a scale-down) is not counted against the pool.
    assert soak._pool_unconverged(_pool(2, converged), [_pod(), _pod(), _pod(deleting=True)]) == []
    assert soak._pool_unconverged(_pool(2, converged), [_pod(), _pod(running=False)])
    assert soak._pool_unconverged(_pool(2, {**converged, "updatedReplicas": 1}), [_pod(), _pod()])
    assert soak._pool_unconverged(_pool(3, converged), [_pod(), _pod()])
    stale = _pool(2, converged)
    stale["status"]["observedGeneration"] = 2
    assert soak._pool_unconverged(stale, [_pod(), _pod()])


def test_an_autoscaling_pool_wants_what_its_demand_decided() -> None:
    status = {"replicas": 1, "readyReplicas": 1, "desiredReplicas": 1}
    assert soak._pool_unconverged(_pool(0, status, autoscaling=True), [_pod()]) == []
    assert soak._pool_unconverged(_pool(0, {**status, "desiredReplicas": 2}, autoscaling=True), [_pod()])


def test_job_curves_follow_each_job_once_it_completed() -> None:
    events = [(1.0, "queued", 1), (2.0, "queued", 2), (3.0, "in_progress", 1), (5.0, "completed", 1)]
    curves = soak_plot.job_curves([*events, (6.0, "in_progress", 1)], until=10.0)
    assert curves["queued"][-1] == (10.0, 1)
    assert curves["running"][-1] == (10.0, 0)
    assert curves["completed"][-1] == (10.0, 1)
    assert max(y for _, y in curves["running"]) == 1


def _container(name: str, state: client.V1ContainerState) -> client.V1ContainerStatus:
    return client.V1ContainerStatus(
        name=name, image="i", image_id="", ready=False, restart_count=0, state=state
    )


def test_a_pod_left_in_a_deleted_namespace_says_which_container_holds_it() -> None:
    """The soak's note when a namespace outlives its deletion names what still runs."""
    exited = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=0))
    running = client.V1ContainerState(running=client.V1ContainerStateRunning())
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="auto-x1", deletion_timestamp=datetime(2026, 1, 1, 11, 29, 50, tzinfo=UTC)
        ),
        status=client.V1PodStatus(
            phase="Running",
            init_container_statuses=[_container("register", exited)],
            container_statuses=[_container("runner", running)],
        ),
    )
    assert (
        soak._pod_held(pod)
        == "pod auto-x1 (being deleted, grace ends 11:29:50, Running, register exited 0, runner running)"
    )


def test_a_pod_told_to_stop_again_is_found_in_the_operators_log() -> None:
    line = (
        '{"msg": "pod soak-0/fixed-jpfr5 still ran its runner container more than 60s after it was told '
        'to stop; told again, to be killed 30s from now"}'
    )
    found = soak._OUTLIVED.search(line)
    assert found is not None and found.group(1) == "soak-0/fixed-jpfr5"
