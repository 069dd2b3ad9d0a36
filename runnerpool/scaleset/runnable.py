"""The leader's scale-set listeners: one per scale-set pool, started and stopped as pools come,
change and go.

Why its input is a callable: the listeners must follow the pools without this package knowing
the RunnerPool API's fields; the operator's assembly passes ``pools()``, listing ``(pool key,
ScaleSetSettings)`` for every pool that has a scale set (``settings.deleting`` for those being
deleted), read from its cache. ``sync`` makes the running listeners match it:

* a pool listed and not being deleted gets a listener (``make(settings, resume)``), resumed from
  the view of the listener it replaces, else from ``resume(key)`` (the pool's
  ``status.scaleSet``), whichever recorded the later message of the same scale set;
* a listener whose pool is no longer listed, is being deleted or whose settings changed is
  stopped (its session deleted), and replaced in the last case;
* a listener whose task ended unasked (it should not) is started again.

New listeners start ``START_GAP`` apart, so a new leader with many scale-set pools does not
send all their token trades and session opens at once. ``sync`` runs every ``interval``
seconds and at once after ``poke()`` (the main session's pool
watch can poke). ``stop(timeout)`` stops the sync loop and every listener: all are asked first
(each deletes its session at once), then waited for within the one deadline. Leader only:
``runnable()`` is the ``Runnable`` the supervisor starts with leadership and stops with it.

Threads: one for the sync loop; the listeners are tasks on the scale-set poll loop, their
blocking calls on a shared pool of ``CALL_WORKERS`` threads (``listener.py`` says why): no
thread per pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from runnerpool.runtime.runnables import Runnable
from runnerpool.scaleset.clients import ScaleSetClients
from runnerpool.scaleset.listener import (
    DEFAULT_TIMING,
    Holder,
    ScaleSetListener,
    ScaleSetSettings,
    ScaleSetView,
    Timing,
    ViewSink,
    alone,
)

__all__ = ["Listener", "PoolKey", "ScaleSetListeners", "later", "listener_factory"]

log = logging.getLogger(__name__)

#: Sessions deleted at once when all listeners stop (each a DELETE to the Actions service).
STOP_WORKERS = 16

#: Seconds between two listeners' starts. Each start trades a registration token (a REST POST)
#: for an admin token and opens a session: 1,000 pools started at once queued their requests
#: past the transport's deadline, tripped the slow-host gate and backed every listener off
#: (bench/scale_sets.py --scopes 1000: 161 s until all polled). Ten a second keeps a new
#: leader's start within GitHub's secondary limits for POSTs and brings 1,000 pools up in
#: about 100 s, two poll cycles.
START_GAP = 0.1

#: ``(namespace, name)`` of a pool.
PoolKey = tuple[str, str]


class Listener(Protocol):
    """What the runnable drives (``ScaleSetListener``)."""

    @property
    def settings(self) -> ScaleSetSettings: ...
    @property
    def view(self) -> ScaleSetView: ...
    @property
    def alive(self) -> bool: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...


def listener_factory(
    clients: ScaleSetClients,
    sink: ViewSink,
    owner: str,
    timing: Timing = DEFAULT_TIMING,
    holder: Holder = alone,
) -> Callable[[ScaleSetSettings, ScaleSetView | None], Listener]:
    """``make`` for ``ScaleSetListeners``: listeners whose client comes from ``clients``;
    ``holder``: which other pool has a listener's scale set (``alone``: none ever does)."""

    def make(settings: ScaleSetSettings, resume: ScaleSetView | None) -> Listener:
        return ScaleSetListener(
            settings,
            lambda: clients.get(settings.pool),
            sink,
            owner,
            resume=resume,
            timing=timing,
            holder=holder,
        )

    return make


def later(a: ScaleSetView | None, b: ScaleSetView | None) -> ScaleSetView | None:
    """The view to resume from: of two of the same scale set, the one with the later message;
    otherwise the first one known (the listener checks the id against GitHub anyway)."""
    if a is None or b is None:
        return a or b
    if a.scale_set_id == b.scale_set_id and b.last_message_id > a.last_message_id:
        return b
    return a


