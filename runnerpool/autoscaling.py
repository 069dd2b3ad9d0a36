"""How many runner pods a pool wants, as data: the scaling decision and its rules, pure.

The reconciler alone decides (:func:`decide`, then :meth:`Decision.held_by` with the pods it
counted), writes the answer to ``status.desiredReplicas`` before it acts on pods, and shows
the decision's reason in the pool's ``Scaling`` condition; the runner managers only read
what it wrote (:func:`desired_replicas`). Nothing here writes, records an Event or keeps
state: the scale-down window is a value the reconciler hands in and gets back.

The rule: desired = clamp(min, busy + queued + minIdle, max), up at once, down late.
Scaling down waits like a HorizontalPodAutoscaler's scale-down stabilization window: the
decision is the highest recommendation of the last ``scaleDownDelay``, so a pool shrinks
only after demand stayed low for that long, and a burst right after a lull finds its
runners still there.

A scale set's jobs are those GitHub assigned it (``status.scaleSet.assignedJobs``, waiting and
running; its listener writes them), so for it desired = clamp(min, assigned + minIdle, max),
the rule of ARC's scale sets, with the same scale-down delay. For other pools, busy is the
larger of the jobs in progress that deliveries or polling reported and the busy runners GitHub
lists (``status.runners.busy``): a lost ``in_progress`` delivery cannot make
the pool think a busy runner is spare. The count only says how many runners the pool should
have; which pods go is the runner managers' busy-safe path.

``minIdle`` is a warm buffer: that many runners above the jobs, so the next jobs find a
runner already listening instead of waiting for a pod to start. It is added to the jobs, not
laid under them as a floor like ``minReplicas``: a queued job already counts one runner, so
the moment it is queued (or, without a delivery, the moment GitHub lists a runner busy) the
replacement pod starts while an idle runner takes the job; queued -> in progress moves the
job from one count to the other and leaves the sum alone, and a job that ends takes its
used-up runner with it, so the pool falls back to the buffer without retiring anyone. Idle
runners are not counted from GitHub's listing: it lags the jobs by a runner sync, and the
buffer would dip for that long after every pickup. ``maxReplicas`` caps the buffer too.

The window lives in the leader's memory. A new leader has no history, so the first
recommendation it keeps for a pool is the pool's last decision (``status.desiredReplicas``)
as of now: a failover can delay a scale-down by up to one window, never bring it forward.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from runnerpool import api
from runnerpool.domain import parse_duration
from runnerpool.reasons import Reason

__all__ = [
    "FIXED",
    "FOLLOWING_DEMAND",
    "WAITING_TO_SCALE_DOWN",
    "Decision",
    "Window",
    "decide",
    "desired_replicas",
    "recommend",
]

FIXED = Reason.FIXED
FOLLOWING_DEMAND = Reason.FOLLOWING_DEMAND
WAITING_TO_SCALE_DOWN = Reason.WAITING_TO_SCALE_DOWN


@dataclass(frozen=True)
class Decision:
    """How many runner pods a pool wants now, and why: ``spec.replicas`` for a fixed pool,
    demand's answer for one that follows it."""

    replicas: int
    reason: Reason  # the Scaling condition's reason
    message: str
    #: Seconds after which the decision may fall without new demand (the reconciler requeues).
    recheck_after: float | None = None
    #: What demand asks for right now, before the scale-down delay (``None``: a fixed pool).
    wanted: int | None = None

    @classmethod
    def fixed(cls, replicas: int) -> Decision:
        return cls(replicas, FIXED, f"spec.replicas is {replicas}")

    @property
    def holding(self) -> bool:
        """Demand wants fewer than the decision keeps: the scale-down delay holds the rest."""
        return self.wanted is not None and self.replicas > self.wanted

    def held_by(self, active: int) -> Decision:
        """The scale-down delay keeps runners that exist; it never makes new ones.

        An ephemeral runner's pod is used up after its job. Replacing it while demand is
        already lower and only the delay holds the count made a pod, a registration and a
        deregistration for nothing after every job (the demand benchmark: 112 pods for 61
        jobs). So above ``wanted`` the decision is capped at the ``active`` pods.
        """
        if self.wanted is None or not self.holding:
            return self
        held = max(self.wanted, min(self.replicas, active))
        if held == self.replicas:
            return self
        message = f"{self.message}; {held} still up (used-up runners are not replaced meanwhile)"
        return replace(self, replicas=held, message=message)


def recommend(min_replicas: int, max_replicas: int, busy: int, queued: int, min_idle: int = 0) -> int:
    return max(min_replicas, min(max_replicas, busy + queued + min_idle))


