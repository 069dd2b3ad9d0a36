"""Deleting many pools of one scope at once lists the scope once per kick gap, not per pool (issue 23).

Each finalizer used to list its scope on every pass: deleting 1,000 pools over 10 scopes made
1,983 listings. Here GitHub is ``responses`` on its real endpoints (``RunnerEndpoint``), the
finalizers are a work queue on a fake clock that honours each drain's requeue, and pods go
when the drain deletes them, as the pod informer would report.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes.client.rest import ApiException

from runnerpool import naming
from runnerpool.domain import Drain, PoolRef, StuckPod
from runnerpool.github.credentials import PAT_KEY, NamedClientCache
from runnerpool.runners import lifecycle
from runnerpool.runners.listing import ListingKey
from runnerpool.runners.manager import RunnerManagers
from runnerpool.settings import DeletionSettings, RunnerSettings
from tests.github_mocks import RunnerEndpoint, fast_client_factory, github
from tests.test_runner_listing import NS, Cache

__all__ = ["github"]

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
KICK_GAP = RunnerSettings().kick_gap
#: What the finalizer waits after deleting pods (the pod watch usually brings it back sooner).
PODS_GONE_WAIT = DeletionSettings().pods_gone_wait
_RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@dataclass
class PodsGo:
    """Pod deletes that take effect at once in the cache the runner managers read; a shorter
    grace for a pod being deleted moves its deletion time to the first deletion's plus the new
    grace, as the API server does (k8s.io/apiserver ``rest.BeforeDelete``)."""

    cache: Cache
    deleted: list[str] = field(default_factory=list)
    #: (pod, grace) of each deletion that shortened a pod's grace.
    hurried: list[tuple[str, int]] = field(default_factory=list)

    def delete_pod(self, namespace: str, name: str, uid: str, resource_version: str | None) -> bool:
        for pool, pods in self.cache.pods.items():
            self.cache.pods[pool] = [pod for pod in pods if pod["metadata"]["name"] != name]
        self.deleted.append(name)
        return True

    def hurry_pod(
        self, namespace: str, name: str, uid: str, resource_version: str, grace: int, *, unmark: Any = None
    ) -> bool:
        pods = [pod for pods in self.cache.pods.values() for pod in pods]
        (meta,) = [pod["metadata"] for pod in pods if pod["metadata"]["name"] == name]
        assert resource_version == meta["resourceVersion"], "told again as it was decided on"
        first = datetime.strptime(meta["deletionTimestamp"], _RFC3339).replace(tzinfo=UTC)
        first -= timedelta(seconds=meta["deletionGracePeriodSeconds"])
        meta["deletionTimestamp"] = (first + timedelta(seconds=grace)).strftime(_RFC3339)
        meta["deletionGracePeriodSeconds"] = grace
        self.hurried.append((name, grace))
        return True

    #: (pod, patch) of each pod patch: a drain only ever marks pods busy.
    patched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        assert patch == lifecycle.BusyMark(lifecycle.PodView.of(_pod(name)), True).patch(), "only marks"
        self.patched.append((name, patch))


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


def _managers(clock: Clock, cache: Cache) -> tuple[RunnerManagers, PodsGo]:
    secrets = {(NS, naming.DEFAULT_CREDENTIAL_SECRET): {PAT_KEY: "ghp_drain_listing_test"}}
    clients = NamedClientCache(lambda ns, name: secrets.get((ns, name)), factory=fast_client_factory)
    pods = PodsGo(cache)
    managers = RunnerManagers(
        cache,
        clients,
        pods,
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        clock=clock,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started: only drain() runs
    )
    return managers, pods


def _finalize_all(
    managers: RunnerManagers, refs: list[PoolRef], clock: Clock, cost: float, passes: Counter[str]
) -> dict[str, float]:
    """Run every pool's finalizer until it lets go, as the work queue would (each drain takes
    ``cost`` seconds of the clock, one at a time); the time each pool finished, from the start.
    ``passes``: the drains per pool."""
    queue = [(0.0, index, ref) for index, ref in enumerate(refs)]
    heapq.heapify(queue)
    finished: dict[str, float] = {}
    while queue:
        at, index, ref = heapq.heappop(queue)
        clock.now = max(clock.now, NOW + timedelta(seconds=at))
        passes[ref.name] += 1
        drained: Drain = managers.drain(ref)
        clock.now += timedelta(seconds=cost)
        elapsed = (clock.now - NOW).total_seconds()
        if drained.listing_wait is not None:
            heapq.heappush(queue, (elapsed + drained.listing_wait, index, ref))
        elif drained.busy or drained.pods_left:
            # Pods deleted: the pod watch brings the pool back at once (the wait is the fallback).
            heapq.heappush(queue, (elapsed if not drained.busy else elapsed + PODS_GONE_WAIT, index, ref))
        else:
            finished[ref.name] = elapsed
    return finished


@pytest.mark.parametrize("cost", [0.01, 0.05], ids=["fast-queue", "queue-slower-than-the-gap"])
def test_deleting_a_hundred_pools_of_one_scope_lists_it_once_per_kick_gap(
    github: responses.RequestsMock, cost: float
) -> None:
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    refs = []
    for index in range(100):
        name = f"pool-{index:03}"
        refs.append(cache.add(name, org="octo-org"))
        endpoint.add(index + 1, f"{name}-runner", [f"{NS}/{name}"])
        cache.pods[(NS, name)] = [_pod(f"{name}-runner")]

    passes: Counter[str] = Counter()
    finished = _finalize_all(managers, refs, clock, cost, passes)

    assert len(finished) == 100, "every finalizer let go"
    assert endpoint.runners == {}, "no runner left registered"
    assert len(pods.deleted) == 100
    took = max(finished.values())
    listings = len(endpoint.listed)
    # Two rounds of listings (deregister, then confirm with the pods gone), each one serving
    # every pool that asked: at most one per kick gap, and nowhere near one per pool and pass.
    assert listings <= took / KICK_GAP + 1, f"{listings} listings in {took:.1f} s"
    # A wave of 100 drains takes 100 * cost seconds: one listing per kick gap of it, per wave.
    waves = 2 * math.ceil(100 * cost / KICK_GAP)
    assert listings <= waves + 1, f"{listings} listings for 100 pools of one scope"
    # Deregister and delete the pods; the pods gone, wait for the next listing; confirm.
    assert max(passes.values()) <= 4, passes.most_common(3)
    assert took <= 2 * KICK_GAP + 100 * cost * 4, f"all finalizers done after {took:.1f} s"


def test_a_runner_that_registered_late_is_found_before_the_finalizer_lets_go(
    github: responses.RequestsMock,
) -> None:
    """The listing that confirms "nothing left" started after the pods were seen gone."""
    clock, cache = Clock(), Cache()
    managers, _ = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    first, late = cache.add("first", org="octo-org"), cache.add("late", org="octo-org")

    assert managers.drain(first) == Drain(busy=0, deregistered=0)  # lists the scope: empty
    clock.now += timedelta(seconds=0.5)
    endpoint.add(7, "late-runner", [f"{NS}/late"])  # registered after that listing, pod gone since

    waited = managers.drain(late)

    assert waited.listing_wait is not None and 0 < waited.listing_wait <= KICK_GAP
    assert endpoint.runners, "not deregistered yet"
    clock.now += timedelta(seconds=waited.listing_wait)
    assert managers.drain(late) == Drain(busy=0, deregistered=1)
    assert endpoint.runners == {}
    assert len(endpoint.listed) == 2


def test_a_drain_that_ended_without_its_last_pass_leaves_nothing_to_a_later_pool_of_its_name(
    github: responses.RequestsMock,
) -> None:
    """The first pool of the name was let go while its drain waited for a listing (its finalizer
    taken off by hand, or its credential lost). Its memory said "pods seen gone long ago", so
    the drain of a later pool of that name took a listing from before its pods went for the
    confirming one, and let go with a runner that registered late still on GitHub."""
    clock, cache = Clock(), Cache()
    managers, _ = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    other, build = cache.add("other", org="octo-org"), cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [{**_pod("build-aaaaa"), "spec": {"nodeName": "node-1"}}]
    assert managers.drain(build).pods_deleted == 1
    clock.now += timedelta(seconds=0.5)
    assert managers.drain(build).listing_wait is not None  # pods seen gone; then let go
    clock.now += timedelta(hours=1)
    managers.start(build)  # a pool of the same name, live

    assert managers.drain(other) == Drain(busy=0, deregistered=0)  # lists the scope: empty
    clock.now += timedelta(seconds=0.5)
    endpoint.add(7, "build-bbbbb", [f"{NS}/build"])  # registered after that listing, pod gone since
    waited = managers.drain(build)  # deleted in turn, its pods gone

    assert waited.listing_wait is not None, "no listing from before its pods went confirms it"
    clock.now += timedelta(seconds=waited.listing_wait)
    assert managers.drain(build) == Drain(busy=0, deregistered=1) and endpoint.runners == {}


def test_a_pod_deletion_the_cluster_refuses_holds_up_none_of_the_others(
    github: responses.RequestsMock,
) -> None:
    """Its runners deregistered, a deleted pool's pods go; one the cluster refuses to delete (an
    admission policy) stopped the drain at that pod, and every pod after it stayed up."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    RunnerEndpoint(github, "/orgs/octo-org")  # its runners are gone already
    ref = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_pod("build-kept"), _pod("build-other")]
    refuse = pods.delete_pod

    def refusing(namespace: str, name: str, uid: str, resource_version: str | None) -> bool:
        if name == "build-kept":
            raise ApiException(status=422, reason="Invalid")
        return refuse(namespace, name, uid, resource_version)

    pods.delete_pod = refusing  # type: ignore[method-assign]
    with pytest.raises(ApiException):  # for the pool to say so
        managers.drain(ref)
    assert pods.deleted == ["build-other"]


