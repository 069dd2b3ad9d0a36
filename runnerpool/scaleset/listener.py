"""One scale-set pool's listener: its scale set kept, its message session held, its demand
written to the pool's status.

Why a listener per pool: a scale-set pool's demand is what GitHub says on the scale set's
message session (``statistics.totalAssignedJobs``), and only the holder of that one session
hears it. The leader holds one session per scale-set pool; ``runnerpool.scaleset.runnable``
starts and stops the listeners.

**One asyncio task per pool, on the long poll's event loop.** Each listener is a coroutine
that spends its life awaiting the service's long poll (about 50 s per empty answer), run as a
task on the one loop of ``runnerpool.scaleset.poller`` (aiohttp); its blocking calls (the
service's REST calls through ``requests``, the status writes through the sink, the client
factory) go to one shared pool of ``CALL_WORKERS`` threads (``scale-set-calls``), and its waits
are awaited on the loop. An empty poll's turnover (202, poll again) never leaves the loop.
Why: issue 34's target is 1,000 idle sessions at 2 % of one core or less (``bench.scale_sets``,
bench/README.md). One thread per pool with every call through ``requests``: 2.8-3.3 ms of CPU
per turnover, 5.6-6.5 % at the steady 20 turnovers a second. The threads with only the poll on
the loop: 1.6-2.1 ms, 3.2-4.2 %, most of it the two GIL handovers per turnover between the
loop's thread and a listener thread. An all-asyncio poller: about 0.5 ms. With the script on
the loop (this module), five runs: 1.17-1.40 ms per turnover, 2.3-2.8 % of a core; with the
poll's answer a small ``PollAnswer`` (not a ``requests.Response``), two runs: 1.09 / 1.26 ms,
2.2 / 2.5 % (the start of that change measured 1.26 ms in the same hour; still 1.1-1.3x the
target, bench/README.md), RSS +41 MiB instead of +81, 12-13 threads instead of 1,004.

The script (after actions/scaleset ``listener/listener.go`` and ARC's ``cmd/ghalistener``; facts
only, no code copied):

1. **Ensure the scale set**, unless another pool has it (``holder``: the operator's assembly
   says which of several live pools naming one scale set may; the others make no call and show
   ``ScaleSetHeldByAnotherPool``, asking again every ``conflict_wait``, and hold no scale set
   id, so none of their pods gets a JIT config): the runner group by name
   (``spec.runnerGroup``, else the default group), the scale set by name in it, created when
   absent (labels: its name and the pool's extra labels; runners ephemeral, ``disableUpdate``),
   updated when its labels drifted. Its id is published at once. A scale set whose id differs
   from the one the pool's status recorded (deleted and created again) starts afresh: its jobs
   and runners are its own.
2. **Open the message session** as ``owner`` (the operator's identity). Every session starts
   at message 0, as upstream's listener starts each at ``lastMessageID`` 0: message ids are
   the queue's, not the pool's, and an id carried over from an old session (the status's
   ``lastMessageId`` after a restart or a leader change) would have the new session's messages
   acknowledged unread. The messages the last leader recorded but did not acknowledge come
   again and are handled again, which is harmless: the statistics are absolute, acquiring a
   job again acquires nothing, and the busy runners are a set.
3. **Long poll**: for each message, acquire the jobs its ``JobAvailable`` entries offer (as the
   listener of actions/scaleset does; a failed acquire is logged and the message handled all the
   same, ``_acquire`` says why), compute the new view (``statistics.totalAssignedJobs`` and
   ``totalRunningJobs``; busy runners: + on ``JobStarted``, - on ``JobCompleted``), **publish it
   through the sink first and acknowledge the message only after the write succeeded**. A
   failed write leaves the message unacknowledged: the service delivers it again. Within a
   session, a message whose id is not above the session's last one (``demand.is_new``: its
   acknowledgement was lost) is acknowledged and not counted again.
4. **Failures never end the task**: a session another owner holds shows
   ``ScaleSetSessionHeld`` and is asked for again every ``conflict_wait``; a scale set deleted on
   GitHub is created again; credentials refused (401/403, a missing or unusable Secret) show
   ``ScaleSetCredentialsRefused``; 5xx, connection errors, rate limits and malformed answers
   show ``ScaleSetUnreachable``; each with a backoff that doubles up to ``backoff_max``. The
   problem is cleared when the session opens again.
5. **Stop** deletes the session at once (which also ends the long poll; a poll still held is
   cancelled too), so the next leader's listener gets in without waiting for the service to
   time the session out.

The three methods: ``start()``, ``stop()`` (asks, does not wait), ``wait(timeout)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from runnerpool import api
from runnerpool.domain import PoolRef
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import BadCredentials, GitHubError, NotFound, RateLimited, Unavailable
from runnerpool.reasons import Reason
from runnerpool.scaleset.client import SCALE_SETS, ScaleSetClient
from runnerpool.scaleset.demand import is_new
from runnerpool.scaleset.errors import (
    MessageQueueTokenExpired,
    RunnerGroupNotFound,
    ScaleSetError,
    ScaleSetNotFound,
    SessionConflict,
    SessionNotFound,
)
from runnerpool.scaleset.session import CONFLICT_WAIT, MessageSession
from runnerpool.scaleset.types import (
    DEFAULT_RUNNER_GROUP,
    JobMessageType,
    Label,
    Message,
    RunnerScaleSet,
    RunnerSetting,
    Statistics,
)

__all__ = [
    "CALL_WORKERS",
    "DEFAULT_TIMING",
    "Holder",
    "Problem",
    "ScaleSetListener",
    "ScaleSetSettings",
    "ScaleSetView",
    "Timing",
    "ViewSink",
    "alone",
    "desired_scale_set",
    "recorded",
]

log = logging.getLogger(__name__)

#: ``(reason, message)``: what ``status.scaleSet.problem`` shows.
Problem = tuple[Reason, str]
T = TypeVar("T")

#: Threads for every listener's blocking calls (REST calls, status writes): a message or a
#: failure needs a few; an empty poll none.
CALL_WORKERS = 8
_calls: concurrent.futures.ThreadPoolExecutor | None = None
_calls_lock = threading.Lock()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    """The listeners' one pool of call threads, made when the first listener needs it."""
    global _calls  # noqa: PLW0603 - one pool for the process, made on first use
    with _calls_lock:
        if _calls is None:
            _calls = concurrent.futures.ThreadPoolExecutor(CALL_WORKERS, thread_name_prefix="scale-set-calls")
        return _calls


