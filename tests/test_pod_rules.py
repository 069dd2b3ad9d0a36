"""The pure rules of operator-owned runner pods: template, capacity, retirement.

The safety rules (a busy runner's pod is never picked; a rollout never goes below
``replicas`` registered runners) are checked against every combination of pool shapes.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api, children, naming
from runnerpool.github.types import Runner
from runnerpool.pods import scaling, template
from runnerpool.pods.expectations import Expectations, still_pending
from runnerpool.pods.spec_memo import SpecMemo
from runnerpool.runners.lifecycle import Action, PodDecision, PodView, plan
from runnerpool.runners.retirement import OUTDATED, SCALE_DOWN, retirements

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NEW, OLD = "newhash", "oldhash"


def pool(**spec: Any) -> api.RunnerPool:
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": "ci", "namespace": "team", "uid": "pool-uid"},
            "spec": {"organization": "octo-org", **spec},
        }
    )


# -- template --------------------------------------------------------------------------------


def test_runner_pod_is_owned_by_the_pool_and_labelled_with_its_template_hash() -> None:
    own_grace = pool(busyGracePeriod="1m", terminationGracePeriodSeconds=120)
    pod = template.runner_pod(own_grace, "img:1", "https://api.github.com")
    meta = pod["metadata"]
    assert meta["generateName"] == "ci-"
    assert meta["ownerReferences"][0]["uid"] == "pool-uid" and meta["ownerReferences"][0]["controller"]
    assert meta["labels"][naming.POOL_LABEL] == "ci"
    assert meta["labels"][naming.TEMPLATE_HASH_LABEL] == template.wanted_hash(
        own_grace, "img:1", "https://api.github.com"
    )
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    longest = "p" * api.MAX_POOL_NAME_LENGTH
    assert len(f"{longest}-") + 5 <= 63, "generateName adds 5 characters; hostnames are cut at 63"


def test_the_hash_changes_with_the_template_only() -> None:
    base = template.wanted_hash(pool(), "img:1", "https://api.github.com")
    assert base == template.wanted_hash(pool(), "img:1", "https://api.github.com")
    assert base == template.wanted_hash(pool(replicas=7), "img:1", "https://api.github.com")
    changed = [
        template.wanted_hash(pool(), "img:2", "https://api.github.com"),
        template.wanted_hash(pool(labels=["gpu"]), "img:1", "https://api.github.com"),
        template.wanted_hash(
            pool(busyGracePeriod="0s", terminationGracePeriodSeconds=5), "img:1", "https://api.github.com"
        ),
        template.wanted_hash(pool(busyGracePeriod="30m"), "img:1", "https://api.github.com"),
        template.wanted_hash(pool(), "img:1", "https://ghe.example.com/api/v3"),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_the_template_is_built_once_per_spec_whichever_version_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconciler and the runner managers ask with parses of different resourceVersions
    (every status write makes one): an equal spec is the same template, hashed once; a changed
    one is hashed again."""
    built: list[str] = []
    real = template.pod_template

    def counted(p: api.RunnerPool, image: str, url: str) -> dict[str, Any]:
        built.append(p.name)
        return real(p, image, url)

    monkeypatch.setattr(template, "pod_template", counted)
    monkeypatch.setattr(template, "_HASHES", SpecMemo())  # what other tests hashed is no concern here
    spec, url = {"labels": ["memo-once"]}, "https://api.github.com"
    first = template.wanted_hash(pool(**spec), "img:1", url)
    for _ in range(3):  # a new parse each time, as after each write of the pool
        assert template.wanted_hash(pool(**spec), "img:1", url) == first
    assert len(built) == 1
    assert template.wanted_hash(pool(**spec, busyGracePeriod="30m"), "img:1", url) != first
    assert len(built) == 2


def _runner_env(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(
    ("spec", "busy_seconds", "grace_seconds"),
    [
        ({}, 3600, 3600 + api.BUSY_EXIT_MARGIN_SECONDS),
        ({"busyGracePeriod": "1h30m"}, 5400, 5400 + api.BUSY_EXIT_MARGIN_SECONDS),
        ({"busyGracePeriod": "0s"}, 0, api.BUSY_EXIT_MARGIN_SECONDS),
        ({"busyGracePeriod": "10m", "terminationGracePeriodSeconds": 700}, 600, 700),
    ],
)
def test_a_busy_runner_gets_its_busy_grace_and_the_kubelet_waits_longer(
    spec: dict[str, Any], busy_seconds: int, grace_seconds: int
) -> None:
    """The entrypoint lets a signalled busy runner finish for the busy grace; SIGKILL comes later."""
    pod = template.runner_pod(pool(**spec), "img:1", "https://api.github.com")
    assert _runner_env(pod)["RUNNER_BUSY_GRACE_SECONDS"] == str(busy_seconds)
    assert pod["spec"]["terminationGracePeriodSeconds"] == grace_seconds
    assert grace_seconds > busy_seconds


def test_the_disruption_budget_covers_only_busy_pods() -> None:
    pdb = children.disruption_budget("ns")
    # A number, counted over the busy pods themselves: maxUnavailable would count the pool's scale.
    assert (pdb["metadata"]["namespace"], pdb["spec"]["minAvailable"]) == ("ns", children.BUSY_MIN_AVAILABLE)
    assert pdb["spec"]["maxUnavailable"] is None, "removed from a budget an earlier version made"
    assert pdb["spec"]["selector"]["matchLabels"] == {
        naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE,
        naming.BUSY_LABEL: "true",
    }
    assert "ownerReferences" not in pdb["metadata"], "no pool may take it along"


# -- capacity --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "surge"), [(0, 0), (1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (10, 3), (1000, 250)]
)
def test_max_surge_is_a_quarter_rounded_up_and_at_least_one(replicas: int, surge: int) -> None:
    assert scaling.max_surge(replicas) == surge


