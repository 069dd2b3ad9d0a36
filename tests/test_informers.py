"""Informer caches: the adapter on fakes, then everything on a real API server.

The store and the table's event mapping without an API server: tests/test_watches.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.informer import ADDED, DELETED, ERROR, MODIFIED, SharedInformer
from kubernetes.watch import Watch

from runnerpool.api import GROUP, KIND, PLURAL, VERSION
from runnerpool.echoes import Echoes
from runnerpool.naming import (
    CREDENTIAL_LABEL,
    CREDENTIAL_VALUE,
    MANAGED_BY_LABEL,
    MANAGED_BY_SELECTOR,
    MANAGED_BY_VALUE,
    POOL_LABEL,
)
from runnerpool.reads import PodsNotCachedError
from runnerpool.runtime.informers import InformerStoppedError, ListWatchAdapter, NamespaceNotWatchedError
from runnerpool.runtime.kube import RUNNER_POOLS, Kube
from runnerpool.runtime.listwatch import (
    WATCH_CONNECT_TIMEOUT,
    WATCH_READ_MARGIN,
    WATCH_SECONDS,
    SingleDecodeWatch,
    StoppableInformer,
    watch_backoff,
)
from runnerpool.watches import PoolCache, owner_key
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest

# --------------------------------------------------------------------------- fakes


class FakeSock:
    def __init__(self, closed: threading.Event) -> None:
        self._closed = closed

    def shutdown(self, how: int) -> None:
        self._closed.set()


class FakeConnection:
    def __init__(self, closed: threading.Event) -> None:
        self.sock = FakeSock(closed)


class FakeResponse:
    """Enough of urllib3.HTTPResponse for the adapter's list and for ``Watch.stream``.

    A watch response stays open after its scripted events until ``Watch.stop``
    shuts its socket down, as a real one does.
    """

    status = 200

    def __init__(self, body: Any = None, events: list[dict[str, Any]] | None = None, hold: bool = False):
        self.data = json.dumps(body).encode() if body is not None else b""
        self._events = events or []
        self._closed = threading.Event()
        self.connection = FakeConnection(self._closed)
        self._hold = hold
        self.released = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for event in self._events:
            yield (json.dumps(event) + "\n").encode()
        if self._hold:
            self._closed.wait(10)

    def close(self) -> None:
        self._closed.set()

    def release_conn(self) -> None:
        self.released = True


def secret(name: str, rv: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta}, "type": "Opaque"}


def gone() -> dict[str, Any]:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    return {"type": "ERROR", "object": {**status, "message": "too old resource version"}}


class ScriptedApi:
    """A list function whose list and watch answers are scripted in order."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[FakeResponse]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> FakeResponse:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            return self.watches.pop(0) if self.watches else FakeResponse(hold=True)
        return FakeResponse(body=self.lists.pop(0))


class EventLog:
    def __init__(self, informer: Any) -> None:
        self.events: list[tuple[str, str]] = []
        self.errors: list[Any] = []
        self.cond = threading.Condition()
        for kind in (ADDED, MODIFIED, DELETED):
            informer.add_event_handler(
                kind, lambda obj, kind=kind: self._record(kind, obj["metadata"]["name"])
            )
        informer.add_event_handler(ERROR, self._error)

    def _record(self, kind: str, name: str) -> None:
        with self.cond:
            self.events.append((kind, name))
            self.cond.notify_all()

    def _error(self, exc: Any) -> None:
        with self.cond:
            self.errors.append(exc)
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), f"events={self.events} errors={self.errors}"


# --------------------------------------------------------------------------- unit tests


def test_library_informer_cannot_list_custom_objects_without_the_adapter() -> None:
    """Documents why the adapter exists: a dict's ``.items`` is a method."""
    informer = SharedInformer(lambda **kw: {"items": [], "metadata": {"resourceVersion": "1"}})
    log = EventLog(informer)
    informer.start()
    try:
        log.wait(lambda: bool(log.errors))
    finally:
        informer.stop()
    assert isinstance(log.errors[0], TypeError)