@dataclass(frozen=True)
class ScaleSetView:
    """What the listener knows, as ``status.scaleSet`` holds it (camelCase there):
    ``{id, runnerGroupId, lastMessageId, assignedJobs, runningJobs, busyRunners, problem}``."""

    scale_set_id: int = 0
    runner_group_id: int = 0
    last_message_id: int = 0
    assigned_jobs: int = 0
    running_jobs: int = 0
    busy_runners: tuple[str, ...] = ()
    problem: Problem | None = None
    #: The pool's labels (``spec.labels``) GitHub did not keep on the scale set (a GHES without
    #: custom scale-set labels keeps only the name, without an error): their jobs never come.
    dropped_labels: tuple[str, ...] = ()


class ViewSink(Protocol):
    """Where views go: the pool's ``status.scaleSet`` (the main session's status writer).

    ``publish`` returns once the view is written and raises when it is not: a message is
    acknowledged only after the publish of its view returned."""

    def publish(self, namespace: str, name: str, view: ScaleSetView) -> None: ...


@dataclass(frozen=True)
class ScaleSetSettings:
    """What a pool's listener needs; a change replaces the listener (``runnable``).

    ``labels``: the pool's extra labels (the scale set's name is always one); ``runner_group``:
    ``spec.runnerGroup`` (None: the scope's default group); ``max_runners``: the pool's
    ``maxReplicas``, told to the service with every poll; ``deleting``: the pool is being
    deleted, so no listener runs for it."""

    pool: PoolRef
    name: str
    max_runners: int
    runner_group: str | None = None
    labels: tuple[str, ...] = ()
    deleting: bool = False


#: Which other pool (``namespace/name``) has the scale set these settings name; None: this one
#: may have it (``runnerpool.scale_set_pools.ScaleSetClaims.holder``).
Holder = Callable[[ScaleSetSettings], str | None]


