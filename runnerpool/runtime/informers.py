"""Informers built from a declared table of watches, feeding one work queue.

A controller declares what it watches as a list of :class:`Watch` entries (as
controller-runtime's builder does with ``For``/``Owns``/``Watches``): the resource, the
selectors, the store's decoder and indexes, and the function that maps an event to the
work-queue keys it concerns.  :class:`InformerSet` makes one informer per entry and per
watched namespace (one for all namespaces when none are named), fills one
:class:`~runnerpool.runtime.store.Store` per informer and answers reads by entry name.  It
knows nothing of the objects it caches.

The library workarounds (custom objects, plain dicts, bookmarks, a sync signal, a stop
that works) are in :mod:`runnerpool.runtime.listwatch`; the store in
:mod:`runnerpool.runtime.store`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.informer import ADDED, DELETED, MODIFIED
from prometheus_client import Gauge

from runnerpool.domain import pool_key
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.runtime.listwatch import InformerStoppedError, ListWatchAdapter, StoppableInformer
from runnerpool.runtime.store import NAMESPACE, Decode, Index, Obj, Store, clone

__all__ = [
    "Event",
    "InformerSet",
    "InformerStoppedError",
    "ListWatchAdapter",
    "NamespaceNotWatchedError",
    "StoppableInformer",
    "Watch",
    "informer_count",
    "object_key",
]

logger = logging.getLogger(__name__)

Enqueue = Callable[[str], None]

#: Read at scrape time from the latest informer set of the process (the operator has one): what
#: its memory holds, and the proof that a cache selected by label holds nothing else.
CACHED_OBJECTS = Gauge(
    "runnerpool_cache_objects",
    "Objects the operator's informer caches hold, by watch (Secrets: its own; CredentialSecrets: "
    "those pools name; RunnerPools, Pods, ...).",
    ["watch"],
)


class NamespaceNotWatchedError(LookupError):
    """A read for a namespace no informer covers: a configuration bug, not "absent"."""


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return pool_key(namespace, name) if namespace else name


@dataclass(frozen=True)
class Event:
    """One change the informer saw: ``old`` is what the store held before (``None``: new)."""

    type: str  # ADDED, MODIFIED or DELETED
    obj: Obj
    old: Obj | None


#: Event -> the work-queue keys it concerns; the set is passed for lookups (``keys_by``).
MapToKeys = Callable[[Event, "InformerSet"], Iterable[str]]


@dataclass(frozen=True)
class Watch:
    """One entry of a controller's table of watches.

    ``name`` is how reads ask for the entry's objects.  For a cluster-scoped resource,
    ``field_selector_in`` picks, for one watched namespace, the objects that concern it
    (for Namespaces: the namespace itself, by name; without it each watched namespace's
    informer holds every object); with all namespaces watched, one informer sees every
    object.  ``observe`` sees every event before the mapping.  ``cluster_scoped`` entries
    are the ones an operator that may read only its own namespaces leaves out.

    ``per_namespace``: a namespaced kind the operator may list only in some namespaces, which
    it learns while it runs (Secrets: only where the platform team enabled it,
    ``runnerpool.namespace_access``).  In a set made with ``defer_per_namespace`` (the
    operator in cluster mode) such an entry starts with no informer;
    :meth:`InformerSet.watch_namespace` starts one per namespace and
    :meth:`InformerSet.unwatch_namespace` stops it, and a read of a namespace without one finds
    nothing.  Otherwise (``--namespaced``, whose Roles grant everything in each watched
    namespace; an admin's in-process tests) it is watched from the start, as every other entry.
    """

    name: str
    resource: Resource
    map_to_keys: MapToKeys
    label_selector: str | None = None
    field_selector: str | None = None
    field_selector_in: Callable[[str], str] | None = None
    decode: Decode | None = None
    indexes: Mapping[str, Index] = field(default_factory=dict)
    observe: Callable[[Event], None] | None = None
    per_namespace: bool = False

    @property
    def cluster_scoped(self) -> bool:
        return not self.resource.namespaced


def _scopes(namespaces: Sequence[str] | None) -> list[str | None]:
    if namespaces is None:
        return [None]
    unique: list[str | None] = list(dict.fromkeys(namespaces))
    if not unique:
        raise ValueError("namespaces must be None (all) or non-empty")
    return unique


def _selected(watches: Iterable[Watch], cluster_scoped: bool) -> list[Watch]:
    return [w for w in watches if cluster_scoped or not w.cluster_scoped]


def informer_count(
    watches: Iterable[Watch], namespaces: Sequence[str] | None, *, cluster_scoped: bool = True
) -> int:
    """How many informers (each holding one watch connection) the table makes."""
    return len(_selected(watches, cluster_scoped)) * len(_scopes(namespaces))


@dataclass
class _Entry:
    """The informers of one watch, keyed by namespace (``None``: all namespaces)."""

    watch: Watch
    informers: dict[str | None, StoppableInformer] = field(default_factory=dict)
    #: Informers come and go per namespace (``Watch.per_namespace`` in a cluster-wide set).
    deferred: bool = False

    def informer_for(self, namespace: str) -> StoppableInformer | None:
        """``None``: a deferred entry not (or no longer) watching ``namespace``."""
        informer = self.informers.get(None) or self.informers.get(namespace)
        if informer is None and not self.deferred:
            raise NamespaceNotWatchedError(f"{self.watch.name} in namespace {namespace!r} are not watched")
        return informer

    def stores(self, namespace: str | None) -> list[Store]:
        if namespace is None:
            return [informer.store for informer in list(self.informers.values())]
        informer = self.informer_for(namespace)
        return [] if informer is None else [informer.store]


class InformerSet:
    """One informer per table entry and watched namespace; every event becomes work-queue keys.

    Reads by entry name: ``get``/``objects``/``by_index`` return deep copies of wire-format
    dicts, so callers may change what they get without corrupting the cache; ``view`` and
    ``views`` return the store's shared views (decoded once per resourceVersion), which
    nobody may change.  ``cluster_scoped=False`` leaves out the table's cluster-scoped
    entries (for an operator allowed to read only its namespaces).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        enqueue: Enqueue,
        watches: Iterable[Watch],
        namespaces: Sequence[str] | None = None,
        *,
        resync_period: float = 0,
        cluster_scoped: bool = True,
        defer_per_namespace: bool = False,
    ) -> None:
        self._enqueue = enqueue
        kube = Kube(api_client)
        self._kube, self._resync_period = kube, resync_period
        self._namespaces = None if namespaces is None else frozenset(namespaces)
        #: Guards the deferred entries' informers, which workers start and stop while others read.
        self._lock = threading.Lock()
        self._started = self._stopped = False
        self._entries: dict[str, _Entry] = {}
        for watch in _selected(watches, cluster_scoped):
            deferred = watch.per_namespace and defer_per_namespace
            entry = self._entries.setdefault(watch.name, _Entry(watch, deferred=deferred))
            if deferred:
                continue
            for namespace in _scopes(namespaces):
                entry.informers[namespace] = self._informer(kube, watch, namespace, resync_period)
        for name in self._entries:
            CACHED_OBJECTS.labels(name).set_function(self._counter(name))

    def _informer(
        self, kube: Kube, watch: Watch, namespace: str | None, resync_period: float
    ) -> StoppableInformer:
        fields = watch.field_selector
        if watch.cluster_scoped and namespace is not None and watch.field_selector_in is not None:
            fields = watch.field_selector_in(namespace)
        informer = StoppableInformer(
            ListWatchAdapter(kube.lister(watch.resource)),
            store=Store(decode=watch.decode, indexes=watch.indexes, keep_previous=True),
            namespace=None if watch.cluster_scoped else namespace,
            resync_period=resync_period,
            label_selector=watch.label_selector,
            field_selector=fields,
        )
        for kind in (ADDED, MODIFIED, DELETED):
            informer.add_event_handler(
                kind, lambda obj, kind=kind: self._dispatch(watch, informer.store, kind, obj)
            )
        return informer

    def _dispatch(self, watch: Watch, store: Store, kind: str, obj: Obj) -> None:
        """On the informer's thread, right after the store took the change."""
        old = store.take_previous(store.key_of(obj))
        if kind == DELETED and old is None:
            old = obj  # a relist's delete: the library hands over the cached object itself
        event = Event(kind, obj, old)
        if watch.observe is not None:
            watch.observe(event)
        for key in dict.fromkeys(watch.map_to_keys(event, self)):
            self._enqueue(key)

    # -- lifecycle ---------------------------------------------------------

    def _all(self, *, deferred: bool = True) -> list[StoppableInformer]:
        """Every informer; ``deferred=False``: those the set starts with (whose sync is its own)."""
        with self._lock:
            return [
                informer
                for entry in self._entries.values()
                if deferred or not entry.deferred
                for informer in entry.informers.values()
            ]

    @property
    def informers(self) -> int:
        return len(self._all())

    def start(self) -> None:
        with self._lock:
            self._started = True
        for informer in self._all():
            informer.start()

    def watch_namespace(self, namespace: str, timeout: float) -> bool:
        """Start the deferred entries' informers for ``namespace`` (if not running yet) and wait
        up to ``timeout`` seconds for their first list; ``True`` once all have it.

        Before :meth:`start` they only wait to be started with the rest. A namespace the set
        does not watch (``namespaces`` given without it) has nothing to start.
        """
        if self._namespaces is not None and namespace not in self._namespaces:
            return True
        with self._lock:
            mine: list[StoppableInformer] = []
            for entry in self._entries.values():
                if not entry.deferred:
                    continue
                informer = entry.informers.get(namespace)
                if informer is None:
                    informer = self._informer(self._kube, entry.watch, namespace, self._resync_period)
                    entry.informers[namespace] = informer
                    if self._started and not self._stopped:
                        informer.start()
                mine.append(informer)
        deadline = time.monotonic() + timeout
        return all(informer.adapter.synced.wait(max(0.0, deadline - time.monotonic())) for informer in mine)

    def unwatch_namespace(self, namespace: str) -> bool:
        """Stop the deferred entries' informers for ``namespace``: their objects leave the cache
        (without events: nothing the operator does follows from "no longer visible"). ``True``
        if there were any."""
        with self._lock:
            gone = [
                entry.informers.pop(namespace)
                for entry in self._entries.values()
                if entry.deferred and namespace in entry.informers
            ]
        for informer in gone:
            informer.signal_stop()
        return bool(gone)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop every informer; ``True`` if all their threads ended in time.

        Giving up after ``timeout`` is safe: informer threads are daemons.
        """
        with self._lock:
            self._stopped = True
        informers = self._all()
        for informer in informers:
            informer.signal_stop()
        deadline = time.monotonic() + timeout
        stuck = sum(not informer.join(max(0.0, deadline - time.monotonic())) for informer in informers)
        if stuck:
            logger.warning("%d informer(s) did not stop within %.1fs", stuck, timeout)
        return not stuck

    @property
    def has_synced(self) -> bool:
        """Every informer the set started with has its first list (a deferred one's is
        :meth:`watch_namespace`'s to wait for)."""
        return all(informer.adapter.synced.is_set() for informer in self._all(deferred=False))

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until every informer the set started with has stored its initial list (like
        ``WaitForCacheSync``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self._all(deferred=False):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.adapter.synced.wait(remaining):
                return False
        return True

    # -- reads -------------------------------------------------------------

    def informer(self, watch: str, namespace: str) -> StoppableInformer:
        """The informer of ``watch`` that covers ``namespace``."""
        informer = self._entries[watch].informer_for(namespace)
        if informer is None:
            raise NamespaceNotWatchedError(f"{watch} in namespace {namespace!r} are not watched (yet)")
        return informer

    def listed_by_index(self, watch: str, namespace: str, index: str, value: str) -> list[Obj] | None:
        """As :meth:`shared_by_index` for one namespace; ``None`` where a deferred entry holds
        no list of it (no informer there, or not listed yet). One lookup of the informer: a
        stop between a check and the read cannot answer "none"."""
        entry = self._entries[watch]
        informer = entry.informer_for(namespace)
        if informer is None or (entry.deferred and not informer.adapter.synced.is_set()):
            return None
        return sorted(informer.store.by_index(index, value), key=object_key)

    def _lookup(self, watch: str, namespace: str, name: str) -> tuple[Store | None, str]:
        """The store that holds ``watch``'s objects of ``namespace`` (``None``: a deferred entry
        not watching it), and ``name``'s key in it (a cluster-scoped object's key is its name)."""
        entry = self._entries[watch]
        key = name if entry.watch.cluster_scoped else pool_key(namespace, name)
        informer = entry.informer_for(namespace)
        return (None if informer is None else informer.store), key

    def get(self, watch: str, namespace: str, name: str) -> Obj | None:
        obj = self.peek(watch, namespace, name)
        return clone(obj) if obj is not None else None

    def peek(self, watch: str, namespace: str, name: str) -> Obj | None:
        """The cached object itself, not a copy: read it, never change it."""
        store, key = self._lookup(watch, namespace, name)
        obj: Obj | None = None if store is None else store.get_by_key(key)
        return obj

    def objects(self, watch: str, namespace: str | None = None) -> list[Obj]:
        """Copies of the objects of one namespace (``None``: of all), by ``namespace/name``."""
        if namespace is not None:
            return self.by_index(watch, namespace, NAMESPACE, namespace)
        objs = [obj for store in self._entries[watch].stores(None) for obj in store.list()]
        return sorted((clone(obj) for obj in objs), key=object_key)

    def by_index(self, watch: str, namespace: str | None, index: str, value: str) -> list[Obj]:
        """Copies of the objects found under ``value`` in ``index``, without a scan."""
        stores = self._entries[watch].stores(namespace)
        return sorted((clone(o) for s in stores for o in s.by_index(index, value)), key=object_key)

    def shared_by_index(self, watch: str, namespace: str | None, index: str, value: str) -> list[Obj]:
        """The cached objects themselves under ``value`` in ``index``: read them, never change them.

        For readers on the hot path that only read (a pool's pods, read by every pass and every
        runner-manager round): the copies of ``by_index`` were a tenth of the operator's CPU.
        """
        stores = self._entries[watch].stores(namespace)
        return sorted((o for s in stores for o in s.by_index(index, value)), key=object_key)

    def view(self, watch: str, namespace: str, name: str) -> Any:
        """The shared view of one object (``None``: not cached); never change it."""
        store, key = self._lookup(watch, namespace, name)
        return None if store is None else store.view(key)

    def views(self, watch: str, namespace: str | None, index: str, value: str) -> list[Any]:
        """The shared views found under ``value`` in ``index`` (``namespace`` ``None``: in all)."""
        return [view for s in self._entries[watch].stores(namespace) for view in s.views_by(index, value)]

    def keys_by(self, watch: str, namespace: str | None, index: str, value: str) -> list[str]:
        return [key for s in self._entries[watch].stores(namespace) for key in s.keys_by(index, value)]

    def _counter(self, watch: str) -> Callable[[], float]:
        return lambda: float(self.count(watch))

    def count(self, watch: str) -> int:
        """How many objects ``watch``'s informers hold, all namespaces together."""
        return sum(len(store) for store in self._entries[watch].stores(None))

    def watches(self, watch: str) -> bool:
        """Whether the table made informers for ``watch`` (``cluster_scoped`` may leave some out)."""
        return watch in self._entries
