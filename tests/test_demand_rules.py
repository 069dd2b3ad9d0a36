"""The pure demand rules: which pools a job counts for, how demand changes, how pools scale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api
from runnerpool.demand import record
from runnerpool.demand.autoscaler import Autoscaler
from runnerpool.demand.matching import job_matches, pool_labels
from runnerpool.demand.scaling import Window, recommend
from runnerpool.github.jobs import Job, parse_delivery
from tests.demand_payloads import API, delivery, job_object

T0 = datetime(2030, 1, 20, 17, 0, tzinfo=UTC)


def pool(
    name: str = "gpu",
    namespace: str = "ci",
    *,
    autoscaling: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> api.RunnerPool:
    body: dict[str, Any] = {"repository": "octo-org/hello-world", **spec}
    if autoscaling is not None:
        body["autoscaling"] = autoscaling
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": body,
            "status": status or {},
        }
    )


def job(job_id: int, status: str, labels: list[str] | None = None, **kw: Any) -> Job:
    repository = kw.pop("repository", "octo-org/hello-world")
    base = kw.get("api", API)
    labels = ["self-hosted"] if labels is None else labels
    return parse_delivery(
        delivery(
            job_object(job_id, status, labels, repository=repository, **kw), repository=repository, api=base
        )
    )


# ------------------------------------------------------------------ matching


def test_pool_labels_are_what_its_runners_register_with() -> None:
    assert pool_labels(pool(labels=["GPU"])) == {"self-hosted", "linux", "x64", "ci/gpu", "gpu"}
    arm = pool(nodeSelector={"kubernetes.io/arch": "arm64"})
    assert "arm64" in pool_labels(arm) and "x64" not in pool_labels(arm)


@pytest.mark.parametrize(
    ("labels", "matches"),
    [
        (["self-hosted"], True),
        (["self-hosted", "gpu"], True),
        (["Self-Hosted", "Linux", "X64", "GPU"], True),  # GitHub compares case-insensitively
        (["self-hosted", "ci/gpu"], True),
        (["self-hosted", "gpu", "big-disk"], False),  # one label the pool lacks
        (["ubuntu-latest"], False),  # a GitHub-hosted runner's job
        (["self-hosted", "ARM64"], False),
        (["self-hosted", "other-ns/gpu"], False),
        ([], False),  # runner group only: nothing says it wants this pool
    ],
)
def test_a_job_counts_where_the_pool_has_all_its_labels(labels: list[str], matches: bool) -> None:
    assert job_matches(pool(labels=["gpu"]), job(1, "queued", labels), API) is matches


def test_a_job_counts_only_in_its_own_scope_and_host() -> None:
    org_pool = pool(repository=None, organization="Octo-Org")
    assert job_matches(org_pool, job(1, "queued", repository="octo-org/any-repo"), API)
    assert not job_matches(org_pool, job(1, "queued", repository="other-org/any-repo"), API)
    assert job_matches(pool(repository="Octo-Org/Hello-World"), job(1, "queued"), API)
    assert not job_matches(pool(repository="octo-org/other"), job(1, "queued"), API)
    ghes = pool(githubApiUrl="https://ghe.example.com/api/v3")
    assert not job_matches(ghes, job(1, "queued"), API)
    assert job_matches(ghes, job(1, "queued", api="https://ghe.example.com/api/v3"), API)


# ------------------------------------------------------------------ demand


#: The pool's runners: its pods' names. "gpu-2-xyz12" would pass a name-prefix test but is
#: another pool's ("gpu-2") runner.
OURS = frozenset({"gpu-abcde"})


def auto(**kw: Any) -> dict[str, Any]:
    return {"maxReplicas": 10, **kw}


def test_states_only_move_forward() -> None:
    demand, moved = record.apply(None, [job(1, "queued"), job(2, "queued")], T0, runners=OURS)
    assert (demand.queued, demand.busy, len(moved)) == (2, 0, 2)
    runner = "gpu-abcde"
    demand, _ = record.apply(demand, [job(1, "in_progress", runner=runner)], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (1, 1)
    demand, _ = record.apply(demand, [job(1, "completed", runner=runner)], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (1, 0)
    # A late in_progress or queued delivery of job 1 cannot bring it back.
    again, moved = record.apply(
        demand, [job(1, "queued"), job(1, "in_progress", runner=runner)], T0, runners=OURS
    )
    assert again == demand and moved == []


def test_a_job_taken_by_another_pools_runner_no_longer_counts_here() -> None:
    demand, _ = record.apply(None, [job(1, "queued")], T0, runners=OURS)
    demand, _ = record.apply(demand, [job(1, "in_progress", runner="gpu-2-xyz12")], T0, runners=OURS)
    assert (demand.queued, demand.busy) == (0, 0)


def test_states_that_want_no_runner_are_not_tracked() -> None:
    demand, _ = record.apply(None, [job(1, "waiting")], T0, runners=OURS)
    assert demand.jobs == {}


def test_completed_jobs_are_forgotten_after_a_while() -> None:
    demand, _ = record.apply(None, [job(1, "completed")], T0, runners=OURS)
    assert "1" in demand.jobs
    later, _ = record.apply(demand, [job(2, "queued")], T0 + record.COMPLETED_TTL, runners=OURS)
    assert set(later.jobs) == {"2"}


def test_repair_ends_tracked_jobs_a_poll_no_longer_sees_after_the_grace() -> None:
    demand, _ = record.apply(None, [job(1, "queued"), job(2, "queued")], T0, runners=OURS)
    grace = timedelta(seconds=60)
    soon, _ = record.repair(
        demand,
        [job(2, "queued")],
        ["octo-org/hello-world"],
        now=T0 + timedelta(seconds=5),
        grace=grace,
        runners=OURS,
    )
    assert soon.queued == 2, "a job just queued may not be listed yet"
    late, _ = record.repair(
        demand,
        [job(2, "queued"), job(3, "queued")],
        ["octo-org/hello-world"],
        now=T0 + grace,
        grace=grace,
        runners=OURS,
    )
    assert (late.queued, late.jobs["1"].state) == (2, "completed")
    unpolled, _ = record.repair(demand, [], ["octo-org/other"], now=T0 + grace, grace=grace, runners=OURS)
    assert unpolled.queued == 2, "only repositories that were polled say anything"


def test_repair_ends_at_once_a_job_an_earlier_poll_listed() -> None:
    """GitHub lists a job until it completes: listed once and gone now, it has ended.

    Waiting out the grace for it kept a pool that polls (no webhook) a runner too many for a
    minute after every job (the demand benchmark's back-to-0 of 62 s).
    """
    demand, _ = record.apply(
        None, [job(1, "queued"), job(2, "in_progress", runner="gpu-abcde")], T0, runners=OURS
    )
    after, _ = record.repair(
        demand,
        [],
        ["octo-org/hello-world"],
        now=T0 + timedelta(seconds=30),
        grace=timedelta(seconds=60),
        runners=OURS,
        listed_before={"1", "2"},
    )
    assert (after.queued, after.busy) == (0, 0)
    assert {key: j.state for key, j in after.jobs.items()} == {"1": "completed", "2": "completed"}


# ------------------------------------------------------------------ scaling


@pytest.mark.parametrize(
    ("minimum", "maximum", "busy", "queued", "want"),
    [(0, 5, 0, 0, 0), (0, 5, 1, 2, 3), (2, 5, 0, 0, 2), (0, 5, 3, 9, 5), (1, 1, 0, 4, 1)],
)
def test_recommendation_is_clamped(minimum: int, maximum: int, busy: int, queued: int, want: int) -> None:
    assert recommend(minimum, maximum, busy, queued) == want


def test_window_holds_the_peak_from_when_demand_fell() -> None:
    window, delay = Window(), timedelta(minutes=5)
    window.add(T0, 5)
    window.add(T0 + timedelta(minutes=4), 1)  # demand fell at 4 min: 5 holds until 9 min
    assert window.decide(T0 + timedelta(minutes=8), delay) == (5, 60.0)
    assert window.decide(T0 + timedelta(minutes=9), delay) == (1, None)
    window.add(T0 + timedelta(minutes=10), 7)  # up at once
    assert window.decide(T0 + timedelta(minutes=10), delay) == (7, None)


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.seen.append((obj["metadata"]["name"], reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def demand_status(
    queued: int, busy: int = 0, desired: int | None = None, runners_busy: int = 0
) -> dict[str, Any]:
    status: dict[str, Any] = {"demand": {"queued": queued, "busy": busy}, "runners": {"busy": runners_busy}}
    if desired is not None:
        status["desiredReplicas"] = desired
    return status


def test_scales_up_at_once_and_down_only_after_the_delay_with_events() -> None:
    events, clock = Events(), Clock()
    scaler = Autoscaler(events, clock)
    spec = auto(minReplicas=0, maxReplicas=4, scaleDownDelay="2m")
    assert scaler.desired_replicas(pool(autoscaling=spec, status=demand_status(0, desired=0))) == 0
    up = scaler.decide(pool(autoscaling=spec, status=demand_status(3, desired=0)))
    assert up.replicas == 3
    clock.now += timedelta(seconds=30)
    held = scaler.decide(pool(autoscaling=spec, status=demand_status(0, desired=3)))
    assert (held.replicas, held.reason, held.recheck_after) == (3, "WaitingToScaleDown", 120.0)
    clock.now += timedelta(seconds=120)
    assert scaler.desired_replicas(pool(autoscaling=spec, status=demand_status(0, desired=3))) == 0
    assert [(reason, message.split(":")[0]) for _, reason, message in events.seen] == [
        ("ScaledUp", "0 -> 3 runners"),
        ("ScaledDown", "3 -> 0 runners"),
    ]


def test_busy_runners_github_lists_count_even_without_deliveries() -> None:
    scaler = Autoscaler(Events(), Clock())
    spec = auto(maxReplicas=4)
    assert (
        scaler.desired_replicas(pool(autoscaling=spec, status=demand_status(1, busy=0, runners_busy=2))) == 3
    )


def test_a_new_leader_does_not_scale_down_before_the_delay() -> None:
    clock = Clock()
    spec = auto(scaleDownDelay="1m")
    fresh = Autoscaler(Events(), clock)  # no history: the last decision stands for one delay
    assert fresh.desired_replicas(pool(autoscaling=spec, status=demand_status(0, desired=4))) == 4
    clock.now += timedelta(minutes=1)
    assert fresh.desired_replicas(pool(autoscaling=spec, status=demand_status(0, desired=4))) == 0


def test_fixed_pools_keep_spec_replicas() -> None:
    assert Autoscaler(Events(), Clock()).desired_replicas(pool(replicas=3, status=demand_status(9))) == 3