class ScaleSetListeners:
    """Thread-safe. ``make``: a started-not-yet listener for the settings, resumed from the view."""

    def __init__(
        self,
        pools: Callable[[], Iterable[tuple[PoolKey, ScaleSetSettings]]],
        make: Callable[[ScaleSetSettings, ScaleSetView | None], Listener],
        *,
        resume: Callable[[PoolKey], ScaleSetView | None] = lambda key: None,
        interval: float = 10.0,
        replace_wait: float = 30.0,
        start_gap: float = START_GAP,
    ) -> None:
        self._pools = pools
        #: Seconds between two listeners' starts (``START_GAP``).
        self._start_gap = start_gap
        self._make = make
        self._resume = resume
        self._interval = interval
        #: How long a listener being replaced is waited for (its view is the replacement's start).
        self._replace_wait = replace_wait
        self._lock = threading.Lock()
        self._listeners: dict[PoolKey, Listener] = {}
        #: Syncs begun so far, and the pools ``stop_pool`` stopped, each with the number of the
        #: first sync begun after the stop: a sync begun before may hold a read of ``pools()``
        #: from before the pool was marked deleting, and must not start its listener again.
        self._syncs = 0
        self._stopped: dict[PoolKey, int] = {}
        #: Listeners told to stop that had not ended when last waited for (one may still be in
        #: a call that creates the scale set): ``stop_pool`` waits for them too.
        self._ending: dict[PoolKey, list[Listener]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def runnable(self, name: str = "scale set listeners") -> Runnable:
        return Runnable(name, self.start, self.stop, leader_only=True)

    def listening(self) -> dict[PoolKey, ScaleSetSettings]:
        with self._lock:
            return {key: listener.settings for key, listener in self._listeners.items()}

    def listener(self, key: PoolKey) -> Listener | None:
        with self._lock:
            return self._listeners.get(key)

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stopping.is_set():
                return
            self._thread = threading.Thread(target=self._loop, name="scale-set-listeners", daemon=True)
            self._thread.start()

    def poke(self) -> None:
        """Sync soon (a pool was added, changed or deleted)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("the scale set listeners could not be synced; again in %g s", self._interval)
            self._wake.wait(self._interval)
            self._wake.clear()

    def sync(self) -> None:
        """Make the running listeners match ``pools()``; a pool ``stop_pool`` stopped gets none
        until a sync begun after the stop sees it gone or back (made again under its name)."""
        with self._lock:
            this = self._syncs
            self._syncs += 1
        pools = list(self._pools())
        wanted = {key: settings for key, settings in pools if not settings.deleting}
        with self._lock:
            if self._stopping.is_set():
                return
            self._forget_stops(this, {key for key, settings in pools if settings.deleting})
            self._forget_ended()
            gone = [
                key
                for key, listener in self._listeners.items()
                if wanted.get(key) != listener.settings or not listener.alive
            ]
            stopped = [(key, self._listeners.pop(key)) for key in gone]
        for key, listener in stopped:
            if listener.alive:
                log.info("stopping the scale set listener of %s/%s", *key)
            listener.stop()
        previous = {}
        for key, listener in stopped:
            if not listener.wait(self._replace_wait):
                log.warning("the scale set listener of %s/%s did not end in time; replacing it", *key)
                with self._lock:
                    self._ending.setdefault(key, []).append(listener)
            previous[key] = listener.view
        started = 0
        for key, settings in wanted.items():
            with self._lock:
                if self._stopping.is_set() or key in self._listeners or key in self._stopped:
                    continue
            if started and self._stopping.wait(self._start_gap):
                return  # stopping: no more starts
            started += 1
            resume = later(previous.get(key), self._resume(key))
            listener = self._make(settings, resume)
            with self._lock:
                if self._stopping.is_set():
                    return
                if key in self._stopped:  # stopped meanwhile (its pool is being deleted)
                    continue
                self._listeners[key] = listener
            log.info("starting the scale set listener of %s/%s", *key)
            listener.start()

    def _forget_stops(self, this: int, deleting: set[PoolKey]) -> None:
        """Under the lock: the stops sync number ``this`` read ``pools()`` after, of pools no
        longer being deleted (gone, or made again under the same name), are over."""
        for key, after in list(self._stopped.items()):
            if after <= this and key not in deleting:
                del self._stopped[key]

    def _forget_ended(self) -> None:
        """Under the lock: the stragglers that have ended since."""
        for key, listeners in list(self._ending.items()):
            alive = [listener for listener in listeners if listener.alive]
            if alive:
                self._ending[key] = alive
            else:
                del self._ending[key]

    def stop_pool(self, key: PoolKey, timeout: float) -> bool:
        """Stop one pool's listener now (its pool is being deleted), and start none for it
        until its pool is gone or made again (``sync``); True once it has ended, and every
        listener of the pool told to stop before with it.

        False keeps them remembered, and the next call waits for them again: the first call
        forgot the listener, and a second answered True while it was still in a call that
        could create the scale set after the finalizer had looked for it."""
        with self._lock:
            self._stopped[key] = self._syncs
            current = self._listeners.pop(key, None)
            listeners = [*self._ending.pop(key, []), *([current] if current is not None else [])]
        deadline = time.monotonic() + timeout
        for listener in listeners:
            listener.stop()
        left = [each for each in listeners if not each.wait(max(0.0, deadline - time.monotonic()))]
        if left:
            with self._lock:
                self._ending.setdefault(key, []).extend(left)
        return not left

    @staticmethod
    def _ask_all(listeners: list[Listener], deadline: float) -> None:
        """``stop()`` each (one session DELETE each), a few at a time, until the deadline."""
        if not listeners:
            return
        asking = ThreadPoolExecutor(min(STOP_WORKERS, len(listeners)), thread_name_prefix="scale-set-stop")
        try:
            futures.wait(
                [asking.submit(listener.stop) for listener in listeners],
                timeout=max(0.0, deadline - time.monotonic()),
            )
        finally:
            asking.shutdown(wait=False, cancel_futures=True)

    def stop(self, timeout: float) -> bool:
        """Stop the loop and every listener: all asked at once, then waited for until the
        deadline; True when all ended in time (a straggler is a task, asked to stop, whose
        session's DELETE was sent)."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        with self._lock:
            listeners = list(self._listeners.values())
            self._listeners.clear()
            thread = self._thread
        self._ask_all(listeners, deadline)
        ended = True
        for listener in listeners:
            ended = listener.wait(max(0.0, deadline - time.monotonic())) and ended
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        return ended
