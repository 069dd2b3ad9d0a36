"""The scaling decision, pure: clamp(min, busy + queued + minIdle, max), up at once, down late.

The reconciler makes it (``tests/test_reconciler_demand.py`` checks what it writes and the
Events it records); these cases check the rule itself, with the window handed in and out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api
from runnerpool.autoscaling import Decision, Window, decide, desired_replicas, recommend

T0 = datetime(2030, 1, 20, 17, 0, tzinfo=UTC)


def pool(
    *, autoscaling: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **spec: Any
) -> api.RunnerPool:
    body: dict[str, Any] = {"repository": "octo-org/hello-world", **spec}
    if autoscaling is not None:
        body["autoscaling"] = autoscaling
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": "gpu", "namespace": "ci", "uid": "uid-gpu"},
            "spec": body,
            "status": status or {},
        }
    )


def auto(**values: Any) -> dict[str, Any]:
    return {"maxReplicas": 5, **values}


def demand_status(
    queued: int, busy: int = 0, desired: int | None = None, runners_busy: int = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {"demand": {"queued": queued, "busy": busy}, "runners": {"busy": runners_busy}}
    if desired is not None:
        status["desiredReplicas"] = desired
    return status


@pytest.mark.parametrize(
    ("minimum", "maximum", "busy", "queued", "want"),
    [(0, 5, 0, 0, 0), (0, 5, 1, 2, 3), (2, 5, 0, 0, 2), (0, 5, 3, 9, 5), (1, 1, 0, 4, 1)],
)
def test_recommendation_is_clamped(minimum: int, maximum: int, busy: int, queued: int, want: int) -> None:
    assert recommend(minimum, maximum, busy, queued) == want


@pytest.mark.parametrize(
    ("minimum", "maximum", "min_idle", "busy", "queued", "want"),
    [
        (0, 5, 2, 0, 0, 2),  # the buffer before any job
        (0, 5, 2, 0, 1, 3),  # a queued job: its runner (an idle one takes it) and a new idle one
        (0, 5, 2, 1, 0, 3),  # taken: queued -> busy leaves the sum, so no pod goes or comes
        (0, 5, 2, 4, 0, 5),  # max caps the buffer: 1 idle left
        (0, 5, 2, 3, 4, 5),  # demand alone is above max: no buffer
        (3, 5, 1, 0, 0, 3),  # minReplicas is a floor under the whole count, the buffer fits in it
        (3, 5, 1, 3, 0, 4),  # ... and is added to the jobs once they reach the floor
        (0, 5, 0, 1, 1, 2),  # minIdle 0: the rule as before
    ],
)
def test_the_idle_buffer_sits_above_the_jobs_within_max(
    minimum: int, maximum: int, min_idle: int, busy: int, queued: int, want: int
) -> None:
    assert recommend(minimum, maximum, busy, queued, min_idle) == want
    spec = auto(minReplicas=minimum, maxReplicas=maximum, minIdle=min_idle)
    decision, _ = decide(pool(autoscaling=spec, status=demand_status(queued, busy=busy)), Window(), T0)
    assert (decision.replicas, decision.wanted) == (want, want)


def test_the_scaling_message_names_the_buffer_and_what_max_left_of_it() -> None:
    spec = auto(minIdle=2, maxReplicas=5)
    full, _ = decide(pool(autoscaling=spec, status=demand_status(1, busy=1)), Window(), T0)
    assert full.message == "4 runner(s) for 1 queued, 1 busy job(s) + 2 idle (minIdle); min 0, max 5"
    capped, _ = decide(pool(autoscaling=spec, status=demand_status(0, busy=4)), Window(), T0)
    assert capped.message == (
        "5 runner(s) for 0 queued, 4 busy job(s) + 1 of minIdle 2 idle (max caps the buffer); min 0, max 5"
    )
    plain, _ = decide(pool(autoscaling=auto(), status=demand_status(1)), Window(), T0)
    assert "idle" not in plain.message


def test_a_busy_runner_github_lists_before_any_delivery_starts_the_next_idle_one() -> None:
    """No webhook saw the job: the runner turning busy is what restores the buffer."""
    spec = auto(minIdle=2)
    decision, _ = decide(pool(autoscaling=spec, status=demand_status(0, runners_busy=1)), Window(), T0)
    assert decision.replicas == 3


def test_the_buffer_scales_down_after_the_delay_to_min_idle_not_to_zero() -> None:
    spec = auto(minIdle=2, scaleDownDelay="1m")
    up, window = decide(pool(autoscaling=spec, status=demand_status(3, desired=2)), Window(), T0)
    assert up.replicas == 5
    later = T0 + timedelta(seconds=10)
    held, window = decide(pool(autoscaling=spec, status=demand_status(0, desired=5)), window, later)
    assert (held.replicas, held.wanted, held.reason) == (5, 2, "WaitingToScaleDown")
    assert held.message.startswith("holding 5 for scaleDownDelay 1m (demand wants 2): 0 queued"), held.message
    assert held.held_by(3).replicas == 3, "used-up runners are not replaced while the delay holds"
    down, _ = decide(
        pool(autoscaling=spec, status=demand_status(0, desired=5)), window, later + timedelta(minutes=1)
    )
    assert (down.replicas, down.reason) == (2, "FollowingDemand")


def test_window_holds_the_peak_from_when_demand_fell() -> None:
    delay = timedelta(minutes=5)
    window = Window().add(T0, 5).add(T0 + timedelta(minutes=4), 1)  # fell at 4 min: 5 holds until 9
    at8 = T0 + timedelta(minutes=8)
    assert window.expire(at8, delay).top(at8, delay) == (5, 60.0)
    at9 = T0 + timedelta(minutes=9)
    assert window.expire(at9, delay).top(at9, delay) == (1, None)
    at10 = T0 + timedelta(minutes=10)
    up = window.expire(at9, delay).add(at10, 7)  # up at once
    assert up.expire(at10, delay).top(at10, delay) == (7, None)
    assert window.items[0] == (T0 + timedelta(minutes=4), 5), "a window is a value: adding made a new one"


def test_scales_up_at_once_and_down_only_after_the_delay() -> None:
    spec = auto(minReplicas=0, maxReplicas=4, scaleDownDelay="2m")
    first, window = decide(pool(autoscaling=spec, status=demand_status(0, desired=0)), Window(), T0)
    assert (first.replicas, first.reason) == (0, "FollowingDemand")
    up, window = decide(pool(autoscaling=spec, status=demand_status(3, desired=0)), window, T0)
    assert (up.replicas, up.wanted, up.reason) == (3, 3, "FollowingDemand")
    later = T0 + timedelta(seconds=30)
    held, window = decide(pool(autoscaling=spec, status=demand_status(0, desired=3)), window, later)
    assert (held.replicas, held.reason, held.recheck_after, held.wanted) == (
        3,
        "WaitingToScaleDown",
        120.0,
        0,
    )
    assert held.message.startswith("holding 3 for scaleDownDelay 2m (demand wants 0)"), held.message
    down, _ = decide(
        pool(autoscaling=spec, status=demand_status(0, desired=3)), window, later + timedelta(seconds=120)
    )
    assert (down.replicas, down.reason) == (0, "FollowingDemand")


def test_busy_runners_github_lists_count_even_without_deliveries() -> None:
    decision, _ = decide(
        pool(autoscaling=auto(maxReplicas=4), status=demand_status(1, busy=0, runners_busy=2)), Window(), T0
    )
    assert decision.replicas == 3


def test_a_new_leader_does_not_scale_down_before_the_delay() -> None:
    spec = auto(scaleDownDelay="1m")
    stored = pool(autoscaling=spec, status=demand_status(0, desired=4))
    held, window = decide(stored, Window(), T0)  # no history: the last decision stands for one delay
    assert held.replicas == 4
    after, _ = decide(stored, window, T0 + timedelta(minutes=1))
    assert after.replicas == 0


def test_fixed_pools_keep_spec_replicas() -> None:
    decision, window = decide(pool(replicas=3, status=demand_status(9)), Window(), T0)
    assert (decision, window) == (Decision.fixed(3), Window())


def test_the_hold_keeps_runners_that_are_up_and_makes_no_new_one() -> None:
    held = Decision(5, "WaitingToScaleDown", "holding 5", 10.0, wanted=1)
    assert held.held_by(3).replicas == 3, "two used-up runners are not replaced while only the delay holds"
    assert held.held_by(0).replicas == 1, "never below what demand wants"
    assert held.held_by(7).replicas == 5


def test_runner_managers_read_the_decision_from_the_pool() -> None:
    assert desired_replicas(pool(replicas=3, status={"desiredReplicas": 9})) == 3, "fixed: spec.replicas"
    assert desired_replicas(pool(autoscaling=auto(), status=demand_status(2, desired=2))) == 2
    assert desired_replicas(pool(autoscaling=auto(), status=demand_status(2))) is None, "no decision yet"


def test_a_scale_set_wants_the_jobs_github_assigned_it_plus_its_idle_buffer() -> None:
    """clamp(min, assignedJobs + minIdle, max), as ARC's scale sets; webhook or polled demand
    and GitHub's busy listing do not count for it (GitHub already counted them as assigned)."""
    spec = auto(minReplicas=1, maxReplicas=6, minIdle=1)
    assigned = {"id": 7, "assignedJobs": 4, "runningJobs": 1}
    seen = {**demand_status(9, busy=9, runners_busy=9), "scaleSet": assigned}
    decision, _ = decide(pool(autoscaling=spec, status=seen, scaleSet={"name": "arc"}), Window(), T0)
    assert (decision.replicas, decision.reason) == (5, "FollowingDemand")
    assert "3 queued, 1 busy job(s) + 1 idle (minIdle)" in decision.message
    capped = {"scaleSet": {"id": 7, "assignedJobs": 40, "runningJobs": 6}}
    full, _ = decide(pool(autoscaling=spec, status=capped, scaleSet={"name": "arc"}), Window(), T0)
    assert full.replicas == 6
    unknown, _ = decide(pool(autoscaling=spec, scaleSet={"name": "arc"}), Window(), T0)
    assert unknown.replicas == 1, "no session yet: no job assigned, the minimum (and buffer) only"