@dataclass(frozen=True)
class Window:
    """Recommendations of the last ``delay``, each with the time it was last the current one.

    Recommendations come when demand changes (a watch event), not on a clock, so an entry
    stays current until the next one arrives: demand of 5 recorded at 10:00 and of 0 at
    10:04 holds 5 until 10:04 + delay. Kept as a monotonic sequence (values falling from
    the front), the usual sliding-window maximum; every operation returns a new window.
    """

    items: tuple[tuple[datetime, int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, now: datetime, replicas: int) -> Window:
        items = list(self.items)
        if items:
            items[-1] = (now, items[-1][1])  # it was current until now
        while items and items[-1][1] <= replicas:
            items.pop()  # never again the highest: a newer one is at least as high
        items.append((now, replicas))
        return Window(tuple(items))

    def expire(self, now: datetime, delay: timedelta) -> Window:
        """Without the entries that stopped being current more than ``delay`` ago."""
        items = self.items
        while len(items) > 1 and now - items[0][0] >= delay:
            items = items[1:]
        return Window(items)

    def top(self, now: datetime, delay: timedelta) -> tuple[int, float | None]:
        """The highest recommendation current within ``delay``; seconds until it expires.

        Call on an expired window (:meth:`expire`).
        """
        until, highest = self.items[0]
        if len(self.items) == 1:
            return highest, None
        return highest, max(0.0, (until + delay - now).total_seconds())


def _counts(scaling: api.Autoscaling, busy: int, queued: int) -> str:
    """What the decision was made of, for the ``Scaling`` condition's message."""
    counts = f"{queued} queued, {busy} busy job(s)"
    if scaling.min_idle:
        room = max(0, min(scaling.min_idle, scaling.max_replicas - busy - queued))
        if room < scaling.min_idle:
            counts += f" + {room} of minIdle {scaling.min_idle} idle (max caps the buffer)"
        else:
            counts += f" + {scaling.min_idle} idle (minIdle)"
    return f"{counts}; min {scaling.min_replicas}, max {scaling.max_replicas}"


def _demand(pool: api.RunnerPool, runners_busy: int | None) -> tuple[int, int]:
    """Busy and queued jobs: a scale set's from what GitHub assigned it (``status.scaleSet``,
    the jobs assigned and not finished, of which running ones are busy); otherwise from
    deliveries and polling (``status.demand``), busy at least the busy runners GitHub lists."""
    if pool.spec.scale_set is not None:
        assigned = pool.status.scale_set or api.ScaleSetStatus()
        running = min(assigned.running_jobs, assigned.assigned_jobs)
        return running, assigned.assigned_jobs - running
    demand = pool.status.demand or api.Demand()
    if runners_busy is None:
        runners_busy = pool.status.runners.busy if pool.status.runners else 0
    return max(demand.busy, runners_busy), demand.queued


def decide(
    pool: api.RunnerPool, window: Window, now: datetime, runners_busy: int | None = None
) -> tuple[Decision, Window]:
    """The pool's decision before the hold (:meth:`Decision.held_by`), and the window to keep.

    ``runners_busy``: the busy runners GitHub lists as the runner manager last counted them,
    which the same pass writes to ``status.runners``; ``None``: as the status says. Deciding
    on the status alone would act on the count one pass late, and no pass follows the
    reconciler's own status write (``runnerpool.echoes``).
    """
    scaling = pool.spec.autoscaling
    if scaling is None:
        return Decision.fixed(pool.spec.replicas), Window()
    busy, queued = _demand(pool, runners_busy)
    wanted = recommend(scaling.min_replicas, scaling.max_replicas, busy, queued, scaling.min_idle)
    delay = parse_duration(scaling.scale_down_delay)
    previous = pool.status.desired_replicas
    if not window and previous is not None:
        window = window.add(now, min(max(previous, scaling.min_replicas), scaling.max_replicas))
    window = window.add(now, wanted).expire(now, delay)
    replicas, recheck = window.top(now, delay)
    counts = _counts(scaling, busy, queued)
    if replicas > wanted:
        message = (
            f"holding {replicas} for scaleDownDelay {scaling.scale_down_delay} "
            f"(demand wants {wanted}): {counts}"
        )
        return Decision(replicas, WAITING_TO_SCALE_DOWN, message, recheck, wanted), window
    return Decision(replicas, FOLLOWING_DEMAND, f"{replicas} runner(s) for {counts}", recheck, wanted), window


def desired_replicas(pool: api.RunnerPool) -> int | None:
    """What the runner managers retire above: the reconciler's decision, read from the pool.

    A fixed pool's is ``spec.replicas``. A pool that follows demand has the one the reconciler
    wrote to ``status.desiredReplicas`` before it acted on pods; before its first decision
    there is none (``None``), and nothing is taken away.
    """
    if pool.spec.autoscaling is None:
        return pool.spec.replicas
    return pool.status.desired_replicas
