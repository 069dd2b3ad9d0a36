"""What a delivery's write costs the API server: requests counted against a stand-in server.

The webhook's answer waits for its write (GitHub redelivers only what was not answered 2xx),
so at 200 deliveries/s the writes are the path: one request per write when the pool cache is
current, and one patch for the deliveries of a pool that arrive while a write is in flight.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from runnerpool.demand.runner_names import by_name
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.jobs import Job
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.settings import GitHubSettings
from runnerpool.watches import POOLS, PoolCache
from tests.helpers import wait_for
from tests.test_watches import API, deliver, offline, pool

AUTOSCALING = {"autoscaling": {"maxReplicas": 50}}


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386, as the API server applies a merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            child = target.setdefault(key, {})
            merge(child if isinstance(child, dict) else target.setdefault(key, {}), value)
        else:
            target[key] = value


class Server(Kube):
    """One RunnerPool as an API server keeps it: merge patches with a resourceVersion
    precondition (409 when it moved), every request listed in ``requests``. A PATCH
    waits while ``hold`` is clear."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(offline())
        self.raw = copy.deepcopy(raw)
        self.requests: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.patching = threading.Event()
        self._lock = threading.Lock()

    def jobs(self) -> set[str]:
        with self._lock:
            return set(((self.raw.get("status") or {}).get("demand") or {}).get("jobs") or {})

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        with self._lock:
            self.requests.append("GET")
            return copy.deepcopy(self.raw)

    def patch(
        self, resource: Resource, namespace: str | None, name: str, body: Any, **kw: Any
    ) -> dict[str, Any]:
        self.patching.set()
        assert self.hold.wait(10)
        with self._lock:
            wanted = body["metadata"]["resourceVersion"]
            if wanted != self.raw["metadata"]["resourceVersion"]:
                self.requests.append("PATCH 409")
                raise ApiException(status=409, reason="Conflict")
            self.requests.append("PATCH")
            self.bodies.append(copy.deepcopy(body))
            merge(self.raw, {"status": body["status"]})
            self.raw["metadata"]["resourceVersion"] = str(int(wanted) + 1)
            return copy.deepcopy(self.raw)

    def someone_else_writes(self, job_id: int) -> None:
        """Another replica records a job: the resourceVersion moves past the cache's."""
        tracked = {"state": "queued", "repository": "octo-org/hello", "updatedAt": "2030-01-20T17:00:00Z"}
        demand = {"jobs": {str(job_id): tracked}, "queued": 1}
        with self._lock:
            merge(self.raw, {"status": {"demand": demand}})
            self.raw["metadata"]["resourceVersion"] = str(int(self.raw["metadata"]["resourceVersion"]) + 1)


def job(job_id: int) -> Job:
    return Job(id=job_id, state="queued", labels=("self-hosted",), repository="octo-org/hello", api_url=API)


@pytest.fixture
def cache() -> PoolCache:
    cache = PoolCache(offline(), lambda key: None, None)
    deliver(cache, POOLS, "ADDED", pool("a", rv="1", **AUTOSCALING))
    return cache


@pytest.fixture
def server(cache: PoolCache) -> Server:
    return Server(pool("a", rv="1", **AUTOSCALING))


def writer(server: Server, cache: PoolCache) -> DemandWriter:
    return DemandWriter(server, cache, GitHubSettings(api_url=API).api_url_of)


def test_a_delivery_costs_one_patch_when_the_cache_is_current(server: Server, cache: PoolCache) -> None:
    assert writer(server, cache).record_job(job(1)) == 1
    assert server.requests == ["PATCH"], "the cached pool is the one to write over: no GET"
    assert server.jobs() == {"1"}


def test_the_next_write_builds_on_the_last_before_the_cache_shows_it(
    server: Server, cache: PoolCache
) -> None:
    """The watch event of a write comes after its answer: the next delivery must not write
    over the cached, older pool (a 409 and a GET each time)."""
    recorder = writer(server, cache)
    for number in (1, 2, 3):
        recorder.record_job(job(number))
    assert server.requests == ["PATCH"] * 3
    assert server.jobs() == {"1", "2", "3"}
    deliver(cache, POOLS, "MODIFIED", server.raw)  # the cache catches up
    recorder.record_job(job(4))
    assert server.requests == ["PATCH"] * 4
    assert server.jobs() == {"1", "2", "3", "4"}


def test_a_pool_written_by_someone_else_costs_one_conflict_and_a_read(
    server: Server, cache: PoolCache
) -> None:
    recorder = writer(server, cache)
    server.someone_else_writes(99)
    recorder.record_job(job(1))
    assert server.requests == ["PATCH 409", "GET", "PATCH"]
    assert server.jobs() == {"1", "99"}, "the other replica's job is kept"


def test_deliveries_that_arrive_during_a_write_share_the_next_patch(server: Server, cache: PoolCache) -> None:
    """N deliveries for one pool at once: the first write, then one for all that waited; each
    answer (record_job returning) only once a patch holding its job was taken."""
    recorder = writer(server, cache)
    server.hold.clear()
    answered: dict[int, set[str]] = {}

    def record(number: int) -> None:
        recorder.record_job(job(number))
        answered[number] = server.jobs()

    first = threading.Thread(target=record, args=(0,))
    first.start()
    assert server.patching.wait(10)
    rest = [threading.Thread(target=record, args=(number,)) for number in range(1, 12)]
    for thread in rest:
        thread.start()
    # Every one of them waits for the write in flight (the writer's queue holds them).
    wait_for(lambda: len(recorder._pending.get(("ns", "a"), [])) == len(rest), message="11 queued")
    assert answered == {}, "nothing is answered before its patch"
    server.hold.set()
    for thread in [first, *rest]:
        thread.join(10)
    assert server.requests == ["PATCH", "PATCH"], "12 deliveries, 2 patches"
    assert server.jobs() == {str(number) for number in range(12)}
    assert all(str(number) in seen for number, seen in answered.items()) and len(answered) == 12


