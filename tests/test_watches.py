"""The table of watches and its store without an API server: events go in through the
informer's own path (the store takes the object, then the handlers run, as a watch event
does); what comes out is the work-queue keys and the reads.  tests/test_informers.py runs
the same informers against a real API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.informer import ADDED, DELETED, MODIFIED
from pydantic import ValidationError

from runnerpool import api, naming
from runnerpool.demand.matching import job_scope_keys
from runnerpool.demand.writer import DemandWriter
from runnerpool.echoes import Echoes, apply_merge_patch
from runnerpool.github.jobs import Job
from runnerpool.runtime.informers import informer_count
from runnerpool.runtime.kube import Kube
from runnerpool.runtime.store import Store
from runnerpool.settings import GitHubSettings
from runnerpool.watches import (
    BUDGETS,
    CREDENTIALS,
    NAMESPACES_,
    POOLS,
    SECRETS_,
    PoolCache,
    pool_watches,
)

API = "https://api.github.com"
GHES = "https://GHES.example/api/v3/"


class Keys(list[str]):
    def __call__(self, key: str) -> None:
        self.append(key)


def offline() -> client.ApiClient:
    return client.ApiClient(client.Configuration())


def deliver(cache: PoolCache, watch: str, kind: str, obj: dict[str, Any]) -> None:
    """What the informer does with one watch event: the store first, then the handlers."""
    namespace = (obj.get("metadata") or {}).get("namespace") or (obj.get("metadata") or {}).get("name")
    informer = cache.informer(watch, namespace)
    if kind == DELETED:
        informer.cache._remove(obj)
    else:
        informer.cache._put(obj)
    informer._fire(kind, obj)


def pool(name: str, rv: str = "1", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    spec.setdefault("repository", "octo-org/hello")
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": f"uid-{name}"},
        "spec": spec,
    }


def job(repository: str, api_url: str = API, labels: tuple[str, ...] = ("self-hosted",)) -> Job:
    return Job(id=1, state="queued", labels=labels, repository=repository, api_url=api_url)


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def cache(keys: Keys) -> PoolCache:
    return PoolCache(offline(), keys, None)


# -- parsed once, shared, read-only -------------------------------------------------------------


def test_a_pool_is_parsed_once_per_resource_version_and_shared(cache: PoolCache) -> None:
    deliver(cache, POOLS, ADDED, pool("a"))
    first = cache.pool("ns", "a")
    assert first is not None and first.model is not None
    assert cache.pool("ns", "a") is first, "every reader gets the one parse"
    deliver(cache, POOLS, MODIFIED, pool("a"))  # a relist brings the same version back
    assert cache.pool("ns", "a") is first
    deliver(cache, POOLS, MODIFIED, pool("a", rv="2", replicas=3))
    second = cache.pool("ns", "a")
    assert second is not None and second is not first
    assert second.model is not None and second.model.spec.replicas == 3


def test_readers_cannot_change_the_shared_model(cache: PoolCache) -> None:
    deliver(cache, POOLS, ADDED, pool("a", autoscaling={"maxReplicas": 3}))
    parsed = cache.pool("ns", "a")
    assert parsed is not None and parsed.model is not None
    with pytest.raises(ValidationError):
        parsed.model.spec.replicas = 9  # type: ignore[misc]
    with pytest.raises(ValidationError):
        parsed.model.metadata = {}  # type: ignore[misc]
    changed = parsed.model.model_copy(update={"kind": "Other"})
    assert changed.kind == "Other" and parsed.model.kind == api.KIND


def test_an_invalid_pool_is_remembered_with_what_to_fix(cache: PoolCache) -> None:
    deliver(cache, POOLS, ADDED, pool("bad", repository="not a repository", replicas=-1))
    parsed = cache.pool("ns", "bad")
    assert parsed is not None and parsed.model is None
    assert "spec.replicas" in parsed.problems and "spec.repository" in parsed.problems
    assert parsed.raw["metadata"]["name"] == "bad"
    assert cache.autoscaling_pools() == []


# -- the autoscaling index ----------------------------------------------------------------------


def test_autoscaling_pools_are_found_by_host_and_scope(cache: PoolCache) -> None:
    scaling = {"maxReplicas": 5}
    deliver(cache, POOLS, ADDED, pool("repo", repository="Octo-Org/Hello", autoscaling=scaling))
    deliver(cache, POOLS, ADDED, pool("org", repository=None, organization="octo-org", autoscaling=scaling))
    deliver(cache, POOLS, ADDED, pool("other-repo", repository="octo-org/other", autoscaling=scaling))
    deliver(cache, POOLS, ADDED, pool("fixed", repository="octo-org/hello", replicas=2))
    deliver(cache, POOLS, ADDED, pool("ghes", githubApiUrl=GHES, autoscaling=scaling))
    deliver(cache, POOLS, ADDED, pool("elsewhere", namespace="ns2", autoscaling=scaling))

    def names(found: list[api.RunnerPool]) -> list[str]:
        return [p.key for p in found]

    assert names(cache.autoscaling_pools(job_scope_keys(job("octo-org/HELLO")))) == [
        "ns/org",
        "ns/repo",
        "ns2/elsewhere",
    ]
    ghes = job("octo-org/hello", api_url="https://ghes.example/api/v3")
    assert names(cache.autoscaling_pools(job_scope_keys(ghes))) == ["ns/ghes"]
    assert names(cache.autoscaling_pools()) == [
        "ns/ghes",
        "ns/org",
        "ns/other-repo",
        "ns/repo",
        "ns2/elsewhere",
    ]


def test_the_index_follows_changes_and_deletions(cache: PoolCache) -> None:
    scaling = {"maxReplicas": 5}
    deliver(cache, POOLS, ADDED, pool("a", autoscaling=scaling))
    hello = job_scope_keys(job("octo-org/hello"))
    assert len(cache.autoscaling_pools(hello)) == 1
    deliver(cache, POOLS, MODIFIED, pool("a", rv="2", repository="octo-org/moved", autoscaling=scaling))
    assert cache.autoscaling_pools(hello) == []
    assert len(cache.autoscaling_pools(job_scope_keys(job("octo-org/moved")))) == 1
    deleting = pool("a", rv="3", repository="octo-org/moved", autoscaling=scaling)
    deleting["metadata"]["deletionTimestamp"] = "2030-01-20T17:00:00Z"
    deliver(cache, POOLS, MODIFIED, deleting)
    assert cache.autoscaling_pools() == [], "a pool being deleted wants no runners"
    deliver(cache, POOLS, DELETED, deleting)
    assert cache.pool("ns", "a") is None


def test_the_recorder_matches_through_the_index(cache: PoolCache) -> None:
    """Labels and host still decide: the index only narrows the candidates."""
    deliver(cache, POOLS, ADDED, pool("gpu", labels=["gpu"], autoscaling={"maxReplicas": 5}))
    deliver(cache, POOLS, ADDED, pool("cpu", autoscaling={"maxReplicas": 5}))
    writer = DemandWriter(Kube(offline()), cache, GitHubSettings(api_url=API).api_url_of)
    assert [p.name for p in writer.matching_pools(job("octo-org/hello"))] == ["cpu", "gpu"]
    assert [p.name for p in writer.matching_pools(job("octo-org/hello", labels=("gpu",)))] == ["gpu"]
    assert writer.matching_pools(job("octo-org/hello", api_url=GHES)) == []
    assert writer.matching_pools(job("someone/else")) == []


# -- events -> pool keys ------------------------------------------------------------------------


CREDENTIAL_LABELS = {naming.CREDENTIAL_LABEL: naming.CREDENTIAL_VALUE}


def secret(name: str, rv: str = "1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta}}


def test_a_credential_secret_enqueues_the_pools_that_name_it(cache: PoolCache, keys: Keys) -> None:
    deliver(cache, POOLS, ADDED, pool("a", credentialSecretName="creds"))
    deliver(cache, POOLS, ADDED, pool("b"))  # the default credential Secret
    deliver(cache, POOLS, ADDED, pool("c", credentialSecretName="creds"))
    keys.clear()
    deliver(cache, CREDENTIALS, ADDED, secret("creds", labels=CREDENTIAL_LABELS))
    assert keys == ["ns/a", "ns/c"]
    keys.clear()
    # Deleted, or its label removed (the watch's selector no longer matches): the same event.
    deliver(cache, CREDENTIALS, DELETED, secret("creds", labels=CREDENTIAL_LABELS))
    assert keys == ["ns/a", "ns/c"]
    keys.clear()
    deliver(cache, CREDENTIALS, ADDED, secret(naming.DEFAULT_CREDENTIAL_SECRET, labels=CREDENTIAL_LABELS))
    assert keys == ["ns/b"]


def test_a_pool_naming_a_key_of_a_webhook_secret_wakes_the_pools_sharing_that_secrets_url(
    cache: PoolCache, keys: Keys
) -> None:
    """A URL tries the first 8 keys of its Secret by name (``MAX_KEYS_PER_ROUTE``): a pool that
    comes, goes or changes its key can push another pool's key out of them, or let it in, and
    that pool's ``WebhookSecretReady`` must follow without waiting for a change of its own."""

    def scaling(key: str, secret: str = "hooks") -> dict[str, Any]:
        return {"maxReplicas": 1, "webhookSecretRef": {"name": secret, "key": key}}

    deliver(cache, POOLS, ADDED, pool("i", repository="o/r", autoscaling=scaling("i")))
    deliver(cache, POOLS, ADDED, pool("other", repository="o/r", autoscaling=scaling("x", "elsewhere")))
    keys.clear()
    newcomer = pool("a", repository="o/r", autoscaling=scaling("a"))
    deliver(cache, POOLS, ADDED, newcomer)
    assert sorted(keys) == ["ns/a", "ns/i"]
    keys.clear()
    deliver(
        cache, POOLS, MODIFIED, {**newcomer, "metadata": {**newcomer["metadata"], "resourceVersion": "2"}}
    )
    assert keys == ["ns/a"], "no key changed: only the pool itself"
    keys.clear()
    deliver(cache, POOLS, DELETED, newcomer)
    assert sorted(keys) == ["ns/a", "ns/i"]