def test_a_runner_listed_busy_is_listed_again_before_the_next_try(github: responses.RequestsMock) -> None:
    """A drain never lives on an old listing: a busy runner that finished is seen idle."""
    clock, cache = Clock(), Cache()
    managers, _ = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    ref = cache.add("build", org="octo-org")
    endpoint.add(7, "build-runner", [f"{NS}/build"], busy=True)

    assert managers.drain(ref).busy == 1
    endpoint.runners[7]["busy"] = False
    clock.now += timedelta(seconds=DeletionSettings().busy_runner_wait)

    assert managers.drain(ref) == Drain(busy=0, deregistered=1)


def _running(name: str, started: datetime) -> dict[str, Any]:
    """A pod whose runner container runs since ``started`` (the kubelet says whole seconds)."""
    running = {"startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ")}
    container = {"name": naming.RUNNER_CONTAINER, "restartCount": 0, "state": {"running": running}}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5"},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }


def test_a_pod_whose_runner_took_a_job_after_the_listing_is_not_deleted(
    github: responses.RequestsMock,
) -> None:
    """The listing the drain reuses (up to a kick gap old) started before this pod's runner
    registered and took a job: the pod waits for a listing that can show its runner."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    other, build = cache.add("other", org="octo-org"), cache.add("build", org="octo-org")
    assert managers.drain(other) == Drain(busy=0, deregistered=0)  # the scope's listing: empty
    clock.now += timedelta(seconds=0.5)
    endpoint.add(7, "build-aaaaa", [f"{NS}/build"], busy=True)  # registered, and took a job
    cache.pods[(NS, "build")] = [_running("build-aaaaa", clock.now)]
    clock.now += timedelta(seconds=0.5)

    kept = managers.drain(build)

    assert pods.deleted == [], "a pod whose runner runs a job was deleted"
    assert kept.pods_left == 1 and len(endpoint.listed) == 1
    clock.now += timedelta(seconds=KICK_GAP)
    assert managers.drain(build).busy == 1, "the next listing shows the job"
    assert pods.deleted == []
    endpoint.runners[7]["busy"] = False  # the job is done
    clock.now += timedelta(seconds=DeletionSettings().busy_runner_wait)

    assert managers.drain(build) == Drain(busy=0, deregistered=1, pods_deleted=1, pods_left=1)
    assert pods.deleted == ["build-aaaaa"]


def test_a_running_pod_whose_runner_no_later_listing_shows_is_deleted_at_once(
    github: responses.RequestsMock,
) -> None:
    """Its runner is gone (deregistered by an earlier pass, say): no wait for the container, one
    lookup by name to be sure the listing did not miss it."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_running("build-bbbbb", clock.now - timedelta(minutes=1))]

    assert managers.drain(build) == Drain(busy=0, deregistered=0, pods_deleted=1, pods_left=1)
    assert pods.deleted == ["build-bbbbb"]
    assert endpoint.looked_up == [("build-bbbbb", 200)]


