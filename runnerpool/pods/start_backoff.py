"""Per-pool exponential backoff of new pods while the pool's runners keep failing at start.

A runner container that exits at once (a wrong ``command``, a runner GitHub refuses as
outdated, a missing tool in a custom image) makes its pod used up: the runner managers replace
it, the replacement fails the same way, and so on, each pod registering a runner on GitHub and
deregistering it. Measured before this: a 1-replica pool with ``command: [false]`` made 41 pods
and 126 GitHub requests in 90 s, and showed only ``RunnersStarting``. The kubelet's own
CrashLoopBackOff does not help: the pod is replaced before its second restart.

So the pod step asks here before it creates, like for a refused create
(``runnerpool.pods.create_backoff``): after the n-th pod in a row whose runner failed at start,
the pool's next create waits ``base * 2**(n-1)`` seconds, at most ``cap`` (the kubelet's
CrashLoopBackOff timings: 10 s doubling to 5 minutes). Pods created, JIT configs issued and
runners registered and deleted are all one per pod, so the pool's GitHub requests are bounded
by the same backoff.

Each pod is judged once, by its runner container (``naming.RUNNER_CONTAINER``):

* **failed at start**: it terminated (now, or before a restart) with a non-zero exit code
  before it had run ``STARTED_AFTER`` seconds, and the pod was never marked busy (a runner that
  took a job did start);
* **started**: it has been running ``STARTED_AFTER`` seconds, or it exited 0 (its one job
  done). A started pod ends the streak;
* **neither**, when its runner ended because the pod was deleted (a scale-down, a rollout, an
  eviction): a deletion is no failure of the runner, and no start of it either;
* **refused as outdated**, whatever its exit code: its termination message says GitHub
  refuses its runner version (``runnerpool.pods.outdated``), and its pod was never marked busy
  (however long it ran: dind waits for dockerd before the listener asks GitHub). A failure at
  start like the first kind, reported as ``RunnerVersionOutdated`` instead of ``ExitedAtStart``.
  A runner GitHub refuses never gets a job, so the words from a busy one are a job's: a job can
  write them to ``/dev/termination-log`` and kill the entrypoint, and counted, they backed its
  pool off for up to 5 minutes a pod.

Pods that fail together are one failure: a pod that was there when the streak last grew does
not grow it again (one GitHub outage, one bad image for all the pool's pods: one cause). A
streak whose next pod was due more than ``cap`` ago, and of which no pod has been starting
since, is forgotten: no pod was wanted meanwhile.

The failure is kept with the pool's ``metadata.generation``: a pool whose spec changed (the
user fixed the command, the image) creates at once. While the pool backs off it reports
``Ready`` False, ``RunnerPodsFailing``, with the container's exit reason and code
(:meth:`StartBackoff.failing`), while it lacks ready pods of its current template: a pool with
what it wants is failing at nothing (``runnerpool.pods.step``). Kept in memory, like the create
backoff: a restarted operator tries once, then backs off again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from runnerpool.domain import parse_rfc3339, utcnow
from runnerpool.naming import TEMPLATE_HASH_LABEL
from runnerpool.pods.create_backoff import Doubling
from runnerpool.pods.failures import EXITED_AT_START, RUNNER_VERSION_OUTDATED, Failing
from runnerpool.pods.outdated import refused_version
from runnerpool.pods.state import runner_status
from runnerpool.pods.template import busy_marked

__all__ = ["BASE_DELAY", "MAX_DELAY", "STARTED_AFTER", "StartBackoff", "StartFailure"]

#: Seconds before the first retry, and the longest wait (the kubelet's CrashLoopBackOff).
BASE_DELAY = 10.0
MAX_DELAY = 300.0
#: Seconds a runner container must run before its pod counts as started.
STARTED_AFTER = 30.0
#: Pods remembered as judged, per pool: more than any pool's pods at once.
_MAX_JUDGED = 4096


@dataclass(frozen=True)
class StartFailure:
    """The pool's current streak of pods that failed at start."""

    generation: int
    #: Pods in a row whose runner failed at start.
    failures: int
    #: What the last one's runner container said: ``container runner: Error, exit code 1``.
    exit: str
    #: The reason the last one is reported with (``ExitedAtStart``, ``RunnerVersionOutdated``).
    reason: str
    #: Seconds from the last failure to the next create.
    delay: float
    retry_at: datetime