def test_only_the_operators_secrets_are_asked_for() -> None:
    """The API server filters: a Secret without one of the operator's labels never arrives."""
    secrets = [w for w in pool_watches() if w.resource.plural == "secrets"]
    assert {(w.name, w.label_selector) for w in secrets} == {
        (SECRETS_, naming.MANAGED_BY_SELECTOR),
        (CREDENTIALS, f"{naming.CREDENTIAL_LABEL}=true"),
    }
    assert all(w.field_selector is None for w in secrets)


def test_secret_reads_cover_both_watches(cache: PoolCache) -> None:
    deliver(cache, CREDENTIALS, ADDED, secret("creds", labels=CREDENTIAL_LABELS))
    deliver(cache, SECRETS_, ADDED, secret("runner-token-a", labels={naming.POOL_LABEL: "a"}))
    assert cache.get_secret("ns", "creds") is not None
    assert cache.get_secret("ns", "runner-token-a") is not None
    assert [s["metadata"]["name"] for s in cache.list_secrets("ns")] == ["creds", "runner-token-a"]
    assert (cache.count(SECRETS_), cache.count(CREDENTIALS)) == (1, 1)


def test_an_owner_change_enqueues_the_old_owner_and_the_new(cache: PoolCache, keys: Keys) -> None:
    deliver(cache, SECRETS_, ADDED, secret("moving", labels={naming.POOL_LABEL: "old"}))
    assert keys == ["ns/old"]
    keys.clear()
    deliver(cache, SECRETS_, MODIFIED, secret("moving", rv="2", labels={naming.POOL_LABEL: "new"}))
    assert sorted(keys) == ["ns/new", "ns/old"]
    keys.clear()
    deliver(cache, SECRETS_, DELETED, secret("moving", rv="2", labels={naming.POOL_LABEL: "new"}))
    assert keys == ["ns/new"]