def test_a_scale_set_runner_that_github_labels_with_the_scale_set_only_is_seen_busy(
    github: responses.RequestsMock,
) -> None:
    """A GitHub Enterprise Server before 3.18 keeps only the scale set's name as its runners'
    label: the pool's runners are its pods' namesakes with that label."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add(
        "build", org="octo-org", scaleSet={"name": "my-scale-set"}, autoscaling={"maxReplicas": 2}
    )
    endpoint.add(7, "build-aaaaa", ["my-scale-set"], busy=True)
    endpoint.add(8, "elsewhere-bbbbb", ["my-scale-set"])  # no pod of this pool has its name
    cache.pods[(NS, "build")] = [_running("build-aaaaa", clock.now - timedelta(minutes=5))]

    drained = managers.drain(build)

    assert drained.busy == 1 and pods.deleted == [], "a busy scale-set runner's pod was deleted"
    endpoint.runners[7]["busy"] = False
    clock.now += timedelta(seconds=DeletionSettings().busy_runner_wait)
    assert managers.drain(build) == Drain(busy=0, deregistered=1, pods_deleted=1, pods_left=1)
    assert pods.deleted == ["build-aaaaa"] and 8 in endpoint.runners


def test_a_scale_set_pools_runners_with_and_without_its_label_are_all_its_own(
    github: responses.RequestsMock,
) -> None:
    """GitHub kept the pool's label on its newer runners only (a GitHub Enterprise Server
    upgraded to 3.18 while the pool ran): the older ones, labelled with the scale set's name
    alone, were hidden as soon as one labelled runner was listed, and one with a job had its
    pod left unmarked, evictable mid-job."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add(
        "build", org="octo-org", scaleSet={"name": "my-scale-set"}, autoscaling={"maxReplicas": 2}
    )
    endpoint.add(7, "build-aaaaa", [f"{NS}/build", "my-scale-set"])
    endpoint.add(9, "build-ccccc", ["my-scale-set"], busy=True)
    cache.pods[(NS, "build")] = [
        _running(name, clock.now - timedelta(minutes=5)) for name in ("build-aaaaa", "build-ccccc")
    ]
    managers.start(build)

    managers.sync(ListingKey.of(build))

    assert [name for name, _ in pods.patched] == ["build-ccccc"], "the busy one marked"
    counts = managers.counts(NS, "build")
    assert counts is not None and (counts.online, counts.busy) == (1, 1)
    assert pods.deleted == []