@dataclass
class _Pool:
    judged: set[str] = field(default_factory=set)
    failure: StartFailure | None = None
    #: The pods there were when the streak last grew: their failures are that failure's.
    batch: frozenset[str] = frozenset()
    #: When a pod of the current template was last seen not judged yet (still starting).
    starting_at: datetime | None = None


@dataclass(frozen=True)
class _Verdict:
    failed: bool
    exit: str = ""
    #: A pod of another template: neither a failure nor a start of the current one.
    ignored: bool = False
    reason: str = EXITED_AT_START


def _template(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(TEMPLATE_HASH_LABEL)


def _until_started(pod: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until a running runner container counts as started (``None``: not running)."""
    running = (runner_status(pod).get("state") or {}).get("running") or {}
    ran = _seconds_between(running.get("startedAt"), now) if running else None
    return None if ran is None else max(STARTED_AFTER - ran, 0.0) + 1.0


def _sooner(a: float | None, b: float | None) -> float | None:
    waits = [w for w in (a, b) if w is not None]
    return min(waits) if waits else None


def _seconds_between(start: Any, end: datetime) -> float | None:
    began = parse_rfc3339(start)
    return None if began is None else (end - began).total_seconds()


def _ended_by_deletion(pod: Mapping[str, Any], ended: Mapping[str, Any]) -> bool:
    """The pod was deleted (a scale-down or rollout, an eviction, a user) and its runner ended
    with it, not before: when the deletion was asked (``deletionTimestamp`` less the grace
    period) or later. Found by the chaos soak: a young pod retired by a scale-down counted as a
    failure at start, and its pool reported ``RunnerPodsFailing`` until its next pod ran 30 s."""
    meta = pod.get("metadata") or {}
    deleted = parse_rfc3339(meta.get("deletionTimestamp"))
    if deleted is None:
        return False
    asked = deleted - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    finished = parse_rfc3339(ended.get("finishedAt"))
    return finished is None or finished >= asked


def _verdict(pod: Mapping[str, Any], now: datetime) -> _Verdict | None:
    """Whether the pod's runner failed at start or started; ``None``: not known yet. A runner
    that ended because its pod was deleted did neither (``_ended_by_deletion``)."""
    runner = runner_status(pod)
    current = runner.get("state") or {}
    if current.get("terminated") and _ended_by_deletion(pod, current["terminated"]):
        return _Verdict(failed=False, ignored=True)
    marked = busy_marked(pod)
    for state in (current, runner.get("lastState") or {}):
        ended = state.get("terminated")
        if not ended:
            continue
        code = int(ended.get("exitCode") or 0)
        finished = parse_rfc3339(ended.get("finishedAt")) or now
        ran = _seconds_between(ended.get("startedAt"), finished)
        # GitHub gives an outdated runner no job: the words in a busy-marked pod's message are a
        # job's own (/dev/termination-log), written to throttle its pool. Not the run time: a
        # real outdated runner may take longer than STARTED_AFTER to be refused (dind's wait for
        # dockerd, a slow start under a CPU limit), and missing it churned pods with no backoff.
        version = None if marked else refused_version(ended)
        if version is not None:
            told = f"GitHub refuses runner version {version} as outdated; use a newer runner image"
            return _Verdict(True, f"container {runner.get('name')}: {told}", reason=RUNNER_VERSION_OUTDATED)
        if code == 0 or marked or (ran is not None and ran >= STARTED_AFTER):
            return _Verdict(failed=False)
        reason = ended.get("reason") or "Error"
        return _Verdict(True, f"container {runner.get('name')}: {reason}, exit code {code}")
    running = (runner.get("state") or {}).get("running") or {}
    ran = _seconds_between(running.get("startedAt"), now) if running else None
    return _Verdict(failed=False) if ran is not None and ran >= STARTED_AFTER else None


class StartBackoff:
    def __init__(
        self,
        base: float = BASE_DELAY,
        cap: float = MAX_DELAY,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._delays = Doubling(base, cap)
        self._stale_after = cap
        self._clock = clock
        self._lock = threading.Lock()
        self._pools: dict[str, _Pool] = {}

    def observe(
        self, pool: str, generation: int, template: str, pods: Iterable[Mapping[str, Any]]
    ) -> float | None:
        """Judge the pool's pods not judged yet (each once; see the module docstring); pods of
        another ``template`` than the current one are not its failures. Returns the seconds
        until a running pod may count as started while the pool backs off (look again then)."""
        now = self._clock()
        recheck: float | None = None
        listed = [(str((pod.get("metadata") or {}).get("uid") or ""), pod) for pod in pods]
        with self._lock:
            state = self._pools.setdefault(pool, _Pool())
            if state.failure is not None and self._current(state, generation, now) is None:
                # Stale (or another spec's): the pool's next pod starts a streak of its own.
                state.failure, state.batch, state.starting_at = None, frozenset(), None
            for uid, pod in listed:
                if not uid or uid in state.judged:
                    continue
                verdict = (
                    _verdict(pod, now) if _template(pod) == template else _Verdict(failed=False, ignored=True)
                )
                if verdict is None:
                    recheck = _sooner(recheck, _until_started(pod, now))
                    state.starting_at = now
                    continue
                if len(state.judged) >= _MAX_JUDGED:
                    state.judged.clear()  # old pods are long gone; at worst one is judged twice
                state.judged.add(uid)
                if verdict.failed:
                    batch = frozenset(uid for uid, _ in listed)
                    self._failed(state, verdict, uid=uid, generation=generation, now=now, listed=batch)
                elif not verdict.ignored:
                    state.failure, state.batch = None, frozenset()
            return recheck if state.failure is not None else None

    def _failed(
        self,
        state: _Pool,
        verdict: _Verdict,
        *,
        uid: str,
        generation: int,
        now: datetime,
        listed: frozenset[str],
    ) -> None:
        """Grow the pool's streak by a pod that failed at start, unless the pod was there when it
        last grew: pods that fail together (one GitHub outage, one bad image for all the pool's
        pods) are one failure, as they are one cause. Counted one by one, three replicas that
        failed in one outage made their replacements wait 40 s, and the pool said
        RunnerPodsFailing for 76 s after GitHub came back (the chaos soak's 60 s)."""
        before = self._current(state, generation, now)
        if before is not None and uid in state.batch:
            return
        count = before.failures + 1 if before is not None else 1
        delay = self._delays.after(count)
        retry_at = now + timedelta(seconds=delay)
        state.failure = StartFailure(generation, count, verdict.exit, verdict.reason, delay, retry_at)
        state.batch = listed

    def _current(self, state: _Pool | None, generation: int, now: datetime) -> StartFailure | None:
        """The pool's streak if it is the current spec's and not stale: a streak whose next pod
        was due more than the longest delay ago, and no pod of which has been starting since,
        was ended by the pool wanting no pod, and a job hours later would say it again. A pod
        slow to fail (a long image pull, a node to wait for) keeps it."""
        failure = state.failure if state is not None else None
        if state is None or failure is None or failure.generation != generation:
            return None
        last = max(failure.retry_at, state.starting_at or failure.retry_at)
        return failure if (now - last).total_seconds() <= self._stale_after else None

    def failure(self, pool: str, generation: int) -> StartFailure | None:
        """The pool's streak, if it belongs to its current spec and is not stale."""
        with self._lock:
            found = self._pools.get(pool)
        return self._current(found, generation, self._clock())

    def wait(self, pool: str, generation: int) -> float | None:
        """Seconds until the pool may create a pod again; ``None``: it may now."""
        found = self.failure(pool, generation)
        if found is None:
            return None
        left = (found.retry_at - self._clock()).total_seconds()
        return left if left > 0 else None

    def failing(self, pool: str, generation: int) -> Failing | None:
        """What the pool reports while its pods fail at start (stable between failures, so a
        pass that changes nothing writes nothing)."""
        found = self.failure(pool, generation)
        if found is None:
            return None
        detail = f"{found.exit}; the next pod waits {found.delay:.0f} s"
        return Failing(found.reason, found.failures, detail)

    def forget(self, pool: str) -> None:
        with self._lock:
            self._pools.pop(pool, None)
