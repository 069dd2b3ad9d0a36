"""Watch-backed caches of RunnerPools, their Secrets, runner Pods and disruption budgets
(and Deployments, only to take over pools that earlier versions ran as one).

Built on the Python kubernetes client's own ``kubernetes.informer.SharedInformer``
(list, then watch from the list's resourceVersion, relist on 410 Gone, one
daemon thread per informer).  What it does not do, and what this module adds:

* **Custom objects.**  Its list step reads ``resp.items``; ``CustomObjectsApi``
  returns a plain dict, whose ``.items`` is the *dict method*, so the list fails
  with ``TypeError`` and is retried every 5 s for ever.  :class:`ListWatchAdapter`
  wraps every list function so the list step sees ``.items`` and
  ``.metadata.resource_version``.
* **Plain dicts everywhere.**  The same adapter lists with
  ``_preload_content=False`` and parses the JSON itself, and its ``object``
  return annotation makes ``kubernetes.watch.Watch`` hand watch events over as
  dicts too.  So every cache holds wire-format dicts (camelCase keys:
  ``metadata.ownerReferences``, ``spec.template``...), the same shape for core
  kinds and RunnerPools, without the cost of building generated model objects
  per event or converting them back on every read.  List items get the
  ``apiVersion``/``kind`` the API server leaves out of list responses.
* **Bookmarks.**  Watches ask for ``allowWatchBookmarks`` so a quiet watch
  still advances its resourceVersion and is less likely to hit 410 on reconnect.
* **HasSynced.**  There is none.  The informer opens its watch only after the
  initial list is stored in its cache and its ADDED handlers have run, so the
  adapter's first watch call is the sync signal.
* **A stop that works.**  ``SharedInformer.stop`` unblocks the watch by
  shutting its socket down, which urllib3 reports as ``ProtocolError`` and the
  informer logs with a traceback as an "unexpected error" on every shutdown.
  Worse, if the watch request is still in flight (e.g. just after start) the
  socket is not yet known, and ``stop`` blocks until the first event or
  bookmark, a minute or more; ``stop`` also joins without a timeout.
  :class:`StoppableInformer` and the adapter fix all three: the in-flight watch is
  shut down too, the torn-down stream ends quietly, and
  :meth:`InformerSet.stop` signals every informer, then waits with a deadline.

Secrets: one informer per namespace for *all* Secrets, not a second one
filtered by the managed-by label.  Credential Secrets are user-created and carry
no label of ours, the operator must read them anyway, and managed Secrets
are a subset, so a labelled informer would only hold duplicates.  The default
field selector leaves out Helm release and service-account-token Secrets, which
can be large and can never be a pool's Secret.

Pods: only the operator's (``MANAGED_BY_SELECTOR``), indexed by namespace and pool
label: the reconciler and the runner managers read one pool's pods on every pass, and a
scan of every cached pod per pool would make each round cost O(pools x pods).  A pod event
enqueues its controlling pool (the pool itself, or through the pool label for a pod that
a Deployment of an earlier version still controls), and is reported to ``on_pod``
(the reconciler's create expectations).

Namespaces: the watched ones (all, or each ``--namespace`` by name), so the
reconciler knows up front that a namespace is being deleted: nothing new can be
created in it, and its pools go straight to deregistration.  A namespace that
starts terminating enqueues its pools at once.  Namespace objects are cluster-scoped: in
namespace-scoped mode (``watch_namespaces=False``, only Roles granted) there is no such
informer, a namespace never counts as terminating up front, and the API's "being
terminated" refusals end the pool's reconciles instead.
"""

# No ``from __future__ import annotations`` here: ``Watch`` inspects the
# adapter's return annotation at run time and needs the real ``object`` class,
# not the string "object".
import contextlib
import functools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.informer import ADDED, DELETED, MODIFIED, SharedInformer
from kubernetes.informer.cache import ObjectCache

from runnerpool import api
from runnerpool.domain import pool_key
from runnerpool.runtime.kube import (
    DEPLOYMENTS,
    NAMESPACES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    RUNNER_POOLS,
    SECRETS,
    Kube,
    Resource,
)