# -- the reconciler's own pool writes (runnerpool.echoes) -----------------------------------------


def answered(base: dict[str, Any], patch: dict[str, Any], rv: str) -> dict[str, Any]:
    """What the API server answers a patch that nothing else raced: the patched object."""
    out = apply_merge_patch(base, patch)
    out["metadata"] = {**out["metadata"], "resourceVersion": rv, "managedFields": [{"manager": "x"}]}
    return out


def test_apply_merge_patch_is_rfc_7386() -> None:
    target = {"a": {"b": 1, "c": [1, 2]}, "d": "keep", "gone": 1}
    patched = apply_merge_patch(target, {"a": {"b": None, "c": [3], "e": {"f": 1}}, "gone": None})
    assert patched == {"a": {"c": [3], "e": {"f": 1}}, "d": "keep"}
    assert target == {"a": {"b": 1, "c": [1, 2]}, "d": "keep", "gone": 1}, "the target is not changed"


def wrote(echoes: Echoes, base: dict[str, Any], patch: dict[str, Any], answer: dict[str, Any]) -> None:
    """A write of the reconciler's as ``Reconciler._patch_pool`` makes it, answered at once."""
    echoes.begin("ns/a")
    echoes.end("ns/a", base, patch, answer)


def test_the_reconcilers_own_pool_write_wakes_no_pass_and_every_other_change_does(keys: Keys) -> None:
    echoes = Echoes()
    cache = PoolCache(offline(), keys, None, echo=echoes.echo)
    base = pool("a")
    deliver(cache, POOLS, ADDED, base)
    assert keys == ["ns/a"]
    keys.clear()

    status = {"status": {"readyReplicas": 1}}
    mine = answered(base, status, rv="2")
    wrote(echoes, base, status, mine)
    deliver(cache, POOLS, MODIFIED, mine)
    assert keys == [], "the echo of the pass's own status write"

    deliver(cache, POOLS, MODIFIED, mine)
    assert keys == ["ns/a"], "a resync repeats the object: it still wakes the pool"
    keys.clear()

    demand = {**mine, "metadata": {**mine["metadata"], "resourceVersion": "3"}, "status": {"demand": {}}}
    deliver(cache, POOLS, MODIFIED, demand)
    assert keys == ["ns/a"], "status.demand, written by another writer"
    keys.clear()

    # A spec edit lands between the pass's read (rv 3) and its write: the answer holds it too.
    edited = {**demand, "spec": {**demand["spec"], "replicas": 2}}
    raced = answered(edited, status, rv="5")
    wrote(echoes, demand, status, raced)
    deliver(cache, POOLS, MODIFIED, raced)  # a relist: the edit's own event (rv 4) never came
    assert keys == ["ns/a"], "a write whose answer holds someone else's change is no echo"
    keys.clear()

    later = answered(raced, status, rv="6")
    wrote(echoes, raced, status, later)
    echoes.forget("ns", "a")
    deliver(cache, POOLS, MODIFIED, later)
    assert keys == ["ns/a"], "a forgotten pool's echoes are forgotten"


