"""The pure decisions: which runners go, which pods are replaced, how the listing slows down.

Tables, so that every combination that matters is one line and the safety rules (a busy
runner and its pod are never deleted) are checked against every other condition.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api, naming
from runnerpool.domain import parse_duration
from runnerpool.github.budget import listing_cost, next_listing_delay
from runnerpool.github.types import RateLimit, Runner
from runnerpool.naming import BUSY_ANNOTATIONS, BUSY_LABEL
from runnerpool.runners.lifecycle import (
    Action,
    BusyMark,
    PodView,
    busy_mark_change,
    decide_pod,
    drained,
    hurried_grace,
    looked_up,
    outlived_stop,
    plan,
    runners_to_collect,
)
from runnerpool.runners.listing import pool_runners, runner_counts

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RUNNING = "running"
DAY = timedelta(hours=24)


def runner(name: str = "pod-a", *, busy: bool = False, status: str = "online", id_: int = 1) -> Runner:
    return Runner(id=id_, name=name, status=status, busy=busy, labels=("self-hosted", "ns/pool"))


def pod_json(
    name: str = "pod-a",
    *,
    age: timedelta = timedelta(minutes=5),
    phase: str = "Running",
    state: str | None = "running",
    restarts: int = 0,
    deleting: bool = False,
    marked: bool = False,
    annotations: dict[str, str] | None = None,
    started: timedelta | None = None,
    waiting: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if deleting:
        meta["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    if marked:
        meta["labels"] = {BUSY_LABEL: "true"}
    if annotations is not None:
        meta["annotations"] = annotations
    statuses = []
    if state is not None:
        detail: dict[str, Any] = {}
        if started is not None:
            detail["startedAt"] = (NOW - started).strftime("%Y-%m-%dT%H:%M:%SZ")
        if waiting is not None:
            detail["reason"] = waiting
        statuses = [
            {
                "name": "runner",
                "restartCount": restarts,
                "state": {state: detail},
                "ready": state == "running",
            },
            {"name": "sidecar", "restartCount": 9, "state": {"terminated": {}}, "ready": False},
        ]
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": statuses}}


def pod(**kwargs: Any) -> PodView:
    return PodView.of(pod_json(**kwargs))


# -- reading pods ----------------------------------------------------------------------------


def test_pod_view_reads_the_runner_container_only() -> None:
    view = pod(restarts=2, marked=True, annotations={"karpenter.sh/do-not-disrupt": "true", "x": "y"})
    assert view == PodView(
        name="pod-a",
        uid="uid-pod-a",
        resource_version="7",
        created=NOW - timedelta(minutes=5),
        deleting=False,
        phase="Running",
        runner_running=True,
        runner_restarts=2,
        runner_terminated=False,
        busy_marked=True,
        busy_annotations=frozenset({"karpenter.sh/do-not-disrupt"}),
    )


def test_a_pending_pod_without_statuses_has_not_finished() -> None:
    view = PodView.of({"metadata": {"name": "p"}, "status": {}})
    assert (view.phase, view.runner_running, view.used_up, view.created) == ("Pending", False, False, None)


@pytest.mark.parametrize(
    ("kwargs", "finished", "running"),
    [
        ({}, False, True),
        ({"state": "waiting"}, False, False),
        ({"state": None, "phase": "Pending"}, False, False),
        ({"restarts": 1}, True, True),
        ({"restarts": 1, "state": "waiting"}, True, False),
        ({"state": "terminated"}, True, False),
        ({"phase": "Succeeded", "state": "terminated"}, True, False),
        ({"phase": "Failed", "state": "terminated"}, True, False),
        # A finished phase wins over a stale "running" container state.
        ({"phase": "Succeeded"}, True, False),
    ],
)
def test_finished_and_running(kwargs: dict[str, Any], finished: bool, running: bool) -> None:
    view = pod(**kwargs)
    assert (view.used_up, view.runner_running) == (finished, running)


# -- pod decisions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_kwargs", "listed", "deadline", "expected"),
    [
        # Healthy pods stay.
        ({}, runner(), None, (Action.KEEP, "Idle", False)),
        ({}, None, None, (Action.KEEP, "RunnerNotListed", False)),
        ({"state": None, "phase": "Pending"}, None, None, (Action.KEEP, "RunnerNotListed", False)),
        # One job per pod: finished, not running any more.
        (
            {"phase": "Succeeded", "state": "terminated"},
            None,
            None,
            (Action.DELETE_POD, "RunnerFinished", False),
        ),
        (
            {"phase": "Failed", "state": "terminated"},
            None,
            None,
            (Action.DELETE_POD, "RunnerFinished", False),
        ),
        ({"state": "terminated"}, None, None, (Action.DELETE_POD, "RunnerFinished", False)),
        ({"restarts": 1, "state": "waiting"}, None, None, (Action.DELETE_POD, "RunnerFinished", False)),
        # Not running but still listed: deregister first; a 404 then proves nothing runs.
        (
            {"state": "terminated"},
            runner(status="offline"),
            None,
            (Action.DEREGISTER_AND_DELETE, "RunnerFinished", True),
        ),
        # Restarted and running again: it may have registered; only GitHub's 204 frees the pod.
        ({"restarts": 1}, runner(), None, (Action.DEREGISTER_AND_DELETE, "RunnerRestarted", False)),
        ({"restarts": 1}, None, None, (Action.KEEP, "RunnerNotListed", False)),
        # recreateDeadline.
        ({"age": DAY}, runner(), DAY, (Action.DEREGISTER_AND_DELETE, "RecreateDeadline", False)),
        ({"age": DAY - timedelta(seconds=1)}, runner(), DAY, (Action.KEEP, "Idle", False)),
        ({"age": 2 * DAY}, None, DAY, (Action.KEEP, "RunnerNotListed", False)),
        ({"age": 2 * DAY, "state": "waiting"}, None, DAY, (Action.DELETE_POD, "RecreateDeadline", False)),
        (
            {"age": 2 * DAY, "state": "waiting"},
            runner(status="offline"),
            DAY,
            (Action.DEREGISTER_AND_DELETE, "RecreateDeadline", True),
        ),
        ({"age": 10 * DAY}, runner(), None, (Action.KEEP, "Idle", False)),
        # Already going.
        ({"deleting": True, "phase": "Succeeded"}, None, None, (Action.KEEP, "Terminating", False)),
    ],
)
def test_decide_pod(
    pod_kwargs: dict[str, Any],
    listed: Runner | None,
    deadline: timedelta | None,
    expected: tuple[Action, str, bool],
) -> None:
    decision = decide_pod(pod(**pod_kwargs), listed, NOW, deadline)
    assert (decision.action, decision.reason, decision.delete_if_gone) == expected
    assert decision.runner == listed or decision.action is Action.KEEP


_POD_STATES: list[dict[str, Any]] = [
    {},
    {"state": None, "phase": "Pending"},
    {"state": "waiting"},
    {"state": "terminated"},
    {"restarts": 3},
    {"restarts": 1, "state": "waiting"},
    {"phase": "Succeeded", "state": "terminated"},
    {"phase": "Failed", "state": "terminated"},
    {"deleting": True},
]


@pytest.mark.parametrize(
    ("pod_kwargs", "age", "deadline", "status"),
    list(
        itertools.product(
            _POD_STATES,
            [timedelta(0), DAY, 30 * DAY],
            [None, timedelta(seconds=1), DAY],
            ["online", "offline"],
        )
    ),
)
def test_a_busy_runners_pod_is_never_deleted(
    pod_kwargs: dict[str, Any], age: timedelta, deadline: timedelta | None, status: str
) -> None:
    view = pod(age=age, **pod_kwargs)
    busy = runner(busy=True, status=status)
    decision = decide_pod(view, busy, NOW, deadline)
    assert decision.action is Action.KEEP
    whole = plan([view], [busy], NOW, deadline)
    assert whole.replace == () and whole.collect == ()


@pytest.mark.parametrize(
    ("pod_kwargs", "age", "deadline"), list(itertools.product(_POD_STATES, [DAY], [None, DAY]))
)
def test_a_running_container_is_only_ever_freed_by_deregistration(
    pod_kwargs: dict[str, Any], age: timedelta, deadline: timedelta | None
) -> None:
    """A pod whose runner process may be alive is never deleted on the listing's word alone."""
    view = pod(age=age, **pod_kwargs)
    for listed in (None, runner(), runner(status="offline")):
        decision = decide_pod(view, listed, NOW, deadline)
        if view.runner_running:
            assert decision.action is not Action.DELETE_POD
            assert not decision.delete_if_gone