def test_a_deleted_pools_pod_whose_runner_runs_a_job_is_marked_busy_while_the_drain_waits(
    github: responses.RequestsMock,
) -> None:
    """The runner took its job just after the last live round's listing, and then the pool was
    deleted: the live rounds that mark busy pods stopped with it, so the pod stayed unmarked
    for the whole deletion, and a node drain or consolidation could evict it, job and all."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    endpoint.add(7, "build-aaaaa", [f"{NS}/build"], busy=True)
    endpoint.add(8, "build-bbbbb", [f"{NS}/build"])
    cache.pods[(NS, "build")] = [
        _running(name, clock.now - timedelta(minutes=5)) for name in ("build-aaaaa", "build-bbbbb")
    ]

    assert managers.drain(build).busy == 1
    assert [name for name, _ in pods.patched] == ["build-aaaaa"], "the busy one marked, no other"
    assert pods.deleted == []


def test_a_deleted_pools_runner_that_github_answers_busy_has_its_pod_marked(
    github: responses.RequestsMock,
) -> None:
    """Listed idle, its DELETE answered 422: it took a job since the listing, and its pod is
    marked now rather than after the finalizer's next listing."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    endpoint.add(7, "build-aaaaa", [f"{NS}/build"])
    endpoint.busy_on_delete.add(7)
    cache.pods[(NS, "build")] = [_running("build-aaaaa", clock.now - timedelta(minutes=5))]

    assert managers.drain(build).busy == 1
    assert [name for name, _ in pods.patched] == ["build-aaaaa"]