__all__ = [
    "DEFAULT_SECRET_FIELD_SELECTOR",
    "GROUP",
    "KIND",
    "MANAGED_BY_SELECTOR",
    "PLURAL",
    "POOL_LABEL",
    "VERSION",
    "InformerSet",
    "InformerStoppedError",
    "ListWatchAdapter",
    "NamespaceNotWatchedError",
    "StoppableInformer",
    "object_key",
    "owner_key",
    "pool_index",
]

logger = logging.getLogger(__name__)

# One source of truth for names the CRD and the children builders also use.
GROUP = api.GROUP
VERSION = api.VERSION
PLURAL = api.PLURAL
KIND = api.KIND
MANAGED_BY_SELECTOR = f"{api.MANAGED_BY_LABEL}={api.MANAGED_BY_VALUE}"
POOL_LABEL = api.POOL_LABEL
DEFAULT_SECRET_FIELD_SELECTOR = "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token"

Obj = dict[str, Any]
ObjList = list[Obj]  # ``_Kind.list`` shadows ``list`` inside that class
Enqueue = Callable[[str], None]
Handler = Callable[[str, Obj], None]
SecretRefs = Callable[[Obj], Iterable[str]]


class NamespaceNotWatchedError(LookupError):
    """A read for a namespace no informer covers: a configuration bug, not "absent"."""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return pool_key(namespace, name) if namespace else name


def owner_key(obj: Mapping[str, Any]) -> str | None:
    """The ``ns/name`` of the RunnerPool that controls ``obj``, if any.

    The controller ownerReference is authoritative (it is what garbage
    collection follows); the pool label is the fallback for objects created
    before their owner's uid was known or whose reference was stripped.
    """
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    for ref in meta.get("ownerReferences") or []:
        api_version = str(ref.get("apiVersion", ""))
        if ref.get("controller") and ref.get("kind") == KIND and api_version.partition("/")[0] == GROUP:
            return pool_key(namespace, ref["name"])
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return pool_key(namespace, pool) if pool else None


@dataclass
class _ListMeta:
    resource_version: str


@dataclass
class _ListResult:
    """What ``SharedInformer._initial_list`` reads: ``.items`` and ``.metadata.resource_version``."""

    items: list[Obj]
    metadata: _ListMeta


class InformerStoppedError(RuntimeError):
    """A watch was requested after its informer began stopping."""


class ListWatchAdapter:
    """Makes any generated list function usable by ``SharedInformer``, yielding dicts.

    ``fixed`` supplies the arguments the informer does not know about (group,
    version, plural for custom objects).  See the module docstring for why.
    The ``-> object`` annotation on ``__call__`` is load-bearing: ``Watch``
    reads the list function's return annotation to choose the event type, and
    ``object`` makes it deserialize events to plain dicts.
    """

    def __init__(self, func: Callable[..., Any], fixed: Mapping[str, Any] | None = None) -> None:
        self._func = func
        self._fixed = dict(fixed or {})
        self._lock = threading.Lock()
        self._closing = False
        self._shut = False
        self._live: Any = None
        self.synced = threading.Event()
        self.lists = 0  # for tests and debugging: relists show up here
        #: Set by the informer that owns the adapter: ends its current Watch.
        self.stop_current_watch: Callable[[], None] | None = None

    @property
    def closing(self) -> bool:
        return self._closing

    def mark_closing(self) -> None:
        """From now on a broken watch stream ends quietly and no new watch is opened."""
        with self._lock:
            self._closing = True

    def shutdown_watch(self) -> None:
        """Shut down the open watch, or the one still in flight when it arrives.

        ``Watch.stop`` can only shut down a response it has already been
        handed.  Call after ``Watch.stop`` so the stream's end is not taken for
        a dropped connection and retried.
        """
        with self._lock:
            self._closing = self._shut = True
            live, self._live = self._live, None
        _shutdown(live)

    def close(self) -> None:
        self.mark_closing()
        self.shutdown_watch()

    def __call__(self, **kwargs: Any) -> object:
        if kwargs.get("watch"):
            return self._watch(kwargs)
        kwargs["_preload_content"] = False
        resp = self._func(**self._fixed, **kwargs)
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        self.lists += 1
        return _list_result(body)

    def _watch(self, kwargs: dict[str, Any]) -> object:
        if self._closing:
            if self.stop_current_watch is not None:
                # A stop while the informer was still listing: its Watch was created
                # after the stop, so end that Watch and hand it an empty stream, which
                # ends the informer's loop without the library logging an error.
                self.stop_current_watch()
                return _EmptyWatchResponse()
            raise InformerStoppedError("informer is stopping")
        kwargs.setdefault("allow_watch_bookmarks", True)
        self.synced.set()
        resp = self._func(**self._fixed, **kwargs)
        with self._lock:
            if self._shut:
                _shutdown(resp)
            else:
                self._live = resp
        return _WatchResponse(resp, self)

    def _ended(self, resp: Any) -> None:
        with self._lock:
            if self._live is resp:
                self._live = None


