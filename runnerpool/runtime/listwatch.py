"""The kubernetes client's ``SharedInformer``, made to work for the operator.

The library's informer lists, then watches from the list's resourceVersion, relists on 410
Gone and runs one daemon thread per informer.  What it does not do, and what this module
adds:

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
  kinds and custom resources, without the cost of building generated model objects
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
  shut down too, the torn-down stream ends quietly, and the informer's
  :meth:`~StoppableInformer.signal_stop` and :meth:`~StoppableInformer.join` let a
  caller stop many informers at once and wait with a deadline.
* **A better cache.**  :class:`StoppableInformer` takes the store it fills
  (``runnerpool.runtime.store.Store``: lean, indexed, decoded once per resourceVersion).
* **One JSON decode per event.**  The library's ``Watch.unmarshal_event`` parses each event
  line, then, for any return type, serialises the object again and has the API client parse
  that copy (``json.loads`` → ``json.dumps`` → ``json.loads``), only to hand back the same
  dict.  :class:`SingleDecodeWatch` parses once and tracks the resourceVersion itself; the
  informer gets it in place of the library's ``Watch`` (the ``_watch`` property below).
  Measured in ``bench/watch_decode.py``.
* **A time bound and a backoff on every watch**, as client-go's reflector has.  The
  operator's informers resync never, so the library sends no ``timeoutSeconds``, and the
  watch had no read timeout: a connection whose peer vanished without a FIN (an API server
  that died, a load balancer that dropped the flow) blocked its informer for good, that cache
  frozen while the Lease, on connections with timeouts, kept being renewed.  Each watch now
  asks the server to end it after a random 5 to 10 minutes and gives up reading a little
  after that.  And a watch the server refuses (503 in a rolling restart, 429, 403 after a
  Role went) was opened again at once, thousands of times a second: the next one now waits
  0.8 s, doubling to 30 s, until a watch delivers something again.
"""

# No ``from __future__ import annotations`` here: ``Watch`` inspects the
# adapter's return annotation at run time and needs the real ``object`` class,
# not the string "object".
import contextlib
import json
import logging
import random
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.informer import SharedInformer
from kubernetes.watch import Watch

from runnerpool.api_errors import one_line_errors_from
from runnerpool.runtime.store import Obj, Store

__all__ = [
    "WATCH_BACKOFF_CAP",
    "WATCH_SECONDS",
    "InformerStoppedError",
    "ListWatchAdapter",
    "SingleDecodeWatch",
    "StoppableInformer",
    "watch_backoff",
]

#: The server ends each watch after a random time in this range (client-go's 5 to 10 minutes):
#: spread out, the reconnects of many informers do not come at once.
WATCH_SECONDS = (300, 600)
#: How much longer than that the client waits for the next byte before it takes the
#: connection for dead (bookmarks and the server's own end come well within it).
WATCH_READ_MARGIN = 30.0
WATCH_CONNECT_TIMEOUT = 10.0
#: A failed watch's next attempt waits 0.8 s, doubling to this (client-go's reflector).
WATCH_BACKOFF_CAP = 30.0


def watch_backoff(failures: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before the next watch after ``failures`` in a row that delivered nothing:
    0 after none, else 0.8 s doubling to :data:`WATCH_BACKOFF_CAP`, with half of it jitter."""
    if failures <= 0:
        return 0.0
    step = min(0.8 * float(2 ** min(failures - 1, 16)), WATCH_BACKOFF_CAP)
    return step / 2 + step / 2 * rng()


# The informer logs "Error during initial list; retrying" (and its watch and handler errors)
# with a traceback and, for an API error, its HTTP headers and body, every 5 s while it
# fails: one line each instead, the traceback at DEBUG (runnerpool.api_errors).
one_line_errors_from("kubernetes.informer.informer", trace_to=logging.getLogger(__name__))


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
        #: Watches in a row that failed or ended without a byte (``watch_backoff``).
        self.failures = 0
        self._closed = threading.Event()
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
        self._closed.set()

    def shutdown_watch(self) -> None:
        """Shut down the open watch, or the one still in flight when it arrives.

        ``Watch.stop`` can only shut down a response it has already been
        handed.  Call after ``Watch.stop`` so the stream's end is not taken for
        a dropped connection and retried.
        """
        with self._lock:
            self._closing = self._shut = True
            live, self._live = self._live, None
        self._closed.set()
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
        self._closed.wait(watch_backoff(self.failures))
        if self._closing:
            if self.stop_current_watch is not None:
                # A stop while the informer was still listing: its Watch was created
                # after the stop, so end that Watch and hand it an empty stream, which
                # ends the informer's loop without the library logging an error.
                self.stop_current_watch()
                return _EmptyWatchResponse()
            raise InformerStoppedError("informer is stopping")
        kwargs.setdefault("allow_watch_bookmarks", True)
        seconds = kwargs.setdefault("timeout_seconds", random.randint(*WATCH_SECONDS))
        kwargs.setdefault("_request_timeout", (WATCH_CONNECT_TIMEOUT, seconds + WATCH_READ_MARGIN))
        self.synced.set()
        try:
            resp = self._func(**self._fixed, **kwargs)
        except Exception:
            self.failures += 1
            raise
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
        delivered = False
        try:
            for chunk in self._resp.stream(*args, **kwargs):
                if not delivered:
                    delivered, self._adapter.failures = True, 0
                yield chunk
        except Exception:
            if not self._adapter.closing:
                raise
        finally:
            if not delivered:
                self._adapter.failures += 1
            self._adapter._ended(self._resp)


class SingleDecodeWatch(Watch):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """``Watch`` that parses each event line once and hands the object over as the dict it is.

    Keeps what the informer reads of the library's version: ``object`` and ``raw_object`` (the
    same dict), ``resource_version`` advanced by every event but errors (bookmarks included),
    and ``None`` for a blank or unparsable line.
    """

    def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
        if not data or data.isspace():
            return None
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            return None
        obj = event.get("object")
        event["raw_object"] = obj
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = version
        return dict(event)


class StoppableInformer(SharedInformer):  # type: ignore[misc]  # kubernetes is untyped (pyproject)
    """``SharedInformer`` with a stop that is quiet and can be waited on with a timeout.

    Touches the library's private ``_stop_event``, ``_watch`` and ``_thread``
    (kubernetes is pinned to 37.x) because the order of the steps matters and
    no public method allows it.  The adapter must expect the broken stream
    before ``Watch.stop`` breaks it, and ``Watch`` must be flagged stopped
    before the adapter breaks an in-flight one; otherwise ``Watch`` reconnects
    and the library logs a traceback.
    """

    def __init__(self, adapter: ListWatchAdapter, *, store: Store | None = None, **kwargs: Any) -> None:
        super().__init__(adapter, **kwargs)
        self._adapter = adapter
        self._cache = store if store is not None else Store()
        adapter.stop_current_watch = self._stop_current_watch

    @property
    def adapter(self) -> ListWatchAdapter:
        return self._adapter

    @property
    def _watch(self) -> Watch | None:
        return self.__dict__.get("_single_decode_watch")

    @_watch.setter
    def _watch(self, watch: Watch | None) -> None:
        """The library's loop makes a plain ``Watch()`` per connection: use ours instead."""
        if watch is not None and type(watch) is Watch:
            watch = SingleDecodeWatch()
        self.__dict__["_single_decode_watch"] = watch

    @property
    def store(self) -> Store:
        return self._cache

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