def test_no_mark_is_written_once_the_runner_managers_stop(github: responses.RequestsMock) -> None:
    """``stop_all`` promises no pod write starts after it returns (the next leader's rounds
    decide now): a stopped leader took marks off pods the next leader saw busy."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    for name in ("build-aaaaa", "build-bbbbb"):
        endpoint.add(len(endpoint.runners) + 1, name, [f"{NS}/build"], busy=True)
    cache.pods[(NS, "build")] = [_running(n, clock.now) for n in ("build-aaaaa", "build-bbbbb")]
    patch = pods.patch_pod

    def stopping(namespace: str, name: str, body: dict[str, Any]) -> None:
        patch(namespace, name, body)
        managers.stop_all()

    pods.patch_pod = stopping  # type: ignore[method-assign]
    managers.drain(build)
    assert len(pods.patched) == 1


def _shifting(endpoint: RunnerEndpoint) -> None:
    """Between the first and the second page: another pool's ephemeral runner (id 1) is done and
    leaves, another registers. Runner 3 moves onto page 1, already read, and ``total_count``
    holds still: nothing in the listing says it missed runner 3."""

    def churn(page: int) -> None:
        if page == 1 and 1 in endpoint.runners:
            del endpoint.runners[1]
            endpoint.add(5, "other-55555", [f"{NS}/other"])

    endpoint.after_page = churn


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_a_runner_a_paged_listing_missed_is_looked_up_by_name_before_its_pod_goes(
    github: responses.RequestsMock, busy: bool
) -> None:
    """Busy, its pod stays and the pool waits for the job; idle, it is deregistered first. Before,
    the drain took "not listed" for "gone" and deleted a running job's pod."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    endpoint.add(1, "other-11111", [f"{NS}/other"])
    endpoint.add(2, "other-22222", [f"{NS}/other"])
    endpoint.add(3, "build-aaaaa", [f"{NS}/build"], busy=busy)
    endpoint.add(4, "other-44444", [f"{NS}/other"])
    build = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_running("build-aaaaa", clock.now - timedelta(minutes=10))]
    _shifting(endpoint)

    drained = managers.drain(build)

    listed = managers.listing.latest(ListingKey.of(build))
    assert listed is not None and 3 not in {runner.id for runner in listed.runners}, "the listing missed it"
    assert endpoint.looked_up == [("build-aaaaa", 200)], "one request for the one pod in doubt"
    if busy:
        assert drained == Drain(busy=1, deregistered=0, pods_left=1)
        assert pods.deleted == [] and 3 in endpoint.runners
    else:
        assert drained == Drain(busy=0, deregistered=1, pods_deleted=1, pods_left=1)
        assert pods.deleted == ["build-aaaaa"] and 3 not in endpoint.runners


