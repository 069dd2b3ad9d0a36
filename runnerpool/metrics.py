"""Per-pool gauges: what users alert on (desired vs. ready runner pods, Ready, waiting jobs).

Set by the leader's reconciler on every pass from the status it computes, so they follow the
pool's own status (``status.demand`` included), whichever replica recorded the demand.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Gauge

from runnerpool import api, conditions

POOL_DESIRED = Gauge(
    "runnerpool_pool_desired_replicas",
    "Runner pods a pool asks for (spec.replicas, or the autoscaling decision).",
    ["namespace", "pool"],
)
POOL_READY = Gauge(
    "runnerpool_pool_ready_replicas", "Runner pods of a pool that are ready.", ["namespace", "pool"]
)
POOL_READY_CONDITION = Gauge(
    "runnerpool_pool_ready",
    "1 while a pool's Ready condition is True, 0 while it is False (the reason is on the pool).",
    ["namespace", "pool"],
)
OLDEST_QUEUED = Gauge(
    "runnerpool_pool_oldest_queued_job_timestamp_seconds",
    "Unix time at which the operator learnt of the oldest job still queued for a pool "
    "(status.demand); no series while none is queued.",
    ["namespace", "pool"],
)


def observe_pool(pool: api.RunnerPool, status: dict[str, Any]) -> None:
    """``status``: the status the reconciler computed for ``pool`` in this pass."""
    labels = (pool.namespace, pool.name)
    POOL_DESIRED.labels(*labels).set(status["desiredReplicas"])
    POOL_READY.labels(*labels).set(status["readyReplicas"])
    ready = conditions.find(status["conditions"], conditions.READY)
    POOL_READY_CONDITION.labels(*labels).set(1 if ready is not None and ready["status"] == "True" else 0)
    demand = pool.status.demand
    queued = [job.updated_at for job in (demand.jobs.values() if demand else ()) if job.state == "queued"]
    if queued:
        OLDEST_QUEUED.labels(*labels).set(min(queued).timestamp())
    else:
        with contextlib.suppress(KeyError):
            OLDEST_QUEUED.remove(*labels)


def forget_pool(namespace: str, pool: str) -> None:
    """A deleted pool's series must end, not linger at its last value."""
    for gauge in (POOL_DESIRED, POOL_READY, POOL_READY_CONDITION, OLDEST_QUEUED):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, pool)