def _shutdown(resp: Any) -> None:
    """Unblock a thread reading ``resp`` by shutting its socket down, as ``Watch.stop`` does."""
    conn = getattr(resp, "connection", None)
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _EmptyWatchResponse:
    """A watch response with no events, for a Watch that must end at once."""

    status = 200

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        return iter(())

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class _WatchResponse:
    """A watch's urllib3 response whose stream ends quietly once the adapter is closing."""

    def __init__(self, resp: Any, adapter: ListWatchAdapter) -> None:
        self._resp = resp
        self._adapter = adapter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resp, name)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        try:
            yield from self._resp.stream(*args, **kwargs)
        except Exception:
            if not self._adapter.closing:
                raise
        finally:
            self._adapter._ended(self._resp)


class _LeanCache(ObjectCache):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """The library's cache without ``metadata.managedFields``, which the operator never reads.

    Server-side apply bookkeeping is often the largest part of an object: dropping it
    saved about a third of the cache's memory at 1000 pools.
    """

    def _put(self, obj: Obj) -> None:
        super()._put(_lean(obj))

    def _replace_all(self, objects: Iterable[Obj]) -> None:
        super()._replace_all([_lean(o) for o in objects])


class _IndexedCache(_LeanCache):
    """The lean cache plus one index (a key per object, e.g. ``namespace/pool``).

    The library's cache has no indexers (client-go's ``cache.Indexer``); this adds the one
    the operator needs, kept under the cache's own lock so that a read never sees the
    object store and the index disagree.
    """

    def __init__(self, index: Callable[[Obj], str | None]) -> None:
        super().__init__()
        self._index_of = index
        self._index: dict[str, set[str]] = {}

    def _put(self, obj: Obj) -> None:
        key = self._key_func(obj)
        with self._rlock:
            old = self._objects.get(key)
            if old is not None:
                self._unindex(key, old)
            super()._put(obj)
            self._add_index(key, obj)

    def _remove(self, obj: Obj) -> None:
        key = self._key_func(obj)
        with self._rlock:
            old = self._objects.get(key)
            if old is not None:
                self._unindex(key, old)
            super()._remove(obj)

    def _replace_all(self, objects: Iterable[Obj]) -> None:
        with self._rlock:
            super()._replace_all(objects)
            self._index = {}
            for key, obj in self._objects.items():
                self._add_index(key, obj)

    def _add_index(self, key: str, obj: Obj) -> None:
        value = self._index_of(obj)
        if value is not None:
            self._index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        value = self._index_of(obj)
        keys = self._index.get(value) if value is not None else None
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._index[value]  # type: ignore[arg-type]

    def by_index(self, value: str) -> list[Obj]:
        with self._rlock:
            return [self._objects[key] for key in self._index.get(value, ())]


def pool_index(obj: Mapping[str, Any]) -> str | None:
    """``namespace/pool`` by the pool label: the runner pods of one pool."""
    meta = obj.get("metadata") or {}
    pool = (meta.get("labels") or {}).get(POOL_LABEL)
    return f"{meta.get('namespace') or ''}/{pool}" if pool else None