def kube_pod(
    name: str, hash_: str | None = NEW, phase: str = "Running", deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {naming.TEMPLATE_HASH_LABEL: hash_} if hash_ else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize(
    ("pods", "replicas", "pending", "creates"),
    [
        ([], 3, 0, 3),
        ([], 3, 2, 1),  # two creates the cache has not shown yet
        ([kube_pod("a"), kube_pod("b")], 3, 0, 1),
        ([kube_pod("a", phase="Succeeded"), kube_pod("b", deleting=True)], 2, 0, 2),  # replaced at once
        ([kube_pod(n) for n in "abcd"], 2, 0, 0),  # surplus: the runner managers' job
        ([kube_pod(n, OLD) for n in "abc"], 3, 0, 1),  # rollout: one surge pod at a time
        ([kube_pod(n, OLD) for n in "abc"] + [kube_pod("d")], 3, 0, 0),
        ([kube_pod(n, OLD) for n in "ab"] + [kube_pod("d")], 3, 0, 1),
        ([kube_pod(n, OLD) for n in "abcdefgh"], 8, 0, 2),
        ([kube_pod(n, None) for n in "ab"], 2, 0, 1),  # pods without the template hash are outdated
        ([kube_pod(n, OLD) for n in "ab"], 0, 0, 0),
    ],
)
def test_creates(pods: list[dict[str, Any]], replicas: int, pending: int, creates: int) -> None:
    assert scaling.creates(scaling.count(pods, replicas, NEW, pending)) == creates


# -- retirement ------------------------------------------------------------------------------


def view(name: str, hash_: str | None = NEW, *, running: bool = True, age_min: int = 10) -> PodView:
    state = {"running": {}} if running else {"waiting": {}}
    return PodView.of(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "creationTimestamp": (NOW - timedelta(minutes=age_min)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "labels": {naming.TEMPLATE_HASH_LABEL: hash_} if hash_ else {},
            },
            "status": {"phase": "Running", "containerStatuses": [{"name": "runner", "state": state}]},
        }
    )


def runner(name: str, *, busy: bool = False, status: str = "online", id_: int = 0) -> Runner:
    return Runner(id=id_ or hash(name) % 10_000, name=name, status=status, busy=busy, labels=("team/ci",))


def decide(pods: list[PodView], runners: list[Runner]) -> list[PodDecision]:
    return list(plan(pods, runners, NOW, None).decisions)


def picked(pods: list[PodView], runners: list[Runner], replicas: int) -> list[tuple[str, str]]:
    return [(d.pod.name, d.reason) for d in retirements(decide(pods, runners), replicas, NEW)]


def test_scale_down_takes_idle_pods_never_busy_ones() -> None:
    pods = [view("busy-1"), view("busy-2"), view("idle")]
    runners = [runner("busy-1", busy=True), runner("busy-2", busy=True), runner("idle")]
    assert picked(pods, runners, 1) == [("idle", SCALE_DOWN)]
    [decision] = retirements(decide(pods, runners), 1, NEW)
    assert decision.action is Action.DEREGISTER_AND_DELETE, "GitHub's 204 first, then the pod"


def test_scale_down_takes_unregistered_stopped_pods_first_then_the_newest_idle() -> None:
    pods = [view("old", age_min=60), view("young", age_min=1), view("pending", running=False)]
    runners = [runner("old"), runner("young")]
    assert picked(pods, runners, 1) == [("pending", SCALE_DOWN), ("young", SCALE_DOWN)]
    [decision] = retirements(decide(pods, runners), 2, NEW)
    assert decision.action is Action.DELETE_POD  # nothing registered: no GitHub call needed


def test_a_registering_pod_is_not_taken() -> None:
    assert picked([view("a"), view("registering")], [runner("a")], 1) == []


def test_a_rollout_waits_for_the_replacement_to_register() -> None:
    pods = [view(n, OLD) for n in "abc"] + [view("new")]
    runners = [runner(n) for n in "abc"]
    assert picked(pods, runners, 3) == [], "the surge pod has no runner yet"
    [(name, reason)] = picked(pods, [*runners, runner("new")], 3)
    assert name in "abc" and reason == OUTDATED