@dataclass(frozen=True)
class Timing:
    """Waits between attempts; tests shorten them."""

    backoff_min: float = 1.0
    backoff_max: float = 300.0
    #: ARC's listener asks again for a session another owner holds every 30 s.
    conflict_wait: float = CONFLICT_WAIT

    #: Up to this share is taken off each backoff at random, so that pools failing together
    #: (GitHub down for all) do not come back in step.
    jitter: float = 0.2

    def backoff(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (1, 2, 4, ... capped, less jitter)."""
        wait = min(self.backoff_max, self.backoff_min * 2.0 ** min(max(0, failures - 1), 64))
        return float(wait * (1.0 - self.jitter * random.random()))


DEFAULT_TIMING = Timing()


def desired_scale_set(
    settings: ScaleSetSettings, runner_group_id: int, runner_group_name: str
) -> RunnerScaleSet:
    """The scale set as the pool wants it: every label ``System`` (the scale set's own name
    first; one of each name whatever its case, as GitHub matches them), runners ephemeral and
    not self-updating (the pod's image decides the version)."""
    names: dict[str, str] = {}
    for name in (settings.name, *settings.labels):
        names.setdefault(name.casefold(), name)
    return RunnerScaleSet(
        name=settings.name,
        runnerGroupId=runner_group_id,
        runnerGroupName=runner_group_name,
        labels=tuple(Label(name=name) for name in names.values()),
        RunnerSetting=RunnerSetting(disableUpdate=True, ephemeral=True),
    )


def _label_keys(scale_set: RunnerScaleSet) -> frozenset[str]:
    """The scale set's label names as GitHub matches a job's ``runs-on``: whatever their case."""
    return frozenset(label.name.casefold() for label in scale_set.labels)


def _drifted(found: RunnerScaleSet, wanted: RunnerScaleSet) -> bool:
    return _label_keys(found) != _label_keys(wanted) or not found.runner_setting.disable_update


def _asked_and_kept(wanted: RunnerScaleSet, answer: RunnerScaleSet) -> tuple[frozenset[str], frozenset[str]]:
    """The labels asked for, and those GitHub's answer carries."""
    return _label_keys(wanted), _label_keys(answer)


def _dropped(found: RunnerScaleSet, wanted: RunnerScaleSet) -> tuple[str, ...]:
    """The wanted labels the scale set GitHub answered with lacks, in the pool's order."""
    kept = _label_keys(found)
    return tuple(label.name for label in wanted.labels if label.name.casefold() not in kept)


class _Stopped(Exception):  # noqa: N818 - a signal, not a failure
    """The listener was asked to stop while it worked."""


class _HeldByAnotherPool(Exception):  # noqa: N818 - a refusal, not a failure
    """Another live pool names the same scale set and has it (``Holder``)."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def alone(settings: ScaleSetSettings) -> str | None:
    """The ``Holder`` of a listener no other pool competes with: nobody else has its scale set."""
    return None


@dataclass
class _Open:
    """The session being held, for ``stop`` to delete from another thread."""

    client: ScaleSetClient
    scale_set_id: int
    session_id: str
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScaleSetListener:
    """One pool's listener task. ``client``: called before every attempt, so a rotated
    credential takes effect (``ScaleSetClients.get``); ``resume``: the view the pool's status
    holds (or the previous listener's), None for a new pool. An admin token GitHub revoked
    before its expiry is traded again by the client itself (``ActionsConnection.renew``).
    ``holder``: asked before each attempt whether another pool has the scale set.
    The three methods and the properties may be called from any thread."""

    def __init__(
        self,
        settings: ScaleSetSettings,
        client: Callable[[], ScaleSetClient],
        sink: ViewSink,
        owner: str,
        *,
        resume: ScaleSetView | None = None,
        timing: Timing = DEFAULT_TIMING,
        holder: Holder = alone,
    ) -> None:
        self.settings = settings
        self._client = client
        self._holder = holder
        self._sink = sink
        self._owner = owner
        self._timing = timing
        self._lock = threading.Lock()
        self._view = resume or ScaleSetView()
        self._stopping = threading.Event()
        self._open: _Open | None = None
        #: Set once a session has answered a poll (a message handled and acknowledged, or none
        #: to give), cleared by the next failure, whose backoff then starts anew. Not at the
        #: open: a session that fails at once each time (its poll or an acknowledgement 404, so
        #: reopened without a wait) would start anew at every open and ask GitHub in a loop.
        self._listening = False
        #: The labels this listener last asked GitHub for (create or update) and those GitHub's
        #: answer kept: when it dropped some (a GHES without custom labels), the same answer
        #: again is shown, not asked for again at every retry.
        self._asked: tuple[frozenset[str], frozenset[str]] | None = None
        self._future: concurrent.futures.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Touched on the loop only: set by ``stop``; the task while it awaits a poll.
        self._wake = asyncio.Event()
        self._polling: asyncio.Task[Any] | None = None

    # -- the three methods ---------------------------------------------------------------------

    def start(self) -> None:
        from runnerpool.scaleset import poller  # noqa: PLC0415 - the loop starts with the first listener

        self._loop = poller.POLLER.loop()
        self._future = asyncio.run_coroutine_threadsafe(self._run(), self._loop)

    def stop(self) -> None:
        """Ask the task to end and delete the session now (which ends a poll in flight);
        returns without waiting for the task (``wait``)."""
        self._stopping.set()
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs on it
                self._loop.call_soon_threadsafe(self._woken)
        with self._lock:
            held = self._open
        if held is not None:
            _close(held)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the task has ended (or never started)."""
        future = self._future
        if future is None:
            return True
        concurrent.futures.wait([future], timeout)
        return future.done()

    # -- for the runnable and tests ------------------------------------------------------------

    @property
    def view(self) -> ScaleSetView:
        """The last view published."""
        with self._lock:
            return self._view

    @property
    def alive(self) -> bool:
        return self._future is not None and not self._future.done()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- the task ------------------------------------------------------------------------------

    async def _run(self) -> None:
        pool = self.settings.pool
        failures = 0
        while not self._stopping.is_set():
            wait = 0.0
            try:
                client = await self._call(self._client)
                scale_set_id = await self._call(self._ensure, client)
                await self._listen(client, scale_set_id)
            except _Stopped:
                break
            except Exception as exc:
                if self._stopping.is_set():
                    break
                if self._listening:  # it worked until now: a new run of failures starts
                    failures = 0
                self._listening = False
                # A scale set or session held by another is no failure of ours: waited for
                # (``_held``), it leaves no backoff to the first failure after it.
                failures = 0 if isinstance(exc, (_HeldByAnotherPool, SessionConflict)) else failures + 1
                wait = await self._call(self._failed, exc, failures)
            else:
                failures = 0
            if wait > 0 and await self._pause(wait):
                break
        log.info("scale set listener of %s/%s stopped", pool.namespace, pool.name)

    async def _call(self, call: Callable[..., T], *args: Any) -> T:
        """A blocking call on the listeners' call threads, awaited."""
        return await asyncio.get_running_loop().run_in_executor(_executor(), call, *args)

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` unless asked to stop meanwhile; True when asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        return self._stopping.is_set()

    def _woken(self) -> None:
        """On the loop: ``stop`` was called; a held poll is cancelled."""
        self._wake.set()
        if self._polling is not None:
            self._polling.cancel()

    def _held(self, exc: Exception) -> float | None:
        """When another pool has the scale set, or another listener its session: show it; the
        wait before asking again (theirs to end, so no backoff). None for any other failure."""
        name, wait = self.settings.name, self._timing.conflict_wait
        if isinstance(exc, _HeldByAnotherPool):
            self._give_up_scale_set(
                f"pool {exc.holder} names scale set {name!r} too and has it (it was made first); "
                f"this pool takes the scale set over once that pool is being deleted, which then "
                f"leaves it on GitHub; asking again every {wait:g} s"
            )
            return wait
        if isinstance(exc, SessionConflict):
            self._show(
                Reason.SCALE_SET_SESSION_HELD,
                f"another listener holds the message session of scale set {name!r}: another operator "
                f"installation, or an operator process that ended without closing it (GitHub frees a "
                f"session nobody polls within minutes); asking again every {wait:g} s",
            )
            return wait
        return None

    def _failed(self, exc: Exception, failures: int) -> float:
        """Show what went wrong; the wait before the next attempt."""
        name = self.settings.name
        backoff = self._timing.backoff(failures)
        held = self._held(exc)
        if held is not None:
            return held
        if isinstance(exc, ScaleSetNotFound):
            log.info("scale set %r is gone on GitHub; creating it again", name)
            with self._lock:
                self._view = ScaleSetView(problem=self._view.problem)
            return 0.0 if failures == 1 else backoff
        if isinstance(exc, SessionNotFound) or (
            isinstance(exc, ScaleSetError) and exc.status == 404 and not isinstance(exc, NotFound)
        ):
            # A poll's 404 (``TaskAgentSessionExpiredException``): the session ended too.
            log.info("the message session of scale set %r ended on GitHub; opening another", name)
            return 0.0 if failures == 1 else backoff
        if isinstance(exc, CredentialError):
            self._show(
                Reason.SCALE_SET_CREDENTIALS_REFUSED,
                f"{exc.message}; the scale set listener tries again in {backoff:g} s",
            )
            return backoff
        if isinstance(exc, BadCredentials):
            self._show(
                Reason.SCALE_SET_CREDENTIALS_REFUSED,
                f"GitHub refused the pool's credentials for the scale set ({exc.message}); they need "
                f"the permission to register runners in the scope; trying again in {backoff:g} s",
            )
            return backoff
        if isinstance(exc, RunnerGroupNotFound):
            group = self.settings.runner_group or DEFAULT_RUNNER_GROUP
            self._show(
                Reason.RUNNER_GROUP_NOT_FOUND,
                f"no runner group named {group!r} for scale set {name!r}; trying again in {backoff:g} s",
            )
            return backoff
        if isinstance(exc, NotFound):
            self._show(exc.reason, f"{exc.message}; trying again in {backoff:g} s")
            return backoff
        if isinstance(exc, GitHubError):
            wait = max(backoff, exc.retry_after or 0.0)
            self._show(
                Reason.SCALE_SET_UNREACHABLE,
                f"the scale set {name!r} cannot be reached: {exc.message}; trying again in {wait:g} s",
            )
            return wait
        log.exception("scale set listener of %r failed; trying again in %g s", name, backoff, exc_info=exc)
        return backoff

    def _show(self, reason: Reason, message: str) -> None:
        """Publish the problem, best effort (a failed write is logged; the next attempt retries)."""
        log.warning("scale set %r: %s", self.settings.name, message)
        view = self.view
        if view.problem is not None and view.problem[0] == reason:
            return  # shown already; a message that only differs in its wait is not worth a write
        self._publish(replace(view, problem=(reason, message)), quiet=True)

    def _give_up_scale_set(self, message: str) -> None:
        """Show ``ScaleSetHeldByAnotherPool`` with no scale set id, jobs or runners: they are the
        other pool's, and without an id the pool's pods get no JIT config from its scale set."""
        log.warning("scale set %r: %s", self.settings.name, message)
        held = ScaleSetView(problem=(Reason.SCALE_SET_HELD_BY_ANOTHER_POOL, message))
        if self.view != held:
            self._publish(held, quiet=True)

    def _publish(self, view: ScaleSetView, *, quiet: bool = False) -> bool:
        pool = self.settings.pool
        try:
            self._sink.publish(pool.namespace, pool.name, view)
        except Exception as exc:
            if not quiet:
                raise
            log.warning("scale set %r: the status write failed: %s", self.settings.name, exc)
            return False
        with self._lock:
            self._view = view
        return True

    def _ensure(self, client: ScaleSetClient) -> int:
        """The scale set as the settings want it; its id, published. Nothing is asked of GitHub
        while another pool has it (``_HeldByAnotherPool``)."""
        settings = self.settings
        holder = self._holder(settings)
        if holder is not None:
            raise _HeldByAnotherPool(holder)
        group = client.runner_group(settings.runner_group or DEFAULT_RUNNER_GROUP)
        wanted = desired_scale_set(settings, group.id, group.name)
        found = client.scale_set(group.id, settings.name)
        if found is None:
            found = client.create_scale_set(wanted)
            self._asked = _asked_and_kept(wanted, found)
            log.info("created scale set %r (id %d) in runner group %r", found.name, found.id, group.name)
        elif self._needs_update(found, wanted):
            found = client.update_scale_set(found.id, wanted)
            self._asked = _asked_and_kept(wanted, found)
            log.info("updated the labels of scale set %r (id %d)", found.name, found.id)
        self._adopted(found, group.id, _dropped(found, wanted))
        return found.id

    def _needs_update(self, found: RunnerScaleSet, wanted: RunnerScaleSet) -> bool:
        """Drifted, unless it is just what GitHub answered when this listener last asked for
        the same labels: asking again would be dropped again (a new listener asks once more)."""
        if not _drifted(found, wanted):
            return False
        return self._asked != _asked_and_kept(wanted, found) or not found.runner_setting.disable_update

    def _adopted(self, found: RunnerScaleSet, group_id: int, dropped: tuple[str, ...]) -> None:
        """Publish the scale set's id, its group's, and the labels GitHub did not keep."""
        if dropped:
            log.warning(
                "scale set %r: GitHub did not keep the label(s) %s (a GHES without custom scale-set "
                "labels); jobs that ask for them are never assigned to it",
                found.name,
                ", ".join(dropped),
            )
        view = self.view
        if (view.scale_set_id, view.runner_group_id, view.dropped_labels) != (found.id, group_id, dropped):
            # Message ids, jobs and runners belong to one scale set: a new one starts afresh.
            fresh = view.scale_set_id != found.id
            base = ScaleSetView(problem=view.problem) if fresh else view
            self._publish(
                replace(base, scale_set_id=found.id, runner_group_id=group_id, dropped_labels=dropped)
            )

    async def _listen(self, client: ScaleSetClient, scale_set_id: int) -> None:
        opening = MessageSession.open
        session = await self._call(lambda: opening(client, scale_set_id, self._owner, conflict_retries=0))
        held = _Open(client, scale_set_id, session.session.session_id)
        with self._lock:
            self._open = held
        try:
            if self._stopping.is_set():
                raise _Stopped
            await self._call(self._opened, session.statistics)
            failures = 0
            last_message_id = 0  # this session's: ids of another session mean nothing here
            asked = time.monotonic()
            while not self._stopping.is_set():
                # An older pool naming the scale set may have come (its namespace enabled, say)
                # since the attempt began: it has the scale set, this one lets go of the session.
                # Asked as often as a held scale set is asked for (each ask reads every pool).
                if time.monotonic() - asked >= self._timing.conflict_wait:
                    asked = time.monotonic()
                    holder = await self._call(self._holder, self.settings)
                    if holder is not None:
                        raise _HeldByAnotherPool(holder)
                message = await self._poll(session, last_message_id)
                if message is None:
                    self._listening = True
                    continue
                if await self._call(self._handle, session, message, last_message_id):
                    self._listening = True
                    failures = 0
                    last_message_id = max(last_message_id, message.message_id)
                    continue
                failures += 1
                if await self._pause(self._timing.backoff(failures)):
                    break
        finally:
            with self._lock:
                self._open = None
            await self._call(_close, held)

    async def _poll(self, session: MessageSession, last_message_id: int) -> Message | None:
        """The next message, awaited on the loop; ``_Stopped`` when ``stop`` cancelled it."""
        task = asyncio.current_task()
        self._polling = task
        try:
            if self._stopping.is_set():  # stop came before: its ``_woken`` ran already
                raise _Stopped
            return await session.poll_async(last_message_id, self.settings.max_runners, self._call)
        except asyncio.CancelledError:
            if task is None or not self._stopping.is_set():
                raise
            task.uncancel()
            raise _Stopped from None
        finally:
            self._polling = None

    def _opened(self, statistics: Statistics | None) -> None:
        """The session is open: the problem is over, and the statistics it came with count."""
        view = replace(self.view, problem=None)
        if statistics is not None:
            view = replace(
                view,
                assigned_jobs=statistics.total_assigned_jobs,
                running_jobs=statistics.total_running_jobs,
            )
        if view != self.view:
            self._publish(view)
        log.info("scale set %r: listening as %r", self.settings.name, self._owner)

    def _handle(self, session: MessageSession, message: Message, last_message_id: int) -> bool:
        """Record the message, then acknowledge it; False when the record failed (the message
        stays unacknowledged, so it is delivered again). ``last_message_id``: the session's last
        handled. A skipped message (``parse_message`` logged why) is acknowledged with nothing
        to record: left in the queue, it would come back on every poll ahead of later ones."""
        view = self.view
        if not is_new(message, last_message_id) or message.skipped is not None:
            session.acknowledge(message.message_id)  # recorded before (only the ack was lost), or void
            return True
        self._acquire(session, message)
        try:
            self._publish(recorded(view, message))
        except Exception as exc:
            log.warning(
                "scale set %r: message %d not recorded (%s); it will be delivered again",
                self.settings.name,
                message.message_id,
                exc,
            )
            return False
        session.acknowledge(message.message_id)
        return True

    def _acquire(self, session: MessageSession, message: Message) -> None:
        """Acquire the jobs the message offers (``JobAvailable``), as the Go listener does; a
        failure is logged and the message recorded and acknowledged all the same.

        Why: the demand follows ``totalAssignedJobs``, not acquisitions, and the Go listener
        acknowledges a message before it acquires, so a failed acquire never leaves a message in
        the queue. Raised out of ``_handle``, a failure retries do not clear (a 4xx, say) closed
        the session, the message came again and failed the same way, and the pool's demand froze.
        Only a definite refusal (a 4xx, an answer not understood) is swallowed: a queue token
        refused again after the session's refresh (``acquire_jobs`` refreshes it on a 401), an
        outage, a rate limit or a request not sent (``Unavailable``, ``RateLimited``) go up, so
        the session is opened anew after its backoff and the message, unacknowledged, comes
        again and its jobs are acquired then: acknowledged, a job nobody acquired was never
        offered again. Acquired before the view is written, unlike upstream: a message whose
        write fails comes again and is acquired again, which acquires nothing twice. Logged
        without the message's fields or any token."""
        offered = [
            job.runner_request_id for job in message.of(JobMessageType.AVAILABLE) if job.runner_request_id
        ]
        if not offered:
            return
        name = self.settings.name
        try:
            acquired = session.acquire_jobs(offered)
        except (MessageQueueTokenExpired, Unavailable, RateLimited):
            raise  # passing: the session reopens after its backoff and the message comes again
        except GitHubError as exc:
            log.warning(
                "scale set %r: message %d: the %d jobs offered were not acquired (%s); the message is "
                "recorded and acknowledged all the same (the demand follows the assigned jobs)",
                name,
                message.message_id,
                len(offered),
                exc.message,
            )
            return
        log.debug("scale set %r: acquired %d of %d jobs offered", name, len(acquired), len(offered))


def recorded(view: ScaleSetView, message: Message) -> ScaleSetView:
    """The view after the message: its statistics (the last seen when it had none) and busy
    runners (+ on ``JobStarted``, - on ``JobCompleted``; a set, so a message handled twice
    changes nothing), the newest ``api.MAX_REPLICAS`` of them: a name whose completion never
    came (the service cuts a message at 50 jobs) stayed for good, and past the CRD's bound the
    status write was refused, so no message was ever acknowledged again. A pool has at most that
    many runners, so only such names go."""
    busy = list(view.busy_runners)
    for job in message.jobs:
        if not job.runner_name:
            continue
        if job.message_type == JobMessageType.STARTED and job.runner_name not in busy:
            busy.append(job.runner_name)
        elif job.message_type == JobMessageType.COMPLETED and job.runner_name in busy:
            busy.remove(job.runner_name)
    newest = tuple(busy[-api.MAX_REPLICAS :])
    recorded = replace(view, last_message_id=message.message_id, busy_runners=newest, problem=None)
    statistics = message.statistics
    if statistics is None:
        return recorded
    return replace(
        recorded, assigned_jobs=statistics.total_assigned_jobs, running_jobs=statistics.total_running_jobs
    )


def _close(held: _Open) -> None:
    """Delete the session (once; 404 means it is gone already). Sent directly, not through the
    ``MessageSession``, whose lock a poll in flight holds."""
    with held.lock:
        if held.closed:
            return
        held.closed = True
    what = "DELETE runnerscalesets/{id}/sessions/{sessionId}"
    path = f"{SCALE_SETS}/{held.scale_set_id}/sessions/{held.session_id}"
    try:
        held.client.call("DELETE", path, what=what, ok=(204,), not_found=SessionNotFound)
    except (SessionNotFound, ScaleSetNotFound):
        pass
    except GitHubError as exc:
        log.info("the message session of scale set %d was not closed: %s", held.scale_set_id, exc)