# -- a deleted pool's pods -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("started", "kept"),
    [(None, True), (timedelta(0), True), (timedelta(seconds=1), True), (timedelta(seconds=2), False)],
    ids=["start-unknown", "started-as-listed", "started-1s-before", "started-2s-before"],
)
def test_a_drained_pools_running_pod_that_was_not_listed_waits_for_a_listing_after_its_start(
    started: timedelta | None, kept: bool
) -> None:
    """Its runner registered before the container started: a listing that began well after
    that would show it (busy, perhaps); an older one may have missed it."""
    decision = drained(pod(started=started), None, listing_started=NOW)
    assert decision.action is (Action.KEEP if kept else Action.LOOK_UP_AND_DELETE)
    assert decision.runner is None


def test_a_drained_pools_running_pod_goes_only_once_github_has_no_runner_of_its_name() -> None:
    """A later listing may have missed its runner too (pages shift while they are read): the
    pod goes with its version once the lookup by name finds none, or as a deregistered
    runner's once the lookup found one and the drain deregistered it."""
    doubt = drained(pod(started=timedelta(minutes=1)), None, listing_started=NOW)
    assert doubt.action is Action.LOOK_UP_AND_DELETE
    none = looked_up(doubt, None)
    assert (none.action, none.runner) == (Action.DELETE_POD, None)  # with its version
    found = looked_up(doubt, runner())
    assert (found.action, found.runner) == (Action.DELETE_POD, runner())  # any version of it
    listed = drained(pod(started=timedelta(minutes=1)), runner(), NOW)
    assert looked_up(listed, None) is listed