def test_adapter_list_turns_dicts_into_items_and_resource_version() -> None:
    body = {
        "apiVersion": "v1",
        "kind": "SecretList",
        "metadata": {"resourceVersion": "42"},
        "items": [{"metadata": {"name": "a", "namespace": "ns"}}],
    }
    seen: list[dict[str, Any]] = []
    response = FakeResponse(body=body)

    def list_fn(**kwargs: Any) -> FakeResponse:
        seen.append(kwargs)
        return response

    adapter = ListWatchAdapter(list_fn, {"group": "g"})
    result: Any = adapter(namespace="ns", label_selector="x=y")
    assert seen == [{"group": "g", "namespace": "ns", "label_selector": "x=y", "_preload_content": False}]
    assert result.metadata.resource_version == "42"
    assert result.items == [
        {"metadata": {"name": "a", "namespace": "ns"}, "apiVersion": "v1", "kind": "Secret"}
    ]
    assert response.released
    assert not adapter.synced.is_set(), "a list alone is not a synced cache"


def test_adapter_watch_passes_through_with_bookmarks() -> None:
    seen: list[dict[str, Any]] = []
    response = FakeResponse(events=[{"type": "ADDED", "object": secret("a", "1")}])

    def list_fn(**kwargs: Any) -> FakeResponse:
        seen.append(kwargs)
        return response

    adapter = ListWatchAdapter(list_fn, {"plural": "p"})
    watched: Any = adapter(watch=True, resource_version="7", _preload_content=False)
    [asked] = seen
    seconds = asked.pop("timeout_seconds")
    assert asked.pop("_request_timeout") == (WATCH_CONNECT_TIMEOUT, seconds + WATCH_READ_MARGIN)
    assert asked == {
        "plural": "p",
        "watch": True,
        "resource_version": "7",
        "_preload_content": False,
        "allow_watch_bookmarks": True,
    }
    assert adapter.synced.is_set()
    # Everything Watch touches is the real response's.
    assert watched.status == 200
    assert watched.connection is response.connection
    assert list(watched.stream()) == list(response.stream())


def test_every_watch_ends_within_minutes_and_a_dead_connection_is_given_up() -> None:
    """The operator's informers never resync, so the library asks for no timeoutSeconds: a
    watch whose peer vanished without a FIN (an API server that died, a load balancer that
    dropped the flow) blocked its informer for good, that cache frozen while the Lease, on
    connections with timeouts, kept being renewed. Each watch now asks the server to end it
    after 5 to 10 minutes (client-go's spread) and reads no longer than a little past that."""
    asked: list[dict[str, Any]] = []
    adapter = ListWatchAdapter(lambda **kw: asked.append(kw) or FakeResponse(events=[]))
    for _ in range(20):
        adapter(watch=True)
        adapter.failures = 0  # (each empty stream would count; not what this test is about)
    seconds = [kw["timeout_seconds"] for kw in asked]
    assert all(WATCH_SECONDS[0] <= s <= WATCH_SECONDS[1] for s in seconds)
    assert len(set(seconds)) > 1, "spread, so that many informers do not reconnect at once"
    assert all(kw["_request_timeout"][1] == kw["timeout_seconds"] + WATCH_READ_MARGIN for kw in asked)