def test_a_write_sends_what_changed_not_every_tracked_job(server: Server, cache: PoolCache) -> None:
    """A busy pool tracks hundreds of jobs: each delivery's patch carries its own job (and the
    counts), not the whole map again."""
    recorder = writer(server, cache)
    for number in range(1, 31):
        recorder.record_job(job(number))
    last = server.bodies[-1]["status"]["demand"]
    assert set(last["jobs"]) == {"30"}
    assert last["queued"] == 30
    assert server.jobs() == {str(number) for number in range(1, 31)}


# -- a job's start and end, among many pools that could take it ---------------------------------


class Servers(Kube):
    """Several RunnerPools of one namespace, each a :class:`Server`; ``patched``: the pools
    written, one name per PATCH taken."""

    def __init__(self, *raws: dict[str, Any]) -> None:
        super().__init__(offline())
        self.pools = {raw["metadata"]["name"]: Server(raw) for raw in raws}

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        return self.pools[name].get(resource, namespace, name)

    def patch(
        self, resource: Resource, namespace: str | None, name: str, body: Any, **kw: Any
    ) -> dict[str, Any]:
        return self.pools[name].patch(resource, namespace, name, body, **kw)

    def patched(self) -> list[str]:
        return sorted(name for name, one in self.pools.items() for r in one.requests if r == "PATCH")

    def counted(self) -> dict[str, tuple[int, int]]:
        """Each pool's (queued, busy) as stored."""
        demands = {
            name: (one.raw.get("status") or {}).get("demand") or {} for name, one in self.pools.items()
        }
        return {name: (d.get("queued", 0), d.get("busy", 0)) for name, d in demands.items()}


def _five_pools(*, pods_not_listed: bool = False) -> tuple[Servers, PoolCache, DemandWriter]:
    """Pools a..e of one namespace, all matching a ``self-hosted`` job; ``a`` counts it queued.
    ``pods_not_listed``: the operator's writer, which tells runners by the pods it caches, in a
    namespace whose pods it has not listed yet (else the receiver's, which tells them by name)."""
    raws = [pool(name, rv="1", **AUTOSCALING) for name in "abcde"]
    cache = PoolCache(offline(), lambda key: None, None, defer_per_namespace=pods_not_listed)
    for raw in raws:
        deliver(cache, POOLS, "ADDED", raw)
    servers = Servers(*raws)
    api_url_of = GitHubSettings(api_url=API).api_url_of
    return (
        servers,
        cache,
        DemandWriter(servers, cache, api_url_of)
        if pods_not_listed
        else DemandWriter(servers, cache, api_url_of, runners=by_name),
    )


def _news(job_id: int, state: str, runner: str | None = None) -> Job:
    return Job(
        id=job_id,
        state=state,  # type: ignore[arg-type]
        labels=("self-hosted",),
        repository="octo-org/hello",
        api_url=API,
        runner_name=runner,
    )


def test_a_jobs_start_and_end_are_written_only_where_they_change_what_counts() -> None:
    """Five pools could take the job: its start and end were written on all five (an ended entry
    each), ten patches for one job. Now: the pool that counted it and the one whose runner took
    it."""
    servers, cache, recorder = _five_pools()
    recorder.record_job(_news(1, "queued"))
    assert servers.patched() == ["a"]
    deliver(cache, POOLS, "MODIFIED", copy.deepcopy(servers.pools["a"].raw))  # the cache catches up
    recorder.record_job(_news(1, "in_progress", runner="c-x1y2z"))
    assert servers.counted()["c"] == (0, 1) and servers.counted()["a"] == (0, 0)
    recorder.record_job(_news(1, "completed", runner="c-x1y2z"))
    assert servers.patched() == ["a", "a", "c", "c"]
    assert set(servers.counted().values()) == {(0, 0)}


def test_a_leader_whose_pod_cache_has_not_listed_a_namespace_yet_tells_its_runners_by_name() -> None:
    """A new leader polls before its first pass in a namespace starts that namespace's pod
    informer: "no pod" there made a job running on the pool's own runner count for nobody, and
    the pool's busy count fell while the job ran."""
    servers, cache, recorder = _five_pools(pods_not_listed=True)
    recorder.record_job(_news(1, "queued"))
    deliver(cache, POOLS, "MODIFIED", copy.deepcopy(servers.pools["a"].raw))
    recorder.record_job(_news(1, "in_progress", runner="c-x1y2z"))
    assert servers.counted()["c"] == (0, 1)


def test_an_end_delivered_before_its_queued_is_still_not_counted() -> None:
    """GitHub does not keep the order of deliveries: the pool that would count the job records
    its end, so the late ``queued`` finds it over."""
    servers, _, recorder = _five_pools()
    recorder.record_job(_news(2, "completed", runner="c-x1y2z"))
    recorder.record_job(_news(2, "in_progress", runner="c-x1y2z"))
    recorder.record_job(_news(2, "queued"))
    assert servers.patched() == ["a", "c"]
    assert set(servers.counted().values()) == {(0, 0)}