def test_a_drained_pools_pod_goes_with_its_deregistered_runner_or_a_stopped_container() -> None:
    gone = drained(pod(started=timedelta(0)), runner(), NOW)
    assert gone.action is Action.DELETE_POD and gone.runner is not None  # any version of the pod
    for state in ("waiting", "terminated", None):
        stopped = drained(pod(state=state), None, NOW)
        assert stopped.action is Action.DELETE_POD and stopped.runner is None  # with its version
    assert drained(pod(deleting=True), runner(), NOW).action is Action.KEEP


def told_to_stop(ago: timedelta, *, grace: int = 3690, state: str | None = "running") -> PodView:
    """A deleted pool's pod told to stop ``ago`` before NOW, with ``grace``."""
    raw = pod_json(state=state, started=timedelta(hours=1))
    raw["metadata"]["deletionTimestamp"] = (NOW - ago + timedelta(seconds=grace)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    raw["metadata"]["deletionGracePeriodSeconds"] = grace
    return PodView.of(raw)


@pytest.mark.parametrize(
    ("ago", "grace", "state", "hurried"),
    [
        (timedelta(seconds=59), 3690, "running", False),
        (timedelta(seconds=60), 3690, "running", True),
        (timedelta(minutes=30), 3690, "running", True),
        (timedelta(seconds=120), 151, "running", True),
        (timedelta(seconds=120), 150, "running", False),
        (timedelta(seconds=60), 3690, "terminated", False),
        (timedelta(seconds=3690), 3690, "running", False),
    ],
    ids=[
        "59s",
        "60s",
        "30min",
        "31s-of-grace-left",
        "30s-left-told-again",
        "container-stopped",
        "past-its-grace",
    ],
)
def test_a_drained_pools_pod_whose_runner_outlives_its_stop_is_told_again_briefly(
    ago: timedelta, grace: int, state: str, hurried: bool
) -> None:
    """An idle runner stops within seconds of its SIGTERM. One still running a minute later (a
    lost signal, a hung listener) would hold the pool's finalizer and its namespace's deletion
    for the pod's whole grace, an hour. With 30 s or less of it left it was told again already
    (or is about to be killed); past it, its node does not answer (``overdue``)."""
    view = told_to_stop(ago, grace=grace, state=state)
    assert outlived_stop(view, NOW) is hurried
    unlisted, listed = drained(view, None, NOW), drained(view, runner(), NOW)
    if not hurried:
        assert (unlisted.action, listed.action) == (Action.KEEP, Action.KEEP)
        return
    # The API server counts the new grace from the first deletion: it ends 30 s from now.
    again = int(ago.total_seconds()) + 30
    # Not listed: only once GitHub, asked by its name, has no runner of it (a busy one would be).
    assert (unlisted.action, unlisted.grace_seconds) == (Action.LOOK_UP_AND_DELETE, again)
    none = looked_up(unlisted, None)
    assert (none.action, none.runner, none.grace_seconds) == (Action.DELETE_POD, None, again)
    assert looked_up(unlisted, runner()).grace_seconds == again
    # Listed: the drain has just deregistered its idle runner (a busy one keeps every pod).
    assert (listed.action, listed.runner, listed.grace_seconds) == (Action.DELETE_POD, runner(), again)


def test_a_second_deletion_ends_the_grace_thirty_seconds_from_now_as_the_api_server_counts_it() -> None:
    """k8s.io/apiserver's BeforeDelete: new deletionTimestamp = first deletion + new grace. A plain
    30 would have ended a grace that was over already: a kill without a second chance."""
    view = told_to_stop(timedelta(seconds=75))
    assert view.stop_asked == NOW - timedelta(seconds=75)
    assert hurried_grace(view, NOW) == 105
    later = NOW + timedelta(seconds=0.5)  # whole seconds, rounded up: never less than 30 s left
    assert view.stop_asked + timedelta(seconds=hurried_grace(view, later)) - later == timedelta(seconds=30.5)


# -- garbage collection ----------------------------------------------------------------------


def test_only_offline_idle_runners_without_a_pod_are_collected() -> None:
    runners = [
        runner("gone-offline", status="offline", id_=1),
        runner("gone-busy", status="offline", busy=True, id_=2),
        runner("gone-online", status="online", id_=3),
        runner("pod-a", status="offline", id_=4),
        runner("pod-b", status="online", busy=True, id_=5),
    ]
    assert [r.id for r in runners_to_collect(runners, ["pod-a", "pod-b"])] == [1]
    assert runners_to_collect(runners, []) == [runners[0], runners[3]]


def test_the_offline_idle_runner_of_a_pod_stuck_terminating_is_collected() -> None:
    """A dead node: its pod keeps its deletionTimestamp for as long as the Node object exists,
    so waiting for the pod to vanish would leave its runner registered on GitHub as long."""
    stuck = pod(age=timedelta(hours=6), deleting=True)
    result = plan([stuck], [runner(status="offline")], NOW, None, timedelta(minutes=15))
    assert [r.name for r in result.collect] == ["pod-a"]
    assert result.replace == ()  # the pod is already being deleted


@pytest.mark.parametrize(
    "listed",
    [runner(status="online"), runner(status="offline", busy=True), runner(status="online", busy=True)],
    ids=["online-idle", "offline-busy", "online-busy"],
)
def test_the_runner_of_a_terminating_pod_is_kept_while_online_or_busy(listed: Runner) -> None:
    """Still connected (a graceful shutdown under way) or running a job: not ours to delete."""
    assert plan([pod(deleting=True)], [listed], NOW, None, timedelta(minutes=15)).collect == ()


def test_plan_combines_collection_replacement_and_busy_marks() -> None:
    pods = [
        pod(name="finished", phase="Succeeded", state="terminated"),
        pod(name="busy"),
        pod(name="was-busy", marked=True, annotations=dict(BUSY_ANNOTATIONS)),
        pod(name="idle"),
    ]
    runners = [
        runner("busy", busy=True, id_=1),
        runner("was-busy", id_=2),
        runner("idle", id_=3),
        runner("orphan", status="offline", id_=4),
    ]
    result = plan(pods, runners, NOW, None)
    assert [r.id for r in result.collect] == [4]
    assert [(d.pod.name, d.action, d.reason) for d in result.replace] == [
        ("finished", Action.DELETE_POD, "RunnerFinished")
    ]
    assert [(m.pod.name, m.busy) for m in result.marks] == [("busy", True), ("was-busy", False)]


def test_two_registrations_under_one_name_count_as_busy_if_either_is() -> None:
    view = pod(name="twin", restarts=1)
    idle, busy = runner("twin", id_=1), runner("twin", busy=True, id_=2)
    for runners in ([idle, busy], [busy, idle]):
        assert plan([view], runners, NOW, None).replace == ()


# -- busy marks ------------------------------------------------------------------------------

OURS = dict(BUSY_ANNOTATIONS)


@pytest.mark.parametrize(
    ("marked", "annotations", "listed", "deleting", "change"),
    [
        (False, None, runner(busy=True), False, True),
        (True, OURS, runner(busy=True), False, "unchanged"),
        (True, None, runner(busy=True), False, True),  # someone stripped the annotations
        (True, OURS, runner(), False, False),
        (True, OURS, None, False, "unchanged"),  # not listed: the listing may have missed it
        (False, {"karpenter.sh/do-not-disrupt": "true"}, runner(), False, "unchanged"),  # not ours
        (False, None, None, False, "unchanged"),
        (False, None, runner(busy=True), True, "unchanged"),
    ],
)
def test_busy_marks(
    marked: bool, annotations: dict[str, str] | None, listed: Runner | None, deleting: bool, change: Any
) -> None:
    view = pod(marked=marked, annotations=annotations, deleting=deleting)
    expected = None if change == "unchanged" else BusyMark(view, change)
    assert busy_mark_change(view, listed) == expected


def test_a_busy_mark_stays_until_a_listing_shows_the_runner_idle_or_its_container_stops() -> None:
    """A paged listing can miss a busy runner (one runner leaving and another registering while
    its pages are read shift it onto a page already read): dropping the mark on that word let an
    eviction take the job until the next listing."""
    running = pod(marked=True, annotations=OURS)
    assert busy_mark_change(running, None) is None
    assert busy_mark_change(running, runner()) == BusyMark(running, False)
    stopped = pod(marked=True, annotations=OURS, state="terminated")
    assert busy_mark_change(stopped, None) == BusyMark(stopped, False)


def test_unmarking_removes_only_the_operators_values() -> None:
    view = pod(
        marked=True,
        annotations={
            "karpenter.sh/do-not-disrupt": "true",
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "no",
        },
    )
    assert BusyMark(view, False).patch() == {
        "metadata": {"labels": {BUSY_LABEL: None}, "annotations": {"karpenter.sh/do-not-disrupt": None}}
    }
    assert BusyMark(view, True).patch() == {"metadata": {"labels": {BUSY_LABEL: "true"}, "annotations": OURS}}


def test_registration_timeout_replaces_only_pods_whose_container_is_not_running() -> None:
    timeout = timedelta(minutes=15)
    stuck = pod(age=timedelta(hours=1), state="waiting")
    registering = pod(age=timedelta(hours=1))
    young = pod(age=timedelta(minutes=1), state="waiting")
    assert decide_pod(stuck, None, NOW, None, timeout).action is Action.DELETE_POD
    assert decide_pod(registering, None, NOW, None, timeout).action is Action.KEEP
    assert decide_pod(young, None, NOW, None, timeout).action is Action.KEEP
    assert decide_pod(stuck, runner(), NOW, None, timeout).action is Action.KEEP


def _init_waiting(pod: dict[str, Any], reason: str = "ImagePullBackOff") -> dict[str, Any]:
    """``pod`` with its register init container waiting for ``reason``."""
    register = {"name": "register", "restartCount": 0, "state": {"waiting": {"reason": reason}}}
    return {**pod, "status": {**pod["status"], "initContainerStatuses": [register]}}


def test_a_jit_pod_whose_container_never_ran_is_replaced_after_the_registration_timeout() -> None:
    """A JIT runner is registered when its Secret is filled, before the pod runs: a pod stuck
    pulling its image kept its slot, and an offline runner on GitHub, until GitHub dropped the
    runner a day later. Deregistered first (busy-safe), then deleted."""
    timeout = timedelta(minutes=15)
    # The operator's register init container runs the runner's image first: it is the one that
    # shows the failed pull, while the runner container waits PodInitializing.
    stuck = PodView.of(
        _init_waiting(pod_json(age=timedelta(hours=1), state="waiting", waiting="PodInitializing"))
    )
    young = pod(age=timedelta(minutes=1), state="waiting", waiting="ImagePullBackOff")
    # Slow, not stuck: the template's own init containers run after register (the runner is
    # listed offline meanwhile), and a pod may wait for a node.
    for slow in (pod(age=timedelta(hours=1), state="waiting", waiting="PodInitializing"), pod(state=None)):
        assert decide_pod(slow, runner(status="offline"), NOW, None, timeout).action is Action.KEEP
    decision = decide_pod(stuck, runner(status="offline"), NOW, None, timeout)
    assert (decision.action, decision.reason) == (Action.DEREGISTER_AND_DELETE, "RegistrationTimeout")
    assert decision.delete_if_gone, "a runner gone meanwhile leaves a pod that never ran"
    assert decide_pod(young, runner(status="offline"), NOW, None, timeout).action is Action.KEEP
    assert decide_pod(stuck, runner(status="offline"), NOW, None, None).action is Action.KEEP
    ran = pod(age=timedelta(hours=1), restarts=1, state="waiting", waiting="ImagePullBackOff")
    assert decide_pod(ran, runner(status="offline"), NOW, None, timeout).reason != "RegistrationTimeout"


# -- durations, pools, counts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("24h", 86400), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("1h0m1s", 3601)]
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1d", "1.5h", "h", "1h ", "-1h"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_pool_runners_by_label_case_insensitively() -> None:
    mine = Runner(id=1, name="a", status="online", busy=False, labels=("self-hosted", "NS/Pool"))
    other = Runner(id=2, name="b", status="online", busy=False, labels=("ns/pool2",))
    prefix = Runner(id=3, name="c", status="online", busy=False, labels=("ns/poo",))
    assert pool_runners([mine, other, prefix], "ns", "pool") == [mine]
    assert naming.pool_runner_label("ns", "pool") == "ns/pool"


def test_runner_counts_busy_wins_over_offline() -> None:
    runners = [
        runner(id_=1),
        runner(busy=True, id_=2),
        runner(busy=True, status="offline", id_=3),
        runner(status="offline", id_=4),
    ]
    assert runner_counts(runners) == api.RunnerCounts(online=1, busy=2, offline=1)


# -- listing delay ---------------------------------------------------------------------------

T = 1_800_000_000.0


def budget(remaining: int, limit: int = 5000, reset_in: float = 3600) -> RateLimit:
    return RateLimit(remaining=remaining, limit=limit, reset=T + reset_in)


@pytest.mark.parametrize(
    ("rate", "kwargs", "delay"),
    [
        (None, {}, 60),
        (budget(5000), {}, 60),
        (budget(500), {}, 60),  # exactly 10 %: not low yet
        (budget(499), {}, 60),  # low, but 499/2 listings fit easily into the hour
        (budget(100), {}, 72.02),  # 3601 s / 50 listings
        (budget(40), {}, 180.05),
        (budget(40), {"scopes": 2}, 360.1),
        (budget(40), {"pages": 3}, 540.15),
        (budget(1), {}, 3601),  # never past the reset
        (budget(0, reset_in=600), {}, 601),
        (budget(0, reset_in=10), {}, 60),  # the interval is a floor
        (budget(0, reset_in=-30), {}, 60),  # a reset in the past: refilled
        (budget(5000), {"retry_after": 90}, 90),
        (budget(40), {"retry_after": 900}, 900),
        (RateLimit(remaining=0, limit=0, reset=T), {}, 60),  # GHES without limits
    ],
)
def test_next_listing_delay(rate: RateLimit | None, kwargs: dict[str, Any], delay: float) -> None:
    assert next_listing_delay(60, rate, T, **kwargs) == pytest.approx(delay)


@pytest.mark.parametrize(("runners", "pages"), [(0, 1), (1, 1), (100, 1), (101, 2), (250, 3)])
def test_listing_cost(runners: int, pages: int) -> None:
    assert listing_cost(runners) == pages