def test_a_runner_that_registered_as_its_pod_went_is_looked_up_by_name_when_the_last_listing_misses_it(
    github: responses.RequestsMock,
) -> None:
    """The pool is deleted while a pod registers its runner: the pod goes as one whose runner
    does not run, and its runner registers as it goes. The listing that confirms "nothing left"
    missed it (pages shift in a busy scope), and the finalizer let go with the runner still
    registered on GitHub. Now the pods that went before their runner was listed are looked up."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for runner_id in (1, 2, 4):
        endpoint.add(runner_id, f"other-{runner_id}{runner_id}{runner_id}", [f"{NS}/other"])
    build = cache.add("build", org="octo-org")
    registering = {**_pod("build-aaaaa"), "spec": {"nodeName": "node-1"}, "status": {"phase": "Pending"}}
    unscheduled = {**_pod("build-bbbbb"), "status": {"phase": "Pending"}}  # never ran: not asked for
    cache.pods[(NS, "build")] = [registering, unscheduled]

    assert managers.drain(build).pods_deleted == 2 and pods.deleted == ["build-aaaaa", "build-bbbbb"]
    endpoint.add(3, "build-aaaaa", [f"{NS}/build"])  # registered as its pod went
    _shifting(endpoint)
    clock.now += timedelta(seconds=1)
    waited = managers.drain(build)  # the pods are gone: a listing that started after that
    assert waited.listing_wait is not None
    clock.now += timedelta(seconds=waited.listing_wait)

    assert managers.drain(build) == Drain(busy=0, deregistered=1)
    listed = managers.listing.latest(ListingKey.of(build))
    assert listed is not None and 3 not in {runner.id for runner in listed.runners}, "the listing missed it"
    assert endpoint.looked_up == [("build-aaaaa", 200)] and 3 not in endpoint.runners


@pytest.mark.parametrize("busy", [True, False], ids=["busy", "idle"])
def test_a_runner_of_the_pods_name_with_another_pools_label_is_never_deregistered_and_busy_keeps_the_pod(
    github: responses.RequestsMock, busy: bool
) -> None:
    """The lookup is by name. Another label on a runner of the pod's very name: a namesake pool
    in another namespace that drew the same pod name, or the pod's own runner relabelled by the
    pool that adopted its scale set. Busy, the pod stays and the pool waits (the job may be the
    pod's own: waiting costs only time); idle, the pod goes. Another pool's runner is never
    deregistered here."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(9, "build-bbbbb", ["team-b/build"], busy=busy)
    build = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_running("build-bbbbb", clock.now - timedelta(minutes=1))]

    if busy:
        assert managers.drain(build) == Drain(busy=1, deregistered=0, pods_left=1)
        assert pods.deleted == []
    else:
        assert managers.drain(build) == Drain(busy=0, deregistered=0, pods_deleted=1, pods_left=1)
        assert pods.deleted == ["build-bbbbb"]
    assert 9 in endpoint.runners


def _terminating(name: str, deleted_at: datetime, node: str = "node-7", grace: int = 3690) -> dict[str, Any]:
    """A running pod deleted with ``grace`` (default: busy grace + 90 s), on ``node``."""
    pod = _running(name, deleted_at - timedelta(hours=2))
    pod["metadata"]["deletionTimestamp"] = deleted_at.strftime(_RFC3339)
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    pod["spec"] = {"nodeName": node}
    return pod


