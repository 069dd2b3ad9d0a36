"""The shared, conditional runner listing and the API budget, against GitHub behind ``responses``.

No cluster here: pools and pods come from an in-memory stand-in for the informer cache (the
pod side runs on a real API server in test_runner_pods.py). The scheduler is never started:
tests run a scope's round with ``sync`` and read what it would schedule.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import REGISTRY

from runnerpool import api, naming
from runnerpool.domain import PoolRef, Scope
from runnerpool.github.credentials import PAT_KEY, NamedClientCache
from runnerpool.github.errors import MalformedResponse
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.github.types import DeleteOutcome, RateLimit, Runner
from runnerpool.naming import BUSY_LABEL
from runnerpool.reads import ParsedPool, parse_pool
from runnerpool.runners.listing import ListingKey, SharedListing, Snapshot, pool_runners, runner_counts
from runnerpool.runners.manager import RunnerManagers
from runnerpool.settings import RunnerSettings
from tests.github_mocks import API, RunnerEndpoint, fast_client_factory, gh, github
from tests.helpers import wait_for
from tests.pools import pool_manifest

__all__ = ["github"]  # the shared fixture

NS = "team-a"
ORG = Scope(organization="octo-org")
REPO = Scope(repository="octo-org/octo-repo")
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CREDENTIAL = f"{NS}/{naming.DEFAULT_CREDENTIAL_SECRET}"
#: The listing of the organization with the namespace's default credential Secret.
ORG_KEY = ListingKey.of(
    PoolRef(
        namespace=NS,
        name="any",
        scope=ORG,
        credential_secret_name=naming.DEFAULT_CREDENTIAL_SECRET,
        api_url=API,
    )
)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@dataclass
class Cache:
    """What the runner managers read from the informers: pools and their pods."""

    pools: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, name: str, namespace: str = NS, **spec: Any) -> PoolRef:
        manifest = pool_manifest(name, **spec)
        manifest["metadata"].update(namespace=namespace, uid=f"uid-{name}", generation=1)
        pool = api.RunnerPool.model_validate(manifest)
        self.pools[(namespace, name)] = manifest
        return PoolRef(
            namespace=namespace,
            name=name,
            scope=Scope(organization=pool.spec.organization, repository=pool.spec.repository),
            credential_secret_name=pool.spec.credential_secret_name,
            api_url=API,
        )

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        raw = self.pools.get((namespace, name))
        return None if raw is None else parse_pool(raw)

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return self.pods.get((namespace, pool), [])

    def scale_set_pools(self) -> list[api.RunnerPool]:
        models = (parse_pool(raw).model for raw in self.pools.values())
        return [model for model in models if model is not None and model.spec.scale_set is not None]


@dataclass
class Pods:
    deleted: list[str] = field(default_factory=list)
    annotated: list[tuple[str, str, str | None]] = field(default_factory=list)
    patched: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: (pod, grace, resourceVersion precondition) of each deletion that shortened a pod's grace.
    hurried: list[tuple[str, int, str]] = field(default_factory=list)
    #: Each pool's ``status.desiredReplicas`` as the API server has it (absent: none yet).
    desired: dict[tuple[str, str], int] = field(default_factory=dict)

    def desired_now(self, namespace: str, name: str) -> int | None:
        return self.desired.get((namespace, name))

    def delete_pod(self, namespace: str, name: str, uid: str, resource_version: str | None) -> bool:
        self.deleted.append(name)
        return True

    def hurry_pod(
        self, namespace: str, name: str, uid: str, resource_version: str, grace: int, *, unmark: Any = None
    ) -> bool:
        self.hurried.append((name, grace, resource_version))
        return True

    def annotate_pod(self, namespace: str, name: str, key: str, value: str | None) -> None:
        self.annotated.append((name, key, value))

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched.append((name, patch))


@dataclass
class Harness:
    managers: RunnerManagers
    cache: Cache
    clients: NamedClientCache
    secrets: dict[tuple[str, str], dict[str, str]]
    notified: list[str]
    scheduler: BackgroundScheduler
    pods: Pods

    def client(self, secret: str = naming.DEFAULT_CREDENTIAL_SECRET) -> PyGithubClient:
        found = self.clients.get(NS, secret, API)
        assert isinstance(found, PyGithubClient)
        return found


@pytest.fixture
def harness() -> Iterator[Harness]:
    secrets = {(NS, naming.DEFAULT_CREDENTIAL_SECRET): {PAT_KEY: "ghp_listing_test_token"}}
    clients = NamedClientCache(lambda ns, name: secrets.get((ns, name)), factory=fast_client_factory)
    cache = Cache()
    notified: list[str] = []
    scheduler = BackgroundScheduler(timezone=UTC)  # never started: jobs stay inspectable
    pods = Pods()
    managers = RunnerManagers(
        cache,
        clients,
        pods,
        notified.append,
        settings=RunnerSettings(sync_interval=60),
        clock=lambda: NOW,
        scheduler=scheduler,
    )
    yield Harness(managers, cache, clients, secrets, notified, scheduler, pods)
    managers.stop_all()


# -- the client: pages, ETags, counting ------------------------------------------------------


def test_listing_follows_link_pages_of_100(harness: Harness, github: responses.RequestsMock) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for i in range(1, 6):
        endpoint.add(i, f"r{i}", ["ns/p"])

    runners = harness.client().list_runners(ORG)

    assert [r.id for r in runners] == [1, 2, 3, 4, 5]
    assert endpoint.listed == [(1, 200), (2, 200), (3, 200)]
    assert all("per_page=100" in call.request.url for call in github.calls)


def test_a_scope_of_more_than_10000_runners_is_listed_to_its_end(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """Several full runner groups make a scope of more than 100 pages: refusing its listing as
    a broken page chain left every pool of the scope without busy marks, and a deleted one
    waiting for ever with its finalizer."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    for i in range(1, 10_051):
        endpoint.add(i, f"r{i}", ["ns/p"])

    runners = harness.client().list_runners(ORG)

    assert len(runners) == 10_050
    assert [page for page, _ in endpoint.listed] == list(range(1, 102))