def test_a_watch_the_server_keeps_refusing_is_retried_with_a_growing_wait() -> None:
    """A 503 in a rolling restart, a 429, a 403 once a Role went: the library's loop opened the
    watch again at once, thousands of times a second per informer against a server already in
    trouble. Now 0.8 s doubling to 30 s (client-go's reflector), until a watch delivers."""
    watches = 0

    def api(**kwargs: Any) -> Any:
        nonlocal watches
        if kwargs.get("watch"):
            watches += 1
            raise ApiException(status=503, reason="Service Unavailable")
        return FakeResponse(
            body={"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}}
        )

    informer = StoppableInformer(ListWatchAdapter(api), namespace="ns")
    informer.start()
    try:
        time.sleep(1.0)
    finally:
        informer.signal_stop()
        assert informer.join(5), "a stop ends the wait at once"
    assert 1 <= watches <= 3, f"{watches} watch requests in one second against a failing API server"
    assert [watch_backoff(n, lambda: 1.0) for n in (0, 1, 2, 3, 7, 20)] == [0.0, 0.8, 1.6, 3.2, 30.0, 30.0]
    assert watch_backoff(3, lambda: 0.0) == 1.6, "half of each wait is jitter"


class BrokenStream(FakeResponse):
    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield b"{}\n"
        raise ConnectionResetError("socket shut down")


def test_watch_stream_errors_surface_until_the_adapter_is_closed() -> None:
    adapter = ListWatchAdapter(lambda **kw: BrokenStream())
    with pytest.raises(ConnectionResetError):
        list(adapter(watch=True).stream())  # type: ignore[attr-defined]
    torn_down: Any = adapter(watch=True)
    adapter.close()
    assert list(torn_down.stream()) == [b"{}\n"]
    with pytest.raises(InformerStoppedError):
        adapter(watch=True)


def test_close_shuts_down_the_live_watch_and_one_still_in_flight() -> None:
    live = FakeResponse(hold=True)
    adapter = ListWatchAdapter(lambda **kw: live)
    adapter(watch=True)
    adapter.close()
    assert live._closed.is_set(), "socket of the open watch shut down"

    in_flight = FakeResponse(hold=True)
    requested = threading.Event()
    answer = threading.Event()

    def slow_watch(**kwargs: Any) -> FakeResponse:
        requested.set()
        assert answer.wait(5)
        return in_flight

    adapter = ListWatchAdapter(slow_watch)
    got: list[Any] = []
    caller = threading.Thread(target=lambda: got.append(adapter(watch=True)))
    caller.start()
    assert requested.wait(5)
    adapter.close()  # the response is not known yet
    answer.set()
    caller.join(5)
    assert in_flight._closed.is_set(), "response that arrived after close was shut down"
    assert list(got[0].stream()) == []


def test_watch_sees_the_adapter_as_returning_plain_dicts() -> None:
    """``Watch`` picks the event type from the annotation; ``object`` keeps dicts and tracks RVs."""
    adapter = ListWatchAdapter(lambda **kw: None)
    watch = Watch()
    assert watch.get_return_type(adapter) is object
    assert watch.get_watch_argument_name(adapter) == "watch"
    event = watch.unmarshal_event(json.dumps({"type": "ADDED", "object": secret("a", "9")}), object)
    assert event["object"] == secret("a", "9")
    assert watch.resource_version == "9"


@pytest.mark.parametrize(
    "line",
    [
        json.dumps({"type": "ADDED", "object": secret("a", "9")}),
        json.dumps({"type": "MODIFIED", "object": secret("a", "12", labels={"x": "y"})}),
        json.dumps({"type": "BOOKMARK", "object": {"kind": "Secret", "metadata": {"resourceVersion": "30"}}}),
        json.dumps(gone()),
        "",
        "   ",
        "{not json",
    ],
)
def test_single_decode_watch_reads_events_as_the_library_does(line: str) -> None:
    library, ours = Watch(), SingleDecodeWatch()
    library.resource_version = ours.resource_version = "1"
    assert ours.unmarshal_event(line, object) == library.unmarshal_event(line, object)
    assert ours.resource_version == library.resource_version


@pytest.mark.parametrize("informer_class", [SharedInformer, StoppableInformer])
def test_informer_relists_after_410_and_diffs_the_cache(
    informer_class: type[SharedInformer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library's informer, and ours, which reads the same events with one JSON decode each
    (the library's ``Watch`` re-encodes every object and decodes it again)."""
    encodes: list[object] = []
    dumps = json.dumps
    monkeypatch.setattr(json, "dumps", lambda obj, *a, **kw: (encodes.append(obj), dumps(obj, *a, **kw))[1])
    api = ScriptedApi(
        lists=[
            {
                "kind": "SecretList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "10"},
                "items": [secret("a", "5")],
            },
            {
                "kind": "SecretList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "20"},
                "items": [secret("b", "11"), secret("c", "19")],
            },
        ],
        watches=[
            FakeResponse(events=[{"type": "ADDED", "object": secret("b", "11")}, gone()]),
            FakeResponse(events=[gone()]),  # Watch retries a 410 once by itself, then raises
            FakeResponse(events=[{"type": "MODIFIED", "object": secret("c", "21")}], hold=True),
        ],
    )
    adapter = ListWatchAdapter(api)
    informer = informer_class(adapter, namespace="ns")
    log = EventLog(informer)
    informer.start()
    try:
        log.wait(lambda: ("MODIFIED", "c") in log.events[-1:])
    finally:
        informer.stop()
    objects = [e for e in encodes if isinstance(e, dict) and e.get("metadata", {}).get("name")]
    assert len(objects) == (0 if informer_class is StoppableInformer else 2), "watched objects re-encoded"
    assert log.events == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        # relist after 410: a vanished, b still there, c new
        ("DELETED", "a"),
        ("MODIFIED", "b"),
        ("ADDED", "c"),
        ("MODIFIED", "c"),
    ]
    assert any(isinstance(e, ApiException) and e.status == 410 for e in log.errors)
    assert adapter.lists == 2
    watch_rvs = [c["resource_version"] for c in api.calls if c.get("watch")]
    assert watch_rvs == ["10", "11", "20"]
    assert all(c["allow_watch_bookmarks"] for c in api.calls if c.get("watch"))
    assert sorted(informer.cache.list_keys()) == ["ns/b", "ns/c"]
    assert informer.cache.get_by_key("ns/c")["metadata"]["resourceVersion"] == "21"


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (
            {
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True},
                    {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "pool", "controller": True},
                ]
            },
            "ns/pool",
        ),
        # Not the controller reference: ignored, label fallback used.
        (
            {
                "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": "x"}],
                "labels": {POOL_LABEL: "labelled"},
            },
            "ns/labelled",
        ),
        # Same kind name from another group is not ours.
        (
            {
                "ownerReferences": [
                    {"apiVersion": "other.io/v1", "kind": KIND, "name": "x", "controller": True}
                ]
            },
            None,
        ),
        ({"labels": {POOL_LABEL: "p"}}, "ns/p"),
        ({}, None),
    ],
)
def test_owner_key(meta: dict[str, Any], expected: str | None) -> None:
    assert owner_key({"metadata": {"namespace": "ns", "name": "child", **meta}}) == expected