def _lean(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class StoppableInformer(SharedInformer):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """``SharedInformer`` with a stop that is quiet and can be waited on with a timeout.

    Touches the library's private ``_stop_event``, ``_watch`` and ``_thread``
    (kubernetes is pinned to 37.x) because the order of the steps matters and
    no public method allows it.  The adapter must expect the broken stream
    before ``Watch.stop`` breaks it, and ``Watch`` must be flagged stopped
    before the adapter breaks an in-flight one; otherwise ``Watch`` reconnects
    and the library logs a traceback.
    """

    def __init__(
        self, adapter: ListWatchAdapter, *, index: Callable[[Obj], str | None] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(adapter, **kwargs)
        self._adapter = adapter
        self._cache = _LeanCache() if index is None else _IndexedCache(index)
        adapter.stop_current_watch = self._stop_current_watch

    def _stop_current_watch(self) -> None:
        watch = self._watch
        if watch is not None:
            watch.stop()

    def signal_stop(self) -> None:
        self._stop_event.set()
        self._adapter.mark_closing()
        watch = self._watch
        if watch is not None:
            watch.stop()
        self._adapter.shutdown_watch()

    def join(self, timeout: float | None) -> bool:
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()


def _list_result(body: Mapping[str, Any]) -> _ListResult:
    kind = str(body.get("kind") or "")
    item_kind = kind.removesuffix("List") if kind.endswith("List") else ""
    api_version = body.get("apiVersion")
    items: list[Obj] = list(body.get("items") or [])
    for item in items:
        if api_version:
            item.setdefault("apiVersion", api_version)
        if item_kind:
            item.setdefault("kind", item_kind)
    rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
    return _ListResult(items=items, metadata=_ListMeta(resource_version=rv))


@dataclass
class _Kind:
    """The informers of one kind, keyed by namespace (``None``: all namespaces)."""

    name: str
    informers: dict[str | None, StoppableInformer] = field(default_factory=dict)
    adapters: list[ListWatchAdapter] = field(default_factory=list)

    def informer_for(self, namespace: str) -> StoppableInformer:
        informer = self.informers.get(None) or self.informers.get(namespace)
        if informer is None:
            raise NamespaceNotWatchedError(f"{self.name} in namespace {namespace!r} are not watched")
        return informer

    def get(self, namespace: str, name: str) -> Obj | None:
        obj = self.informer_for(namespace).cache.get_by_key(pool_key(namespace, name))
        return _clone(obj) if obj is not None else None

    def list(self, namespace: str | None, labels: Mapping[str, str] | None = None) -> list[Obj]:
        informers = self.informers.values() if namespace is None else [self.informer_for(namespace)]
        objs = [obj for informer in informers for obj in informer.cache.list()]
        if namespace is not None:  # an all-namespaces informer holds the others too
            objs = [o for o in objs if (o.get("metadata") or {}).get("namespace") == namespace]
        if labels:  # before copying: a namespace may hold many pools' pods
            objs = [o for o in objs if _has_labels(o, labels)]
        return sorted((_clone(o) for o in objs), key=object_key)

    def indexed(self, namespace: str, value: str) -> ObjList:
        """The objects of one index value (``_IndexedCache``), without a scan."""
        cache = self.informer_for(namespace).cache
        return sorted((_clone(o) for o in cache.by_index(value)), key=object_key)


def _clone(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists, immutable scalars).

    Every read of the caches returns a copy; ``copy.deepcopy`` keeps a memo and dispatches
    per type for objects that can only be these three kinds, and costs 1.7 times as much
    on a runner pod (deepcopy was the largest pure-Python entry of the N=100 profile).
    """
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value


def _has_labels(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


class InformerSet:
    """Informers for RunnerPools and their children, feeding one work queue.

    Every event becomes a pool key (``ns/name``) passed to ``enqueue``:
    RunnerPool events enqueue the pool itself; Secret, Deployment, Pod and PDB events
    enqueue their controlling pool (see :func:`owner_key`), and on an update
    that changes the owner, the previous owner too (the informer gives no old
    object, so the last owner seen per object is remembered here).  Events for
    unowned Secrets enqueue the pools in the same namespace whose
    ``pool_secret_refs(pool)`` names them, which is how a rotated credential
    reaches its pools; with no ``pool_secret_refs`` they are ignored.

    Read accessors return deep copies of wire-format dicts, so callers may
    mutate what they get without corrupting the cache.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        enqueue: Enqueue,
        namespaces: Sequence[str] | None = None,
        *,
        resync_period: float = 0,
        secret_field_selector: str | None = DEFAULT_SECRET_FIELD_SELECTOR,
        pool_secret_refs: SecretRefs | None = None,
        on_pod: Callable[[str, str], None] | None = None,
        watch_namespaces: bool = True,
    ) -> None:
        if namespaces is not None:
            namespaces = list(dict.fromkeys(namespaces))
            if not namespaces:
                raise ValueError("namespaces must be None (all) or non-empty")
        self._enqueue = enqueue
        self._pool_secret_refs = pool_secret_refs
        self._on_pod = on_pod
        self._owners_lock = threading.Lock()
        self._owners: dict[tuple[str, str], str] = {}
        self._budget_generations: dict[str, Any] = {}

        kube = Kube(api_client)
        scopes: list[str | None] = list(namespaces) if namespaces is not None else [None]

        self._pools = _Kind("RunnerPools")
        self._secrets = _Kind("Secrets")
        self._deployments = _Kind("Deployments")
        self._pods = _Kind("Pods")
        self._budgets = _Kind("PodDisruptionBudgets")
        self._namespaces = _Kind("Namespaces")
        # (cache, resource, label selector, field selector, handler)
        kinds: list[tuple[_Kind, Resource, str | None, str | None, Handler]] = [
            (
                self._pools,
                RUNNER_POOLS,
                None,
                None,
                self._on_pool,
            ),
            (
                self._secrets,
                SECRETS,
                None,
                secret_field_selector,
                functools.partial(self._on_child, "Secret"),
            ),
            (
                self._deployments,
                DEPLOYMENTS,
                MANAGED_BY_SELECTOR,
                None,
                functools.partial(self._on_child, "Deployment"),
            ),
            (
                self._pods,
                PODS,
                MANAGED_BY_SELECTOR,
                None,
                self._on_pod_event,
            ),
            (
                self._budgets,
                POD_DISRUPTION_BUDGETS,
                MANAGED_BY_SELECTOR,
                None,
                self._on_budget,
            ),
        ]
        for ns in scopes:
            for kind, resource, labels, fields, handler in kinds:
                self._add(
                    kind,
                    namespace=ns,
                    adapter=ListWatchAdapter(kube.lister(resource)),
                    resync_period=resync_period,
                    label_selector=labels,
                    field_selector=fields,
                    handler=handler,
                    index=pool_index if kind is self._pods else None,
                )
        for ns in scopes if watch_namespaces else []:
            self._add(
                self._namespaces,
                namespace=ns,
                adapter=ListWatchAdapter(kube.lister(NAMESPACES)),
                resync_period=resync_period,
                field_selector=None if ns is None else f"metadata.name={ns}",
                handler=self._on_namespace,
                cluster_scoped=True,
            )

    @staticmethod
    def _add(
        kind: _Kind,
        *,
        namespace: str | None,
        adapter: ListWatchAdapter,
        resync_period: float,
        handler: Callable[[str, Obj], None],
        label_selector: str | None = None,
        field_selector: str | None = None,
        index: Callable[[Obj], str | None] | None = None,
        cluster_scoped: bool = False,
    ) -> None:
        informer = StoppableInformer(
            adapter,
            index=index,
            namespace=None if cluster_scoped else namespace,
            resync_period=resync_period,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        for event in (ADDED, MODIFIED, DELETED):
            informer.add_event_handler(event, lambda obj, event=event: handler(event, obj))
        kind.informers[namespace] = informer
        kind.adapters.append(adapter)

    # -- lifecycle ---------------------------------------------------------

    def _all(self) -> list[tuple[StoppableInformer, ListWatchAdapter]]:
        out: list[tuple[StoppableInformer, ListWatchAdapter]] = []
        for kind in (
            self._pools,
            self._secrets,
            self._deployments,
            self._pods,
            self._budgets,
            self._namespaces,
        ):
            out.extend(zip(kind.informers.values(), kind.adapters, strict=True))
        return out

    def start(self) -> None:
        for informer, _ in self._all():
            informer.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop every informer; ``True`` if all their threads ended in time.

        Giving up after ``timeout`` is safe: informer threads are daemons.
        """
        informers = [informer for informer, _ in self._all()]
        for informer in informers:
            informer.signal_stop()
        deadline = time.monotonic() + timeout
        stuck = sum(not informer.join(max(0.0, deadline - time.monotonic())) for informer in informers)
        if stuck:
            logger.warning("%d informer(s) did not stop within %.1fs", stuck, timeout)
        return not stuck

    @property
    def has_synced(self) -> bool:
        return all(adapter.synced.is_set() for _, adapter in self._all())

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until every informer has stored its initial list (like ``WaitForCacheSync``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _, adapter in self._all():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not adapter.synced.wait(remaining):
                return False
        return True

    # -- reads -------------------------------------------------------------

    def get_pool(self, namespace: str, name: str) -> Obj | None:
        return self._pools.get(namespace, name)

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        return self._secrets.get(namespace, name)

    def get_deployment(self, namespace: str, name: str) -> Obj | None:
        return self._deployments.get(namespace, name)

    def list_pools(self, namespace: str | None = None) -> list[Obj]:
        return self._pools.list(namespace)

    def list_secrets(self, namespace: str | None = None) -> list[Obj]:
        return self._secrets.list(namespace)

    def list_deployments(self, namespace: str | None = None) -> list[Obj]:
        return self._deployments.list(namespace)

    def list_pods(self, namespace: str, pool: str) -> list[Obj]:
        """The runner pods of one pool, by their pool label, from the index."""
        return self._pods.indexed(namespace, f"{namespace}/{pool}")

    def get_disruption_budget(self, namespace: str, name: str) -> Obj | None:
        return self._budgets.get(namespace, name)

    def scan_pools(self, namespace: str) -> list[Obj]:
        """The cached pools of one namespace *without copying*: read them, never change them.

        For questions asked of every pool on each reconcile (which pools use this Secret?),
        where deep copies of a namespace with many pools would cost more than the answer.
        """
        objs = self._pools.informer_for(namespace).cache.list()
        return [o for o in objs if (o.get("metadata") or {}).get("namespace") == namespace]

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether the namespace is being deleted (or already gone) as far as the cache knows."""
        if not self._namespaces.informers:  # not watched (namespace-scoped mode): not known
            return False
        found = self._namespaces.informer_for(namespace).cache.get_by_key(namespace)
        if found is None:
            # Not listed yet, or deleted: only "gone" counts, and only after the first list.
            return self.has_synced
        return bool((found.get("metadata") or {}).get("deletionTimestamp"))

    # -- event handlers (run on informer threads) -------------------------

    def _on_pool(self, event: str, obj: Obj) -> None:
        del event  # every kind of change means "look at this pool again"
        self._enqueue(object_key(obj))

    def _on_pod_event(self, event: str, obj: Obj) -> None:
        if self._on_pod is not None:
            pool = pool_index(obj)
            if pool is not None:
                self._on_pod(pool, str((obj.get("metadata") or {}).get("name") or ""))
        self._on_child("Pod", event, obj)

    def _on_namespace(self, event: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if event == DELETED or not meta.get("deletionTimestamp"):
            return
        self._enqueue_namespace(meta.get("name") or "")

    def _enqueue_namespace(self, namespace: str) -> None:
        prefix = f"{namespace}/"
        for key in self._pools.informer_for(namespace).cache.list_keys():
            if key.startswith(prefix):
                self._enqueue(key)

    def _on_budget(self, event: str, obj: Obj) -> None:
        """The namespace's shared busy budget has no owner: a new spec (a hand edit) or its
        deletion brings the namespace's pools back, whose next reconcile repairs it.  Its
        creation and its status (the disruption controller's counts) do not."""
        if owner_key(obj) is not None:  # a per-pool budget of an earlier version
            self._on_child("PodDisruptionBudget", event, obj)
            return
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        generation = meta.get("generation")
        with self._owners_lock:
            before = self._budget_generations.pop(namespace, None)
            if event != DELETED:
                self._budget_generations[namespace] = generation
        if event == DELETED or (before is not None and before != generation):
            self._enqueue_namespace(namespace)

    def _on_child(self, kind: str, event: str, obj: Obj) -> None:
        key = (kind, object_key(obj))
        owner = owner_key(obj)
        with self._owners_lock:
            previous = self._owners.pop(key, None)
            if owner is not None and event != DELETED:
                self._owners[key] = owner
        for pool in dict.fromkeys(k for k in (previous, owner) if k is not None):
            self._enqueue(pool)
        if owner is None and previous is None and kind == "Secret" and self._pool_secret_refs is not None:
            self._enqueue_referencing_pools(obj)

    def _enqueue_referencing_pools(self, secret: Obj) -> None:
        assert self._pool_secret_refs is not None
        meta = secret.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name")
        try:
            pools = self._pools.list(namespace)
        except NamespaceNotWatchedError:
            return
        for pool in pools:
            try:
                refs = set(self._pool_secret_refs(pool))
            except Exception:
                logger.exception("pool_secret_refs failed for %s", object_key(pool))
                continue
            if name in refs:
                self._enqueue(object_key(pool))
