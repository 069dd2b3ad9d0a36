"""The replica count a pool wants now: what the reconciler calls for each pool.

``Autoscaler.decide(pool)`` reads everything from the pool object (spec, ``status.demand``,
``status.runners``, ``status.desiredReplicas``), so it needs no request and gives the same
answer on any replica with a warm cache. Busy is the larger of the jobs in progress that
deliveries or polling reported and the busy runners GitHub lists (``status.runners.busy``):
a lost ``in_progress`` delivery cannot make the pool think a busy runner is spare. The
replica count only says how many runners the pool should have; which pods go is the runner
managers' busy-safe path (idle runners deregistered first, busy ones never touched).

An Event (``ScaledUp``/``ScaledDown``, with the numbers) is recorded when the decision
changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from runnerpool import api, events
from runnerpool.demand.scaling import Window, recommend
from runnerpool.domain import Decision, utcnow
from runnerpool.runners.lifecycle import parse_duration

__all__ = ["Autoscaler"]


def _event_object(pool: api.RunnerPool) -> dict[str, object]:
    return {"apiVersion": pool.api_version, "kind": pool.kind, "metadata": pool.metadata}


class Autoscaler:
    def __init__(self, recorder: events.Recorder, clock: Callable[[], datetime] = utcnow) -> None:
        self._events = recorder
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], Window] = {}
        self._last: dict[tuple[str, str], int] = {}

    def desired_replicas(self, pool: api.RunnerPool) -> int:
        return self.decide(pool).replicas

    def decide(self, pool: api.RunnerPool) -> Decision:
        scaling = pool.spec.autoscaling
        if scaling is None:
            return Decision.fixed(pool.spec.replicas)
        demand = pool.status.demand or api.Demand()
        runners_busy = pool.status.runners.busy if pool.status.runners else 0
        busy = max(demand.busy, runners_busy)
        wanted = recommend(scaling.min_replicas, scaling.max_replicas, busy, demand.queued)
        delay = parse_duration(scaling.scale_down_delay)
        key = (pool.namespace, pool.name)
        now = self._clock()
        with self._lock:
            window = self._windows.setdefault(key, Window())
            previous = self._last.get(key, pool.status.desired_replicas)
            if not window and previous is not None:
                window.add(now, min(max(previous, scaling.min_replicas), scaling.max_replicas))
            window.add(now, wanted)
            replicas, recheck = window.decide(now, delay)
            self._last[key] = replicas
        counts = (
            f"{demand.queued} queued, {busy} busy job(s); "
            f"min {scaling.min_replicas}, max {scaling.max_replicas}"
        )
        if replicas > wanted:
            message = f"holding {replicas} for scaleDownDelay {scaling.scale_down_delay}: {counts}"
            decision = Decision(replicas, "WaitingToScaleDown", message, recheck, wanted)
        else:
            decision = Decision(replicas, "FollowingDemand", counts, recheck, wanted)
        if previous is not None and replicas != previous:
            verb = "ScaledUp" if replicas > previous else "ScaledDown"
            self._events.event(
                _event_object(pool), events.NORMAL, verb, f"{previous} -> {replicas} runners: {counts}"
            )
        return decision

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._windows.pop((namespace, name), None)
            self._last.pop((namespace, name), None)