# --------------------------------------------------------------------------- real API server


class Keys:
    """An ``enqueue`` that records keys and lets a test wait for one."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, key: str) -> None:
        with self.cond:
            self.keys.append(key)
            self.cond.notify_all()

    def wait_for(self, key: str, timeout: float = 15.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: key in self.keys, timeout), f"{key} not in {self.keys}"

    def clear(self) -> None:
        with self.cond:
            self.keys.clear()


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def informers(
    api_client: client.ApiClient, namespace: str, keys: Keys, runnerpool_crd: Any
) -> Iterator[PoolCache]:
    informer_set = PoolCache(api_client, keys, [namespace])
    yield informer_set
    assert informer_set.stop(timeout=10), "informers did not stop"


#: The labels the operator's Secret cache selects by: its own Secrets, and the credential Secrets
#: it protects.
OWNED = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
CREDENTIAL = {CREDENTIAL_LABEL: CREDENTIAL_VALUE}


def make_secret(
    name: str, *, labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None
) -> Any:
    return client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, labels=labels, owner_references=[owner] if owner else None),
        string_data={"token": "t0"},
    )


def make_account(name: str, labels: dict[str, str]) -> Any:
    return client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name, labels=labels))


def test_wait_for_sync_means_existing_objects_are_cached(
    api_client: client.ApiClient, namespace: str, informers: PoolCache, keys: Keys
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(namespace, make_secret("before-start", labels={**OWNED, POOL_LABEL: "p1"}))
    assert not informers.has_synced
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    assert informers.has_synced
    # No waiting: the initial list is in the cache and its handlers have run.
    cached = informers.get_secret(namespace, "before-start")
    assert cached is not None
    assert cached["kind"] == "Secret" and cached["apiVersion"] == "v1"
    assert cached["metadata"]["labels"] == {**OWNED, POOL_LABEL: "p1"}
    assert f"{namespace}/p1" in keys.keys


def test_wait_for_sync_times_out_when_not_started(informers: PoolCache) -> None:
    assert informers.wait_for_sync(timeout=0.05) is False


def test_secret_create_update_delete(
    api_client: client.ApiClient, namespace: str, informers: PoolCache
) -> None:
    core = client.CoreV1Api(api_client)
    informers.start()
    assert informers.wait_for_sync(timeout=30)

    core.create_namespaced_secret(namespace, make_secret("creds", labels=CREDENTIAL))
    created = wait_for(lambda: informers.get_secret(namespace, "creds"), message="secret in cache")
    assert created is not None
    assert created["data"]["token"] == "dDA="  # base64, as on the wire

    core.patch_namespaced_secret("creds", namespace, {"stringData": {"token": "t1"}})
    wait_for(
        lambda: (informers.get_secret(namespace, "creds") or {}).get("data", {}).get("token") == "dDE=",
        message="update in cache",
    )

    # A label removed takes the Secret out of the cache, the label put back brings it again.
    core.patch_namespaced_secret("creds", namespace, {"metadata": {"labels": {CREDENTIAL_LABEL: None}}})
    wait_for(lambda: informers.get_secret(namespace, "creds") is None, message="unlabelled: out of the cache")
    core.patch_namespaced_secret("creds", namespace, {"metadata": {"labels": CREDENTIAL}})
    wait_for(lambda: informers.get_secret(namespace, "creds"), message="labelled again: back in the cache")

    core.delete_namespaced_secret("creds", namespace)
    wait_for(lambda: informers.get_secret(namespace, "creds") is None, message="delete in cache")


def test_foreign_secrets_are_never_cached(
    api_client: client.ApiClient, namespace: str, informers: PoolCache
) -> None:
    """Secrets without the operator's labels, before the start (the initial list) and after."""
    core = client.CoreV1Api(api_client)
    for index in range(20):
        core.create_namespaced_secret(namespace, make_secret(f"before-{index}"))
    core.create_namespaced_secret(namespace, make_secret("ours-before", labels=CREDENTIAL))
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    for index in range(20):
        core.create_namespaced_secret(namespace, make_secret(f"after-{index}"))
    # Any foreign Secret's event would come on the same watch before the ones that follow it.
    core.create_namespaced_secret(namespace, make_secret("ours-after", labels=CREDENTIAL))
    core.create_namespaced_secret(namespace, make_secret("token-after", labels=OWNED))
    wait_for(lambda: informers.get_secret(namespace, "ours-after"), message="the labelled Secret")
    wait_for(lambda: informers.get_secret(namespace, "token-after"), message="the owned Secret")
    names = [s["metadata"]["name"] for s in informers.list_secrets(namespace)]
    assert names == ["ours-after", "ours-before", "token-after"]
    assert (informers.count("Secrets"), informers.count("CredentialSecrets")) == (1, 2)


