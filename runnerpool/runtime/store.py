"""The store an informer fills: lean, indexed, each object decoded once per resourceVersion.

The library's ``ObjectCache`` keeps what the watch sends and answers by key.  The operator
asks more of it, and this store answers without a scan or a repeated parse:

* **Lean.**  ``metadata.managedFields`` (server-side apply bookkeeping, never read) is
  dropped on the way in: often the largest part of an object, it was about a third of the
  cache's memory at 1000 pools.
* **Indexes** (client-go's ``cache.Indexer``): named functions from an object to the values
  it is found under (``namespace/pool`` for a runner pod, the scope of an autoscaling
  pool); the namespace index is always there, so "the objects of one namespace" is a
  lookup whether the informer watches one namespace or all.  Kept under the store's own
  lock, so a read never sees the objects and an index disagree.
* **Views.**  An optional ``decode`` turns each object into what its readers want (a parsed
  model, say) once per resourceVersion, on the informer's thread; readers share the view,
  which must therefore be immutable.  A relist that brings the same resourceVersion back
  keeps the view.  Indexes are computed from the view (from the object when there is no
  decoder).
* **The previous object.**  The informer hands handlers only the new object; with
  ``keep_previous`` the store remembers what a put or remove replaced until
  :meth:`Store.take_previous` collects it (the informer set does, in the handler that runs
  right after), so an update can be mapped by its old state too (the owner it had).

Writes come only from the informer's thread (``_put``, ``_remove``, ``_replace_all``, as the
library calls them); reads from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.informer.cache import ObjectCache

__all__ = ["NAMESPACE", "Decode", "Index", "Obj", "Store", "clone", "resource_version"]

Obj = dict[str, Any]
#: An object's view for its readers; must not raise (represent a bad object in the view).
Decode = Callable[[Obj], Any]
#: The values an object (its view) is found under in one index.
Index = Callable[[Any], Iterable[str]]

#: The built-in index: the object's namespace ("" for cluster-scoped objects).
NAMESPACE = "namespace"


def _namespace_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion``, "" when the object has none."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _lean(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def clone(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists, immutable scalars).

    ``copy.deepcopy`` keeps a memo and dispatches per type for objects that can only be
    these three kinds, and costs 1.7 times as much on a runner pod (deepcopy was the largest
    pure-Python entry of the N=100 profile).
    """
    if isinstance(value, dict):
        return {key: clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone(item) for item in value]
    return value


class Store(ObjectCache):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """``ObjectCache`` with indexes, decoded views and the previous object (module docstring)."""

    _objects: dict[str, Obj]  # the library's, untyped

    def __init__(
        self,
        *,
        decode: Decode | None = None,
        indexes: Mapping[str, Index] | None = None,
        keep_previous: bool = False,
    ) -> None:
        super().__init__()
        self._decode = decode
        self._index_funcs = dict(indexes or {})
        self._keep_previous = keep_previous
        self._views: dict[str, Any] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {NAMESPACE: {}, **{n: {} for n in self._index_funcs}}
        self._previous: dict[str, Obj | None] = {}

    # -- writes (the informer's thread) ---------------------------------------------------

    def _put(self, obj: Obj) -> None:
        obj = _lean(obj)
        key = self._key_func(obj)
        with self._rlock:
            old = self._objects.get(key)
            view = self._view(obj, old, self._views.get(key))  # first: a decoder that fails changes nothing
            if old is not None:
                self._unindex(key, old)
            if self._keep_previous:
                self._previous[key] = old
            self._objects[key] = obj
            self._views[key] = view
            self._index(key, obj)

    def _remove(self, obj: Obj) -> None:
        key = self._key_func(obj)
        with self._rlock:
            old = self._objects.pop(key, None)
            if old is not None:
                self._unindex(key, old)
            self._views.pop(key, None)
            if self._keep_previous:
                self._previous[key] = old

    def _replace_all(self, objects: Iterable[Obj]) -> None:
        rebuilt = {self._key_func(o): _lean(o) for o in objects}
        with self._rlock:
            old_objects: dict[str, Obj] = self._objects
            old_views = self._views
            self._objects = rebuilt
            self._views = {
                key: self._view(obj, old_objects.get(key), old_views.get(key)) for key, obj in rebuilt.items()
            }
            self._indexes = {name: {} for name in self._indexes}
            for key, obj in rebuilt.items():
                self._index(key, obj)
            if self._keep_previous:
                # The library fires MODIFIED for every key listed again, ADDED for the others.
                self._previous = {key: old_objects[key] for key in rebuilt if key in old_objects}

    def _view(self, obj: Obj, old: Obj | None, old_view: Any) -> Any:
        if self._decode is None:
            return obj
        if old is not None and old_view is not None and resource_version(old) == resource_version(obj):
            return old_view  # a relist brought the same version back: parsed already
        return self._decode(obj)

    def _index(self, key: str, obj: Obj) -> None:
        self._indexes[NAMESPACE].setdefault(_namespace_of(obj), set()).add(key)
        view = self._views[key]
        for name, func in self._index_funcs.items():
            for value in func(view):
                self._indexes[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        self._drop(NAMESPACE, _namespace_of(obj), key)
        view = self._views.get(key)
        for name, func in self._index_funcs.items():
            for value in func(view):
                self._drop(name, value, key)

    def _drop(self, index: str, value: str, key: str) -> None:
        keys = self._indexes[index].get(value)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._indexes[index][value]

    # -- reads (any thread): shared objects, never to be changed ---------------------------

    def __len__(self) -> int:
        with self._rlock:
            return len(self._objects)

    def key_of(self, obj: Obj) -> str:
        return str(self._key_func(obj))

    def take_previous(self, key: str) -> Obj | None:
        """What the latest put or remove of ``key`` replaced (once; ``None`` after that)."""
        with self._rlock:
            return self._previous.pop(key, None)

    def view(self, key: str) -> Any:
        with self._rlock:
            return self._views.get(key)

    def keys_by(self, index: str, value: str) -> list[str]:
        with self._rlock:
            return sorted(self._indexes[index].get(value, ()))

    def by_index(self, index: str, value: str) -> list[Obj]:
        with self._rlock:
            return [self._objects[key] for key in sorted(self._indexes[index].get(value, ()))]

    def views_by(self, index: str, value: str) -> list[Any]:
        with self._rlock:
            return [self._views[key] for key in sorted(self._indexes[index].get(value, ()))]