def test_events_that_come_before_the_writes_answer_wait_for_it(keys: Keys) -> None:
    """The watch may deliver a write's event before the writer has its answer: the pool's
    events wait for the answer, which says whose they were."""
    echoes = Echoes(keys)
    cache = PoolCache(offline(), keys, None, echo=echoes.echo)
    base = pool("a")
    deliver(cache, POOLS, ADDED, base)
    keys.clear()

    status = {"status": {"readyReplicas": 1}}
    mine = answered(base, status, rv="2")
    echoes.begin("ns/a")
    deliver(cache, POOLS, MODIFIED, mine)
    echoes.end("ns/a", base, status, mine)
    assert keys == [], "the echo came first and was held"

    # Another writer's change arrives while the next write is in flight: the pool wakes once
    # that write is answered (with or without an echo of its own).
    theirs = {**mine, "metadata": {**mine["metadata"], "resourceVersion": "3"}, "status": {"demand": {}}}
    echoes.begin("ns/a")
    deliver(cache, POOLS, MODIFIED, theirs)
    assert keys == [], "held until the answer"
    echoes.end("ns/a", mine, status, None)  # the write failed, say
    assert keys == ["ns/a"]
    keys.clear()

    # An answer that is no object's JSON is no echo, and what the write held is let go.
    echoes.begin("ns/a")
    deliver(cache, POOLS, MODIFIED, {**theirs, "metadata": {**theirs["metadata"], "resourceVersion": "4"}})
    echoes.end("ns/a", theirs, status, {"metadata": "?"})
    assert keys == ["ns/a"]


def budget(rv: str, generation: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": naming.BUSY_DISRUPTION_BUDGET,
            "namespace": "ns",
            "resourceVersion": rv,
            "generation": generation,
        }
    }