def test_reads_are_copies(api_client: client.ApiClient, namespace: str, informers: PoolCache) -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(namespace, make_secret("copy", labels=CREDENTIAL))
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    wait_for(lambda: informers.get_secret(namespace, "copy"), message="secret in cache")
    first = informers.get_secret(namespace, "copy")
    assert first is not None
    first["data"]["token"] = "mutated"
    second = informers.get_secret(namespace, "copy")
    assert second is not None and second["data"]["token"] == "dDA="


def test_unwatched_namespace_is_an_error(informers: PoolCache) -> None:
    with pytest.raises(NamespaceNotWatchedError):
        informers.get_secret("some-other-namespace", "x")


def create_pool_a(api_client: client.ApiClient, namespace: str, credential: str) -> Any:
    """RunnerPool ``pool-a`` of octo-org/octo-repo, naming ``credential``."""
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": "pool-a"},
            "spec": {"repository": "octo-org/octo-repo", "credentialSecretName": credential},
        },
    )


def test_child_events_enqueue_owner(
    api_client: client.ApiClient, namespace: str, informers: PoolCache, keys: Keys, runnerpool_crd: Any
) -> None:
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    informers.start()
    assert informers.wait_for_sync(timeout=30)

    pool = create_pool_a(api_client, namespace, "github-credentials")
    keys.wait_for(f"{namespace}/pool-a")
    cached_pool = wait_for(lambda: informers.get_pool(namespace, "pool-a"), message="pool in cache")
    assert cached_pool is not None
    assert cached_pool["spec"]["repository"] == "octo-org/octo-repo"
    assert [p["metadata"]["name"] for p in informers.list_pools()] == ["pool-a"]
    assert [p["metadata"]["name"] for p in informers.list_pools(namespace)] == ["pool-a"]

    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": "pool-a",
        "uid": pool["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    keys.clear()
    core.create_namespaced_secret(namespace, make_secret("pool-a-token", labels=OWNED, owner=owner))
    keys.wait_for(f"{namespace}/pool-a")

    # A managed ServiceAccount with only the pool label (no owner reference) maps through the label.
    keys.clear()
    managed = {"app.kubernetes.io/managed-by": "runnerpool-operator", POOL_LABEL: "pool-b"}
    core.create_namespaced_service_account(namespace, make_account("pool-b-runners", managed))
    keys.wait_for(f"{namespace}/pool-b")
    wait_for(lambda: informers.get_service_account(namespace, "pool-b-runners"), message="account in cache")

    # Deleting a child enqueues its owner so the pool can recreate it.
    keys.clear()
    core.delete_namespaced_service_account("pool-b-runners", namespace)
    keys.wait_for(f"{namespace}/pool-b")

    # A credential Secret (labelled by protection) enqueues the pools that reference it.
    keys.clear()
    core.create_namespaced_secret(namespace, make_secret("github-credentials", labels=CREDENTIAL))
    keys.wait_for(f"{namespace}/pool-a")

    # Pool deletion is an event too.
    keys.clear()
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "pool-a")
    keys.wait_for(f"{namespace}/pool-a")
    wait_for(lambda: informers.get_pool(namespace, "pool-a") is None, message="pool gone from cache")


