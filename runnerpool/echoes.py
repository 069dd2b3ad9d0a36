"""The watch events of the reconciler's own writes to a pool, known so that they wake no pass.

Every status, finalizer or annotation write the reconciler makes to a RunnerPool comes back
as a MODIFIED event, and the event enqueued the pool again: a pass that changed nothing
(27 % of all passes while 300 pools converged, one after every status write). The pass that
wrote already acted on everything the written object holds, so its echo is news to nobody.
controller-runtime users filter such events with ``GenerationChangedPredicate``; the pool's
status is also written by others (``status.demand`` by ``runnerpool.demand.writer``,
``status.scaleSet`` by the scale-set listener) and their writes must wake the reconciler,
so a filter by generation would lose them. This one drops exactly the reconciler's echoes.

An answer counts as an echo only when it is the object the pass had (``base``) with the
pass's own patch applied (RFC 7386 merge patch) and nothing else: a user's edit or another
writer's change that landed between the pass's read and its write makes the answer differ,
and then its event wakes the pool as before. That also holds when a watch is re-listed and
the intermediate change never arrives as an event of its own.

Echoes are matched by resourceVersion, and only for a MODIFIED event whose object changed
(a periodic resync repeats the stored object with the same resourceVersion and still wakes
the pool). Kept in memory; a few resourceVersions per pool; forgotten with the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.informer import MODIFIED

from runnerpool.domain import pool_key
from runnerpool.runtime.informers import Event, object_key
from runnerpool.runtime.store import resource_version

__all__ = ["Echoes", "apply_merge_patch", "echo_version"]

#: resourceVersions remembered per pool: a pass writes its pool at most three times.
KEPT_PER_POOL = 4
#: What the API server changes on every write, whatever the patch: not part of the comparison.
_BOOKKEEPING = ("resourceVersion", "managedFields")


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (neither is changed). The other direction, the
    patch from one status to the next, is ``runnerpool.status.merge_patch``."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge_patch(out.get(key), value)
    return out


def _without_bookkeeping(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _BOOKKEEPING}
    return {**obj, "metadata": meta}


def _version(obj: Mapping[str, Any]) -> str | None:
    return resource_version(obj) or None


def echo_version(
    base: Mapping[str, Any], patch: Mapping[str, Any], answer: Mapping[str, Any] | None
) -> str | None:
    """The resourceVersion of ``answer`` if it is ``base`` with ``patch`` applied and nothing
    else (then its event is an echo); ``None`` otherwise, or when the write failed."""
    if answer is None or _without_bookkeeping(apply_merge_patch(base, patch)) != _without_bookkeeping(answer):
        return None
    return _version(answer)


class Echoes:
    """The resourceVersions the reconciler's own pool writes produced, per pool key.

    While a write is in flight (:meth:`begin` to :meth:`end`) its pool's events are held: the
    watch may deliver the write's event before its answer says whose it is. :meth:`end`
    then enqueues the pool (``enqueue``) for every held event that was not the write's own.
    Without ``enqueue`` nothing is held (such an event wakes the pool, one pass too many).
    """

    def __init__(self, enqueue: Callable[[str], None] | None = None) -> None:
        self._enqueue = enqueue
        self._lock = threading.Lock()
        self._versions: dict[str, tuple[str, ...]] = {}
        self._held: dict[str, list[str]] = {}

    def begin(self, key: str) -> None:
        """A write to the pool ``key`` is about to go out (one at a time per pool: the
        work queue never hands a key to two workers)."""
        if self._enqueue is not None:
            with self._lock:
                self._held.setdefault(key, [])

    def end(
        self, key: str, base: Mapping[str, Any], patch: Mapping[str, Any], answer: Mapping[str, Any] | None
    ) -> None:
        """The write is answered (``answer``; ``None``: it failed, or its event is to wake the
        pool anyway). Always releases what :meth:`begin` held, whatever the answer looks like."""
        try:
            version = echo_version(base, patch, answer)
        except (AttributeError, TypeError):  # not an object's JSON: no echo, and nothing stays held
            version = None
        with self._lock:
            held = self._held.pop(key, [])
            if version is not None:
                self._versions[key] = (*self._versions.get(key, ())[-(KEPT_PER_POOL - 1) :], version)
        if self._enqueue is not None and any(seen != version for seen in held):
            self._enqueue(key)

    def echo(self, event: Event) -> bool:
        """Whether the event only shows one of the reconciler's own writes (or is held until
        the write in flight is answered)."""
        if event.type != MODIFIED or event.old is None:
            return False
        version = _version(event.obj)
        if version is None or version == _version(event.old):
            return False
        key = object_key(event.obj)
        with self._lock:
            if version in self._versions.get(key, ()):
                return True
            held = self._held.get(key)
            if held is not None:
                held.append(version)
                return True
        return False

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._versions.pop(pool_key(namespace, name), None)