def test_the_shared_budget_brings_back_its_pools_on_a_new_spec_or_deletion_only(
    cache: PoolCache, keys: Keys
) -> None:
    deliver(cache, POOLS, ADDED, pool("a"))
    deliver(cache, POOLS, ADDED, pool("b"))
    deliver(cache, POOLS, ADDED, pool("elsewhere", namespace="ns2"))
    keys.clear()
    deliver(cache, BUDGETS, ADDED, budget("1", 1))
    deliver(cache, BUDGETS, MODIFIED, budget("2", 1))  # the disruption controller's status
    assert keys == []
    deliver(cache, BUDGETS, MODIFIED, budget("3", 2))  # a hand edit of the spec
    assert keys == ["ns/a", "ns/b"]
    keys.clear()
    deliver(cache, BUDGETS, DELETED, budget("3", 2))
    assert keys == ["ns/a", "ns/b"]


def test_a_terminating_namespace_enqueues_its_pools(cache: PoolCache, keys: Keys) -> None:
    deliver(cache, POOLS, ADDED, pool("a"))
    deliver(cache, POOLS, ADDED, pool("other", namespace="ns2"))
    keys.clear()
    namespace: dict[str, Any] = {"metadata": {"name": "ns", "resourceVersion": "1"}}
    deliver(cache, NAMESPACES_, ADDED, namespace)
    assert keys == [] and not cache.namespace_terminating("ns")
    terminating = copy.deepcopy(namespace)
    terminating["metadata"].update(resourceVersion="2", deletionTimestamp="2030-01-20T17:00:00Z")
    deliver(cache, NAMESPACES_, MODIFIED, terminating)
    assert keys == ["ns/a"]
    assert cache.namespace_terminating("ns")


def test_pools_of_one_namespace_are_a_lookup_in_either_mode(keys: Keys) -> None:
    for namespaces in (None, ["ns", "ns2"]):
        cache = PoolCache(offline(), keys, namespaces)
        deliver(cache, POOLS, ADDED, pool("b"))
        deliver(cache, POOLS, ADDED, pool("a"))
        deliver(cache, POOLS, ADDED, pool("c", namespace="ns2"))
        assert [p.raw["metadata"]["name"] for p in cache.pools_in("ns")] == ["a", "b"]
        assert [p["metadata"]["name"] for p in cache.list_pools("ns2")] == ["c"]
        assert [p["metadata"]["name"] for p in cache.list_pools()] == ["a", "b", "c"]


# -- the table's size ----------------------------------------------------------------------------


def test_the_connection_pool_is_sized_from_the_table(keys: Keys) -> None:
    table = pool_watches()
    assert informer_count(table, None) == len(table) == 8
    assert informer_count(table, ["a", "b", "a"]) == 16
    assert informer_count(table, ["a", "b"], cluster_scoped=False) == 14
    assert PoolCache(offline(), keys, ["a", "b"]).informers == 16
    namespaced = PoolCache(offline(), keys, ["a", "b"], cluster_scoped=False)
    assert namespaced.informers == 14
    assert not namespaced.watches(NAMESPACES_)
    assert namespaced.namespace_terminating("a") is False


# -- the store on its own -----------------------------------------------------------------------


def test_a_relist_keeps_views_and_indexes_and_hands_over_the_previous_objects() -> None:
    decoded: list[str] = []

    def decode(obj: dict[str, Any]) -> str:
        decoded.append(obj["metadata"]["name"])
        return str(obj["metadata"]["name"]).upper()

    store = Store(decode=decode, indexes={"first": lambda view: [view[0]]}, keep_previous=True)
    store._put(secret("ab", managedFields=[{"manager": "kubectl"}]))
    store._put(secret("ac"))
    assert "managedFields" not in store.get_by_key("ns/ab")["metadata"]
    assert store.take_previous("ns/ab") is None
    store._replace_all([secret("ab"), secret("ac", rv="2"), secret("bd")])
    assert decoded == ["ab", "ac", "ac", "bd"], "the same resourceVersion is not parsed again"
    assert store.views_by("first", "A") == ["AB", "AC"]
    assert store.keys_by("first", "B") == ["ns/bd"]
    assert store.take_previous("ns/ac") == secret("ac")
    assert store.take_previous("ns/ac") is None
    store._remove(secret("ab"))
    assert store.views_by("first", "A") == ["AC"]
    assert store.view("ns/ab") is None
    assert store.keys_by("namespace", "ns") == ["ns/ac", "ns/bd"]