def test_the_reconcilers_own_pool_writes_wake_no_pass_on_a_real_api_server(
    api_client: client.ApiClient, namespace: str, keys: Keys, runnerpool_crd: Any
) -> None:
    """The API server answers a status or metadata patch with exactly the patched object (what
    ``runnerpool.echoes`` relies on); the echo is dropped, a user's edit after it is not."""
    echoes = Echoes(keys)
    informers = PoolCache(api_client, keys, [namespace], echo=echoes.echo)
    custom, kube, key = client.CustomObjectsApi(api_client), Kube(api_client), f"{namespace}/pool-e"
    informers.start()
    try:
        assert informers.wait_for_sync(timeout=30)
        create_pool(api_client, namespace, pool_manifest("pool-e", repo="o/r"))
        keys.wait_for(key)
        for patch, subresource in (
            ({"metadata": {"finalizers": ["example.com/x"]}}, ""),
            (
                {
                    "status": {
                        "replicas": 1,
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "False",
                                "reason": "Starting",
                                "message": "m",
                                "lastTransitionTime": "2026-12-04T00:00:00Z",
                            }
                        ],
                    }
                },
                "status",
            ),
        ):
            base = wait_for(lambda: informers.get_pool(namespace, "pool-e"), message="pool in cache")
            keys.clear()
            echoes.begin(key)  # as Reconciler._patch_pool does: its event may come before the answer
            answer = kube.patch(RUNNER_POOLS, namespace, "pool-e", patch, subresource=subresource)
            echoes.end(key, base, patch, answer)
            version = answer["metadata"]["resourceVersion"]
            wait_for(
                lambda v=version: (
                    (informers.get_pool(namespace, "pool-e") or {})["metadata"]["resourceVersion"] == v
                ),
                message="the write in the cache",
            )
            # A user's edit after it: the informer handles events in order, so once the edit's key
            # is in, the echo before it was handled too.
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "pool-e", {"metadata": {"labels": {"edited": version}}}
            )
            keys.wait_for(key)
            assert keys.keys == [key], f"only the user's edit woke the pool, not the echo of {patch}"
    finally:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "pool-e", {"metadata": {"finalizers": None}}
        )
        assert informers.stop(timeout=10), "informers did not stop"