def test_a_rollout_never_takes_the_new_pods_while_old_ones_are_busy() -> None:
    pods = [view(n, OLD) for n in "abc"] + [view("new")]
    runners = [runner(n, busy=True) for n in "abc"] + [runner("new")]
    assert picked(pods, runners, 3) == []


def test_scale_down_during_a_rollout_keeps_the_up_to_date_pods_it_needs() -> None:
    pods = [view("old", OLD)] + [view(n) for n in ("n1", "n2", "n3")]
    runners = [runner("old", busy=True)] + [runner(n) for n in ("n1", "n2", "n3")]
    chosen = picked(pods, runners, 1)
    assert len(chosen) == 2 and all(reason == SCALE_DOWN for _, reason in chosen)
    assert "old" not in dict(chosen)


_SHAPES = list(
    itertools.product(
        range(0, 5),  # replicas
        range(0, 3),  # busy outdated
        range(0, 3),  # idle outdated
        range(0, 3),  # busy current
        range(0, 3),  # idle current
        range(0, 2),  # current, not registered yet
    )
)


@pytest.mark.parametrize("shape", _SHAPES)
def test_retirement_safety(shape: tuple[int, int, int, int, int, int]) -> None:
    replicas, bo, io, bc, ic, uc = shape
    pods: list[PodView] = []
    runners: list[Runner] = []
    for prefix, count_, hash_, busy, registered in (
        ("bo", bo, OLD, True, True),
        ("io", io, OLD, False, True),
        ("bc", bc, NEW, True, True),
        ("ic", ic, NEW, False, True),
        ("uc", uc, NEW, False, False),
    ):
        for i in range(count_):
            name = f"{prefix}{i}"
            pods.append(view(name, hash_))
            if registered:
                runners.append(runner(name, busy=busy))
    chosen = retirements(decide(pods, runners), replicas, NEW)
    names = {d.pod.name for d in chosen}
    total = len(pods)
    assert not any(n.startswith(("bo", "bc")) for n in names), "a busy runner's pod is never picked"
    assert len(chosen) <= max(0, total - replicas), "never below replicas"
    online_left = sum(1 for r in runners if r.name not in names)
    online_before = len(runners)
    assert online_left >= min(replicas, online_before), "never fewer registered runners than replicas"
    current_left = sum(1 for p in pods if p.template_hash == NEW and p.name not in names)
    assert current_left >= min(replicas, bc + ic + uc), "up-to-date pods the pool needs stay"
    if total > replicas and io > 0 and online_before - 1 >= replicas:
        assert chosen, "an idle outdated pod above replicas goes at once"


# -- expectations ----------------------------------------------------------------------------


def test_expectations_until_the_cache_shows_the_pod_or_a_timeout() -> None:
    now = [0.0]
    expect = Expectations(timeout=10, clock=lambda: now[0])
    expect.created("ns/ci", "ci-abcde")
    expect.created("ns/ci", "ci-fghij")
    assert still_pending(expect.expected("ns/ci"), []) == 2
    assert still_pending(expect.expected("ns/ci"), ["ci-abcde"]) == 1
    expect.observe("ns/ci", "ci-abcde")
    expect.observe("ns/ci", "ci-fghij")
    assert still_pending(expect.expected("ns/ci"), []) == 0
    expect.created("ns/ci", "ci-lost")
    now[0] = 11
    assert still_pending(expect.expected("ns/ci"), []) == 0


def test_a_pod_the_watch_delivers_between_the_read_and_the_count_is_still_expected() -> None:
    """The reconciler reads the pool's pods once; a create's watch event arriving right after
    that read cleared the expectation before it was counted, and the pass made a pod too many
    (three runner pods for two replicas, seen in the suite)."""
    expect = Expectations(timeout=10)
    expect.created("ns/ci", "ci-abcde")
    before_the_read = expect.expected("ns/ci")
    read: list[str] = []  # the cache did not show it yet
    expect.observe("ns/ci", "ci-abcde")  # the watch delivers it now
    assert still_pending(before_the_read, read) == 1, "still counted: no second create"


def test_a_pod_the_watch_delivers_before_its_create_answers_is_not_expected_after() -> None:
    """The informer may show a created pod before the creating thread has the API server's
    answer: recorded after its only event, the name stayed expected until the timeout."""
    expect = Expectations(timeout=300)
    with expect.creating("ns/ci") as created:
        expect.observe("ns/ci", "ci-abcde")  # the watch won the race
        expect.observe("ns/ci", "ci-older")  # an event of a pod the pool already had
        created("ci-abcde")
    with expect.creating("ns/ci") as created:
        created("ci-older")  # no stale memory of the first creates' window: expected now
    assert expect.expected("ns/ci") == frozenset({"ci-older"})
    expect.observe("ns/ci", "ci-older")
    assert expect.expected("ns/ci") == frozenset()


def test_pods_without_the_template_hash_are_outdated() -> None:
    legacy = {"metadata": {"name": "runnerpool-ci-5d4f-abcde", "labels": {"pod-template-hash": "5d4f"}}}
    assert scaling.count([legacy], 1, NEW).outdated == 1