def test_a_runner_moved_onto_a_page_already_read_is_not_missed(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """GitHub pages by number: an ephemeral runner that leaves after page 1 was read moves the
    busy runner behind it onto page 1, and page 2 starts after it. The page counts disagree,
    so the listing is read again."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for i, busy in ((1, False), (2, False), (3, True), (4, False)):
        endpoint.add(i, f"r{i}", ["ns/p"], busy=busy)

    def first_runner_leaves(page: int) -> None:
        if page == 1:
            endpoint.runners.pop(1, None)

    endpoint.after_page = first_runner_leaves
    runners = harness.client().list_runners(ORG)

    assert {r.id: r.busy for r in runners}.get(3) is True, "the busy runner was missed"
    assert endpoint.listed == [(1, 200), (2, 200), (1, 200), (2, 304)]
    assert sorted(r.id for r in runners) == [2, 3, 4]


def test_a_listing_whose_count_never_holds_still_is_read_twice_and_keeps_the_latest_busy_state(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """In an organization whose ephemeral runners come and go every second, the count changes
    on every page: the listing is read once more, not again and again (each read costs a
    request per changed page), and a runner that took a job meanwhile is reported busy."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for i in range(1, 7):
        endpoint.add(i, f"r{i}", ["ns/p"])

    def churn(page: int) -> None:
        # Another pool's ephemeral runner registers after one page and is gone after the next.
        if endpoint.runners.pop(100, None) is None:
            endpoint.add(100, "ephemeral", ["other/pool"])
        if len(endpoint.listed) == 4:  # the first read is over: runner 5 takes a job
            endpoint.runners[5]["busy"] = True

    endpoint.after_page = churn
    runners = {r.id: r for r in harness.client().list_runners(ORG)}

    assert [page for page, _ in endpoint.listed].count(1) == 2, endpoint.listed
    assert {1, 2, 3, 4, 5, 6} <= runners.keys()
    assert runners[5].busy, "the runner the later read saw busy was reported idle"


def test_unchanged_pages_are_revalidated_and_free(harness: Harness, github: responses.RequestsMock) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for i in range(1, 6):
        endpoint.add(i, f"r{i}", ["ns/p"])
    client = harness.client()
    first = client.list_runners(ORG)
    free_before = sample(
        "runnerpool_github_requests_total", endpoint="/orgs/{org}/actions/runners", method="GET", status="304"
    )

    second = client.list_runners(ORG)

    assert second == first
    assert endpoint.listed[3:] == [(1, 304), (2, 304), (3, 304)]
    assert all(headers.get("If-None-Match") for headers in endpoint.list_headers[3:])
    free_after = sample(
        "runnerpool_github_requests_total", endpoint="/orgs/{org}/actions/runners", method="GET", status="304"
    )
    assert free_after - free_before == 3

    endpoint.add(3, "r3", ["ns/p"], busy=True)  # a job starts on page 2
    third = client.list_runners(ORG)

    assert endpoint.listed[6:] == [(1, 304), (2, 200), (3, 304)]
    assert [r.busy for r in third] == [False, False, True, False, False]


def test_a_304_to_an_unconditional_request_is_malformed(
    harness: Harness, github: responses.RequestsMock
) -> None:
    github.get(gh("/orgs/octo-org/actions/runners"), status=304)
    with pytest.raises(MalformedResponse):
        harness.client().list_runners(ORG)


def test_requests_are_counted_by_templated_endpoint_never_by_name_or_token(
    harness: Harness, github: responses.RequestsMock
) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(7, "r7", ["ns/p"], status="offline")
    labels = {"endpoint": "/orgs/{org}/actions/runners/{runner_id}", "method": "DELETE", "status": "204"}
    before = sample("runnerpool_github_requests_total", **labels)

    harness.client().delete_runner(ORG, 7)

    assert sample("runnerpool_github_requests_total", **labels) - before == 1
    for metric in REGISTRY.collect():
        if metric.name.startswith("runnerpool_github"):
            for s in metric.samples:
                text = repr(s.labels)
                assert "octo-org" not in text and "ghp_" not in text, s


# -- one listing per scope, shared ------------------------------------------------------------


def test_two_pools_in_one_organization_share_one_listing(
    harness: Harness, github: responses.RequestsMock
) -> None:
    org = RunnerEndpoint(github, "/orgs/octo-org")
    repo = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    org.add(1, "a-1", [f"{NS}/a"])
    org.add(2, "a-2", [f"{NS}/a"], busy=True)
    org.add(3, "b-1", [f"{NS}/b"], status="offline")
    for ref in (harness.cache.add("a", org="octo-org"), harness.cache.add("b", org="Octo-Org")):
        harness.managers.start(ref)
    repo_ref = harness.cache.add("c", repo="octo-org/octo-repo")
    harness.managers.start(repo_ref)
    org_key = ORG_KEY

    assert harness.managers.scopes() == [org_key, ListingKey.of(repo_ref)]
    assert sorted(job.id for job in harness.scheduler.get_jobs()) == sorted(
        map(str, harness.managers.scopes())
    )

    harness.managers.sync(org_key)

    assert org.listed == [(1, 200)], "one request for both pools"
    assert repo.listed == []
    assert sample("runnerpool_runners", namespace=NS, pool="a", state="busy") == 1
    assert sample("runnerpool_runners", namespace=NS, pool="a", state="online") == 1
    assert sample("runnerpool_runners", namespace=NS, pool="b", state="offline") == 1
    assert harness.notified == [f"{NS}/a", f"{NS}/b"], "new counts send the pools to the reconciler"
    listed = harness.managers.listing.latest(org_key)
    assert listed is not None and listed.credential == CREDENTIAL

    harness.managers.sync(org_key)

    assert org.listed == [(1, 200), (1, 304)]
    assert harness.notified == [f"{NS}/a", f"{NS}/b"], "unchanged counts are not news"


def test_stopping_the_last_pool_of_a_scope_ends_its_manager(
    harness: Harness, github: responses.RequestsMock
) -> None:
    RunnerEndpoint(github, "/orgs/octo-org").add(1, "a-1", [f"{NS}/a"])
    for name in ("a", "b"):
        harness.managers.start(harness.cache.add(name, org="octo-org"))
    key = ORG_KEY
    harness.managers.sync(key)

    harness.managers.stop(NS, "a")
    assert harness.managers.scopes() == [key]
    assert sample("runnerpool_runners", namespace=NS, pool="a", state="online") == 0
    harness.managers.stop(NS, "b")

    assert harness.managers.scopes() == []
    assert harness.scheduler.get_jobs() == []
    assert harness.managers.listing.latest(key) is None


def test_a_busy_runner_a_listing_missed_keeps_its_pods_busy_mark(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """One runner leaves after page 1 was read and another registers: the busy runner moves onto
    page 1 and the page counts agree, so the listing cannot tell it missed one. Its pod, whose
    runner container runs, keeps its mark (unmarked, an eviction could take the job), and no
    request more is spent on it."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org", page_size=2)
    for i, pool in ((1, "other"), (2, "other"), (3, "build"), (4, "other")):
        endpoint.add(i, f"{pool}-{i}", [f"{NS}/{pool}"], busy=pool == "build")

    def one_leaves_one_comes(page: int) -> None:
        if page == 1 and 1 in endpoint.runners:
            del endpoint.runners[1]
            endpoint.add(5, "other-5", [f"{NS}/other"])

    endpoint.after_page = one_leaves_one_comes
    ref = harness.cache.add("build", org="octo-org")
    runner = {"name": naming.RUNNER_CONTAINER, "restartCount": 0, "state": {"running": {}}}
    harness.cache.pods[(NS, "build")] = [
        {
            "metadata": {"name": "build-3", "uid": "uid-build-3", "labels": {BUSY_LABEL: "true"}},
            "status": {"phase": "Running", "containerStatuses": [runner]},
        }
    ]
    harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(ref))

    assert harness.managers.counts(NS, "build") == api.RunnerCounts(online=0, busy=0, offline=0), "missed"
    assert harness.pods.patched == [], "the busy mark was taken off a pod running a job"
    assert endpoint.looked_up == []


def _grown_pool(harness: Harness, github: responses.RequestsMock) -> tuple[PoolRef, RunnerEndpoint]:
    """A pool that follows demand, scaled 2 -> 5 by the reconciler: the pool cache still shows 2
    (its watch lags), the pod cache already shows the three new Pending pods beside the two old
    ones, whose runners are idle."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    for i in (1, 2):
        endpoint.add(i, f"grow-{i}", [f"{NS}/grow"])
    autoscaling = {"minReplicas": 0, "maxReplicas": 5, "scaleDownDelay": "1m"}
    ref = harness.cache.add("grow", org="octo-org", autoscaling=autoscaling)
    harness.cache.pools[(NS, "grow")]["status"] = {"desiredReplicas": 2}
    runner = {"name": naming.RUNNER_CONTAINER, "restartCount": 0, "state": {"running": {}}}

    def pod(index: int, created: datetime, running: bool) -> dict[str, Any]:
        meta = {"name": f"grow-{index}", "uid": f"uid-grow-{index}", "resourceVersion": "7"}
        meta["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        if running:
            return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [runner]}}
        return {"metadata": meta, "status": {"phase": "Pending"}}

    old, new = NOW - timedelta(hours=1), NOW - timedelta(seconds=1)
    harness.cache.pods[(NS, "grow")] = [pod(i, old, True) for i in (1, 2)] + [
        pod(i, new, False) for i in (3, 4, 5)
    ]
    harness.managers.start(ref)
    return ref, endpoint


def test_a_round_that_sees_a_scale_ups_pods_before_its_count_keeps_them(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """The reconciler writes ``status.desiredReplicas`` before it creates the pods, but the pool
    and its pods come through two watches: a round that saw the new pods and the old count took
    them for surplus and deleted them (a JIT pool's runners with them), for as long as the
    pools' watch lagged. The round asks the API server for the count before it retires any."""
    ref, _ = _grown_pool(harness, github)
    harness.pods.desired[(NS, "grow")] = 5

    harness.managers.sync(ListingKey.of(ref))

    assert harness.pods.deleted == [], "the scale-up's new pods were taken for surplus"


def test_a_scale_down_the_api_server_confirms_takes_the_pods_without_runners_first(
    harness: Harness, github: responses.RequestsMock
) -> None:
    ref, _ = _grown_pool(harness, github)
    harness.pods.desired[(NS, "grow")] = 2

    harness.managers.sync(ListingKey.of(ref))

    assert sorted(harness.pods.deleted) == ["grow-3", "grow-4", "grow-5"]


def test_a_retired_pod_whose_runner_answers_busy_is_marked_and_stays_marked(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """grow-1 still carries a mark from its last job, and the listing shows its runner idle: the
    round's plan unmarks it, and a scale-down picks it. Its DELETE answers 422 (a new job): the
    pod is marked at once, and the plan's older unmark must not follow it."""
    ref, endpoint = _grown_pool(harness, github)
    harness.cache.pods[(NS, "grow")][0]["metadata"]["labels"] = {naming.BUSY_LABEL: naming.BUSY_VALUE}
    endpoint.busy_on_delete.add(1)
    harness.pods.desired[(NS, "grow")] = 0

    harness.managers.sync(ListingKey.of(ref))

    assert "grow-1" not in harness.pods.deleted
    marks = [
        patch["metadata"]["labels"][naming.BUSY_LABEL]
        for name, patch in harness.pods.patched
        if name == "grow-1"
    ]
    assert marks == [naming.BUSY_VALUE], "unmarked while its runner runs a job"


def _told_to_stop(name: str, ago: timedelta) -> dict[str, Any]:
    """A pod scaled down ``ago`` (default grace: busy grace + 90 s) whose runner container runs."""
    runner = {"name": naming.RUNNER_CONTAINER, "restartCount": 0, "state": {"running": {}}}
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": "9", "deletionGracePeriodSeconds": 3690}
    meta["deletionTimestamp"] = (NOW - ago + timedelta(seconds=3690)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [runner]}}


@pytest.mark.parametrize(
    ("listed", "hurried"),
    [
        ("none", True),
        ("idle", True),
        ("offline", True),
        ("offline-busy-on-delete", False),
        ("busy", False),
        ("only-by-name-busy", False),
        ("two-of-one-name", False),
        ("busy-beside-an-idle-namesake", False),
    ],
)
def test_a_live_pools_pod_whose_runner_outlives_its_stop_is_told_again_to_be_killed_in_30_s(
    harness: Harness, github: responses.RequestsMock, listed: str, hurried: bool
) -> None:
    """Scaled down or rolled out, its runner container still runs a minute after the pod was
    told to stop: told again, its grace now ending 30 s from now (counted from the first
    deletion, as the API server counts it), as it was decided on (its resourceVersion), its idle
    runner deregistered first (once: an offline one the collection took is not asked for
    again), unless GitHub shows a runner of its name busy: in the listing, asked by its name, or
    beside an idle namesake (the busy one keeps the pod; the idle one goes, as in a drain), or
    by answering the collection's DELETE with 422 (listed offline and idle, it had a job)."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    if listed in ("idle", "busy", "offline"):
        endpoint.add(1, "build-a", [f"{NS}/build"], busy=listed == "busy", status=listed)
    if listed == "offline-busy-on-delete":
        endpoint.add(1, "build-a", [f"{NS}/build"], status="offline")
        endpoint.busy_on_delete.add(1)
    if listed == "two-of-one-name":
        endpoint.add(1, "build-a", [f"{NS}/build"], busy=True)
        endpoint.add(2, "build-a", [f"{NS}/build"], status="offline")
    if listed == "busy-beside-an-idle-namesake":
        endpoint.add(1, "build-a", [f"{NS}/build"], busy=True)
        endpoint.add(2, "build-a", [f"{NS}/build"])
    ref = harness.cache.add("build", org="octo-org")
    if listed == "only-by-name-busy":  # a listing missed it; GitHub's name filter finds it
        endpoint.after_page = lambda page: endpoint.add(1, "build-a", [f"{NS}/build"], busy=True)
    harness.cache.pods[(NS, "build")] = [
        _told_to_stop("build-a", timedelta(minutes=2)),
        _told_to_stop("build-b", timedelta(seconds=30)),
    ]
    harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(ref))

    assert harness.pods.hurried == ([("build-a", 150, "9")] if hurried else []), "build-b: not yet"
    assert harness.pods.deleted == []
    deregistered = {
        "idle": [(1, 204)],
        "offline": [(1, 204)],
        "offline-busy-on-delete": [(1, 422)],
        "two-of-one-name": [(2, 204)],
        "busy-beside-an-idle-namesake": [(2, 204)],  # as the drain does
    }
    assert endpoint.deleted == deregistered.get(listed, [])
    assert endpoint.looked_up == ([("build-a", 200)] if listed in ("none", "only-by-name-busy") else [])


def test_a_scale_set_pools_runners_are_counted_where_github_kept_only_the_scale_sets_label(
    harness: Harness, github: responses.RequestsMock
) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(1, "arc-aaaaa", ["my-scale-set"], busy=True)
    endpoint.add(2, "arc-bbbbb", ["my-scale-set"])
    endpoint.add(3, "other-ccccc", ["my-scale-set"])  # not one of the pool's pods
    ref = harness.cache.add(
        "arc", org="octo-org", scaleSet={"name": "my-scale-set"}, autoscaling={"maxReplicas": 3}
    )
    harness.cache.pods[(NS, "arc")] = [
        {"metadata": {"name": name, "uid": f"uid-{name}"}} for name in ("arc-aaaaa", "arc-bbbbb")
    ]
    harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(ref))

    counts = harness.managers.counts(NS, "arc")
    assert counts is not None and (counts.busy, counts.online) == (1, 1)
    pods = harness.managers._pods  # the harness's recording Pods
    assert isinstance(pods, Pods)
    assert [name for name, patch in pods.patched if patch["metadata"]["labels"].get(BUSY_LABEL)] == [
        "arc-aaaaa"
    ]


def test_an_offline_scale_set_runner_whose_pod_is_gone_is_collected_where_github_kept_no_pool_label(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """Its pod was force-deleted (or its node lost): no pod of its name is left to find it by, so
    it is the pool's by its name's shape, ``arc-`` and five characters, which no other pool of
    the namespace has (``arc-b-ccccc`` is pool ``arc-b``'s, ``arc-fffff-ggggg`` pool
    ``arc-fffff``'s); a runner GitHub keeps another pool's label on is that pool's."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(1, "arc-aaaaa", ["my-scale-set"])
    endpoint.add(2, "arc-bbbbb", ["my-scale-set"], status="offline")
    endpoint.add(3, "arc-b-ccccc", ["my-scale-set"], status="offline")
    endpoint.add(4, "arc-ddddd", ["my-scale-set", "team-b/arc"], status="offline")
    endpoint.add(5, "other-eeeee", ["my-scale-set"], status="offline")
    endpoint.add(6, "arc-fffff-ggggg", ["my-scale-set"], status="offline")
    scale_set = {"scaleSet": {"name": "my-scale-set"}, "autoscaling": {"maxReplicas": 3}}
    ref = harness.cache.add("arc", org="octo-org", **scale_set)
    harness.cache.pods[(NS, "arc")] = [{"metadata": {"name": "arc-aaaaa", "uid": "uid-arc-aaaaa"}}]
    harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(ref))

    assert endpoint.deleted == [(2, 204)]
    counts = harness.managers.counts(NS, "arc")
    assert counts is not None and (counts.online, counts.offline) == (1, 1)


def test_a_scale_set_runner_named_like_a_namesake_pools_is_left_to_its_pods(
    harness: Harness, github: responses.RequestsMock
) -> None:
    """A pool of the same name in another namespace with a scale set of the same name (moved
    there keeping both, or in another runner group) names its runners the same way: without a
    pool label, only a runner named after one of the pool's own pods is told to be its."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(2, "arc-bbbbb", ["my-scale-set"], status="offline")
    scale_set = {"scaleSet": {"name": "my-scale-set"}, "autoscaling": {"maxReplicas": 3}}
    ref = harness.cache.add("arc", org="octo-org", **scale_set)
    harness.cache.add("arc", namespace="team-b", org="octo-org", **scale_set)
    harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(ref))

    assert endpoint.deleted == []
    counts = harness.managers.counts(NS, "arc")
    assert counts is not None and counts.offline == 0


def test_a_credential_that_cannot_see_the_scope_does_not_blind_the_others(
    harness: Harness, github: responses.RequestsMock
) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(1, "b-1", [f"{NS}/b"])
    harness.secrets[(NS, "other-cred")] = {PAT_KEY: "ghp_other_test_token"}
    blind = harness.cache.add("a", org="octo-org", credentialSecretName="missing-cred")
    seeing = harness.cache.add("b", org="octo-org", credentialSecretName="other-cred")
    for ref in (blind, seeing):
        harness.managers.start(ref)

    harness.managers.sync(ListingKey.of(blind))
    harness.managers.sync(ListingKey.of(seeing))

    assert endpoint.listed == [(1, 200)]
    assert github.calls[0].request.headers["Authorization"] == "token ghp_other_test_token"
    assert sample("runnerpool_runners", namespace=NS, pool="b", state="online") == 1


@dataclass
class _SaysWhatItLikes:
    """A GitHub client whose answers its owner controls (another tenant's ``spec.proxy`` and
    ``spec.githubServerTLS`` can make api.github.com say anything to its own credential)."""

    runners: list[Runner]
    deleted: list[int] = field(default_factory=list)

    def list_runners(self, scope: Scope) -> list[Runner]:
        return list(self.runners)

    def delete_runner(self, scope: Scope, runner_id: int) -> DeleteOutcome:
        self.deleted.append(runner_id)
        return DeleteOutcome.DELETED


@dataclass
class _ClientPerSecret:
    by_secret: dict[str, _SaysWhatItLikes]

    def get(self, namespace: str, secret_name: str, base_url: str, connection: Any = None) -> Any:
        return self.by_secret[secret_name]


def test_pools_act_only_on_listings_their_own_credential_made() -> None:
    """A pool deletes runners with its own credential on what a listing says: another pool of
    the organization (another tenant's, say) must not be the one that made that listing."""
    lies = [
        Runner(id=i, name=f"victim-{i}", status="offline", busy=False, labels=(f"{NS}/victim",))
        for i in (101, 102)
    ]
    attacker, victim = _SaysWhatItLikes(lies), _SaysWhatItLikes([])
    cache = Cache()
    managers = RunnerManagers(
        cache,
        _ClientPerSecret({"attacker-cred": attacker, "victim-cred": victim}),
        Pods(),
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        clock=lambda: NOW,
        scheduler=BackgroundScheduler(timezone=UTC),
    )
    # "attacker" sorts first: one shared listing was made with the first pool's credential.
    managers.start(cache.add("attacker", org="octo-org", credentialSecretName="attacker-cred"))
    managers.start(cache.add("victim", org="octo-org", credentialSecretName="victim-cred"))

    for key in managers.scopes():
        managers.sync(key)

    assert victim.deleted == [] and attacker.deleted == []
    assert managers.counts(NS, "victim") == runner_counts([])
    assert len(managers.scopes()) == 2


def test_a_finished_listing_is_not_served_to_a_later_caller(github: responses.RequestsMock) -> None:
    """Folding only joins a listing in flight; the finalizer always gets a fresh one."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    client = fast_client_factory({PAT_KEY: "ghp_fold"}, API)
    listing = SharedListing()
    key = ORG_KEY

    listing.fetch(key, ORG, client)
    endpoint.add(1, "late", ["ns/p"])
    snapshot = listing.fetch(key, ORG, client)

    assert [r.name for r in snapshot.runners] == ["late"]
    assert endpoint.listed == [(1, 200), (1, 200)]


# -- the budget -----------------------------------------------------------------------------


def test_low_budget_is_exported_and_slows_the_listing(
    harness: Harness, github: responses.RequestsMock
) -> None:
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    endpoint.add(1, "a-1", [f"{NS}/a"])
    reset = int(NOW.timestamp()) + 3600
    harness.managers.start(harness.cache.add("a", org="octo-org"))
    key = ORG_KEY

    endpoint.rate_limit = (4000, 5000, reset)
    assert harness.managers.sync(key) == 60
    assert sample("runnerpool_github_rate_limit_remaining", credential=CREDENTIAL) == 4000

    endpoint.rate_limit = (40, 5000, reset)
    delay = harness.managers.sync(key)

    # 40 left, half of it for the listings: one listing per 3601 s / 20.
    assert delay == pytest.approx(3601 / 20)
    assert sample("runnerpool_github_rate_limit_remaining", credential=CREDENTIAL) == 40
    assert sample("runnerpool_github_rate_limit_limit", credential=CREDENTIAL) == 5000
    assert sample("runnerpool_github_rate_limit_reset_timestamp_seconds", credential=CREDENTIAL) == reset
    assert sample("runnerpool_runner_sync_delay_seconds", scope=str(key)) == pytest.approx(delay)
    assert harness.client().rate_limit() == RateLimit(remaining=40, limit=5000, reset=reset)


def test_a_rate_limited_listing_waits_for_the_reset(harness: Harness, github: responses.RequestsMock) -> None:
    reset = int(time.time()) + 600
    github.get(
        gh("/orgs/octo-org/actions/runners"),
        status=403,
        json={"message": "API rate limit exceeded for user ID 1.", "documentation_url": ""},
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000", "x-ratelimit-reset": str(reset)},
    )
    harness.managers.start(harness.cache.add("a", org="octo-org"))
    key = ORG_KEY
    failures = sample("runnerpool_runner_listing_failures_total", scope=str(key), reason="RateLimited")

    delay = harness.managers.sync(key)

    assert delay == pytest.approx(600, abs=5)
    assert (
        sample("runnerpool_runner_listing_failures_total", scope=str(key), reason="RateLimited")
        == failures + 1
    )
    assert sample("runnerpool_github_rate_limit_remaining", credential=CREDENTIAL) == 0


def test_a_started_manager_lists_at_once_then_every_interval(github: responses.RequestsMock) -> None:
    """The scheduled path: the first round runs when the scope appears, and sets the next one."""
    endpoint = RunnerEndpoint(github, "/orgs/octo-org")
    cache = Cache()
    clients = NamedClientCache(lambda ns, name: {PAT_KEY: "ghp_scheduled"}, factory=fast_client_factory)
    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.start()
    managers = RunnerManagers(
        cache,
        clients,
        Pods(),
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        scheduler=scheduler,
    )
    key = ORG_KEY
    try:
        started = datetime.now(UTC)
        managers.start(cache.add("a", org="octo-org"))
        wait_for(lambda: endpoint.listed == [(1, 200)], message="the first listing")

        def next_run() -> datetime | None:
            """The next round once the first has set it: an interval on. While the round still
            runs, the scheduler shows the safety-net time (ten intervals on) instead."""
            job = scheduler.get_job(str(key))
            when: datetime | None = job.next_run_time if job is not None else None
            interval_on = (
                started + timedelta(seconds=59) <= (when or started) <= started + timedelta(seconds=70)
            )
            return when if interval_on else None

        wait_for(next_run, message="the next round an interval later")
    finally:
        managers.stop_all()
        scheduler.shutdown(wait=False)  # wait=True would deadlock with a round still running


def test_a_listing_finds_each_pools_runners_by_label_whatever_the_case() -> None:
    """The per-listing index answers what a scan of every runner would (GitHub compares
    labels case-insensitively), for each pool of the scope."""
    runners = tuple(
        Runner(id=i, name=f"r{i}", status="online", busy=False, labels=labels)
        for i, labels in enumerate(
            [("self-hosted", f"{NS}/Build"), ("self-hosted", f"{NS}/build", "x"), (f"{NS}/test",), ("linux",)]
        )
    )
    snapshot = Snapshot(runners=runners, fetched_at=NOW, credential="c", started_at=NOW)

    for pool in ("build", "test", "gone"):
        assert snapshot.of_pool(NS, pool) == pool_runners(runners, NS, pool)
    assert [r.id for r in snapshot.of_pool(NS, "build")] == [0, 1]