def test_owner_change_enqueues_old_and_new_owner(
    api_client: client.ApiClient, namespace: str, informers: PoolCache, keys: Keys
) -> None:
    core = client.CoreV1Api(api_client)
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    core.create_namespaced_secret(namespace, make_secret("moving", labels={**OWNED, POOL_LABEL: "old"}))
    keys.wait_for(f"{namespace}/old")
    keys.clear()
    core.patch_namespaced_secret("moving", namespace, {"metadata": {"labels": {POOL_LABEL: "new"}}})
    keys.wait_for(f"{namespace}/new")
    keys.wait_for(f"{namespace}/old")


def test_unmanaged_service_accounts_are_not_cached(
    api_client: client.ApiClient, namespace: str, informers: PoolCache
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, make_account("foreign", {"app": "foreign"}))
    core.create_namespaced_service_account(
        namespace, make_account("ours", {"app.kubernetes.io/managed-by": "runnerpool-operator"})
    )
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    assert informers.get_service_account(namespace, "ours") is not None
    assert informers.get_service_account(namespace, "foreign") is None
    assert MANAGED_BY_SELECTOR == "app.kubernetes.io/managed-by=runnerpool-operator"


def make_pod(name: str, labels: dict[str, str]) -> Any:
    """A pod no scheduler picks up: in the sealed run the control plane has a kube-scheduler,
    whose status update (Unschedulable) would be an event at a moment the test cannot know."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="runner", image="busybox")], scheduler_name="none"
        ),
    )


def test_pods_are_cached_per_pool_and_enqueue_their_pool(
    api_client: client.ApiClient, namespace: str, informers: PoolCache, keys: Keys
) -> None:
    core = client.CoreV1Api(api_client)
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    managed = {"app.kubernetes.io/managed-by": "runnerpool-operator"}

    def names(pool: str) -> list[str]:
        return [p["metadata"]["name"] for p in informers.list_pods(namespace, pool)]

    core.create_namespaced_pod(namespace, make_pod("foreign", {POOL_LABEL: "p1"}))
    core.create_namespaced_pod(namespace, make_pod("p1-b", {**managed, POOL_LABEL: "p1"}))
    core.create_namespaced_pod(namespace, make_pod("p1-a", {**managed, POOL_LABEL: "p1"}))
    core.create_namespaced_pod(namespace, make_pod("p2-a", {**managed, POOL_LABEL: "p2"}))
    keys.wait_for(f"{namespace}/p2")
    wait_for(lambda: names("p1") == ["p1-a", "p1-b"], message="p1's pods, sorted, without the unmanaged one")
    assert names("p2") == ["p2-a"]

    keys.clear()
    core.patch_namespaced_pod_status("p1-a", namespace, {"status": {"phase": "Running"}})
    keys.wait_for(f"{namespace}/p1")
    wait_for(
        lambda: informers.list_pods(namespace, "p1")[0]["status"]["phase"] == "Running",
        message="the status change in the cache",
    )

    keys.clear()
    core.delete_namespaced_pod("p1-a", namespace, grace_period_seconds=0)
    keys.wait_for(f"{namespace}/p1")
    wait_for(lambda: names("p1") == ["p1-b"], message="the deleted pod gone from the cache")
    assert f"{namespace}/p2" not in keys.keys


def test_all_namespaces_mode(
    api_client: client.ApiClient, namespace: str, keys: Keys, runnerpool_crd: Any
) -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, make_secret("anywhere", labels=CREDENTIAL)
    )
    informer_set = PoolCache(api_client, keys, None)
    informer_set.start()
    try:
        assert informer_set.wait_for_sync(timeout=30)
        assert informer_set.get_secret(namespace, "anywhere") is not None
        assert any(s["metadata"]["name"] == "anywhere" for s in informer_set.list_secrets(namespace))
    finally:
        assert informer_set.stop(timeout=10)


def test_secrets_and_pods_are_watched_only_in_the_namespaces_asked_for(
    api_client: client.ApiClient, namespace: str, other_namespace: str, keys: Keys, runnerpool_crd: Any
) -> None:
    """Cluster mode lists no Secret and no pod cluster-wide: a namespace's are cached once it is
    watched (enabled), and leave the cache when it no longer is, which brings its pools back
    (no event says so); the rest is watched at start."""
    core = client.CoreV1Api(api_client)
    managed = {"app.kubernetes.io/managed-by": "runnerpool-operator", POOL_LABEL: "pool-a"}
    for ns in (namespace, other_namespace):
        core.create_namespaced_secret(ns, make_secret("creds", labels=CREDENTIAL))
        core.create_namespaced_pod(ns, make_pod("pool-a-x", managed))
    create_pool_a(api_client, namespace, "creds")
    informer_set = PoolCache(api_client, keys, None, defer_per_namespace=True)
    informer_set.start()
    try:
        assert informer_set.wait_for_sync(timeout=30), "the set syncs without any Secret informer"
        assert informer_set.get_secret(namespace, "creds") is None
        assert informer_set.list_secrets() == []
        with pytest.raises(PodsNotCachedError):
            informer_set.list_pods(namespace, "pool-a")  # unknown, not "none": no runner judged by it
        assert informer_set.count("Pods") == 0
        assert informer_set.watch_namespace(namespace, timeout=30)
        assert informer_set.get_secret(namespace, "creds") is not None, (
            "listed before watch_namespace returned"
        )
        assert [s["metadata"]["namespace"] for s in informer_set.list_secrets()] == [namespace]
        assert [p["metadata"]["name"] for p in informer_set.list_pods(namespace, "pool-a")] == ["pool-a-x"]
        assert informer_set.count("Pods") == 1, "not the other namespace's"
        core.create_namespaced_secret(namespace, make_secret("later", labels=OWNED))
        wait_for(
            lambda: informer_set.get_secret(namespace, "later"),
            message="a new Secret of the watched namespace",
        )
        keys.clear()
        assert informer_set.unwatch_namespace(namespace)
        assert informer_set.get_secret(namespace, "creds") is None
        assert informer_set.count("CredentialSecrets") == 0
        with pytest.raises(PodsNotCachedError):
            informer_set.list_pods(namespace, "pool-a")
        assert keys.keys == [f"{namespace}/pool-a"], "its pools see the namespace refused"
        assert not informer_set.unwatch_namespace(namespace), "nothing more to stop"
        assert keys.keys == [f"{namespace}/pool-a"], "once"
    finally:
        assert informer_set.stop(timeout=10)


def test_stop_is_prompt(api_client: client.ApiClient, namespace: str, informers: PoolCache) -> None:
    informers.start()
    assert informers.wait_for_sync(timeout=30)
    started = time.monotonic()
    assert informers.stop(timeout=10)
    assert time.monotonic() - started < 5