def test_a_pod_stuck_terminating_on_a_lost_node_is_given_up_on_once_github_has_no_runner_of_it(
    github: responses.RequestsMock,
) -> None:
    """Its node is powered off: the pod keeps its deletionTimestamp for as long as the Node
    object exists. Before, the drain reported it left on every pass, for ever, and nothing said
    why. Now it is named with its node once past its deletion time, and an hour later, its runner
    looked up by name and not found, it is no longer waited for."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(7, "build-aaaaa", [f"{NS}/build"], status="offline")
    build = cache.add("build", org="octo-org")
    deleted_at = clock.now + timedelta(seconds=20)  # deleted 10 s ago with a 30 s grace
    cache.pods[(NS, "build")] = [_terminating("build-aaaaa", deleted_at, grace=30)]
    stuck = StuckPod("build-aaaaa", "node-7", deleted_at + timedelta(hours=1))

    assert managers.drain(build) == Drain(busy=0, deregistered=1, pods_left=1), "within its grace"
    clock.now = deleted_at
    assert managers.drain(build) == Drain(busy=0, deregistered=0, pods_left=1, stuck=(stuck,))
    clock.now = stuck.given_up_at - timedelta(seconds=1)
    assert managers.drain(build).pods_left == 1
    assert endpoint.looked_up == [], "waited for: no question to GitHub"

    clock.now = stuck.given_up_at
    waited = managers.drain(build)  # a listing that started after it was given up on is due
    assert waited.listing_wait is not None and waited.pods_left == 1
    clock.now += timedelta(seconds=waited.listing_wait)

    assert managers.drain(build) == Drain(busy=0, deregistered=0, pods_left=0, stuck=(stuck,))
    assert endpoint.looked_up == [("build-aaaaa", 200)] and pods.deleted == []


@pytest.mark.parametrize("busy", [False, True], ids=["runner-gone", "runner-busy"])
def test_a_pod_whose_runner_outlives_its_stop_by_a_minute_is_deleted_again_with_a_short_grace(
    github: responses.RequestsMock, busy: bool
) -> None:
    """Its runner container still runs a minute after the pod was told to stop, and GitHub has
    no runner of its name: a second deletion whose grace ends 30 s from now makes the kubelet
    signal it again and kill it then. Before, it held the pool's finalizer and the namespace's
    deletion for its whole grace, an hour. A busy runner of its name keeps it (its job may
    finish in the grace)."""
    clock, cache = Clock(), Cache()
    managers, pods = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    if busy:
        endpoint.add(7, "build-aaaaa", [f"{NS}/build"], busy=True)
    build = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_terminating("build-aaaaa", clock.now + timedelta(seconds=3690))]

    assert managers.drain(build).pods_left == 1
    assert pods.hurried == [] and endpoint.looked_up == [], "an idle runner stops within seconds"
    clock.now += lifecycle.STOP_OVERDUE

    drained = managers.drain(build)

    if busy:
        assert drained.busy == 1 and pods.hurried == []
        return
    assert endpoint.looked_up == [("build-aaaaa", 200)], "GitHub, asked by its name, has none"
    # Counted from the first deletion, 60 s ago, as the API server counts it: 30 s from now.
    assert pods.hurried == [("build-aaaaa", 90)]
    assert pods.deleted == [] and drained.pods_deleted == 0, "told again, not removed from the API"
    clock.now += timedelta(seconds=KICK_GAP)
    again = managers.drain(build)
    assert again.pods_left == 1 and len(pods.hurried) == 1, "told again once"
    assert again.stuck == (), "within its new grace: not stuck (its node answers)"


def test_a_pod_stuck_terminating_whose_runner_runs_a_job_keeps_the_pool(
    github: responses.RequestsMock,
) -> None:
    """Its node is cut off from the API server, not from GitHub: the pod runs on, and its runner
    took a job. Busy runners are never given up on."""
    clock, cache = Clock(), Cache()
    managers, _ = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    cache.pods[(NS, "build")] = [_terminating("build-aaaaa", clock.now - timedelta(hours=2))]
    endpoint.add(7, "build-aaaaa", [f"{NS}/build"], busy=True)

    for _ in range(3):
        drained = managers.drain(build)
        assert drained.busy == 1 and drained.pods_left == 1, drained
        clock.now += timedelta(minutes=30)
    assert endpoint.runners and endpoint.deleted == []


def test_a_pod_stuck_terminating_is_confirmed_runnerless_only_once_the_other_pods_are_gone(
    github: responses.RequestsMock,
) -> None:
    """Until then the finalizer waits anyway: no lookup on every pass."""
    clock, cache = Clock(), Cache()
    managers, _ = _managers(clock, cache)
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    build = cache.add("build", org="octo-org")
    going = _terminating("build-bbbbb", clock.now + timedelta(seconds=3690), node="node-1")  # told now
    cache.pods[(NS, "build")] = [_terminating("build-aaaaa", clock.now - timedelta(hours=2)), going]

    for _ in range(3):
        assert managers.drain(build).pods_left == 2
        clock.now += timedelta(seconds=KICK_GAP)
    assert endpoint.looked_up == []
