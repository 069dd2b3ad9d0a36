"""Demand metrics: queued and busy jobs per pool, pickup latency, job duration, deliveries.

Pickup latency (``created_at`` -> ``started_at``) and duration (``started_at`` ->
``completed_at``) come from GitHub's own timestamps in the job, observed by the replica
whose write moved the job forward, so each job is observed once whichever replica (or the
poller) learnt of it. They are labelled with the pool whose runner took the job.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from prometheus_client import Counter, Gauge, Histogram

from runnerpool import api
from runnerpool.demand.rules import Transition

QUEUED = Gauge(
    "runnerpool_pool_queued_jobs",
    "Queued jobs a pool's labels match (status.demand.queued).",
    ["namespace", "pool"],
)
BUSY = Gauge(
    "runnerpool_pool_busy_jobs",
    "Jobs in progress on a pool's runners (status.demand.busy).",
    ["namespace", "pool"],
)
PICKUP = Histogram(
    "runnerpool_job_pickup_latency_seconds",
    "From a job being queued to a runner of the pool starting it (GitHub's timestamps).",
    ["namespace", "pool"],
    buckets=(1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
)
DURATION = Histogram(
    "runnerpool_job_duration_seconds",
    "How long jobs ran on a pool's runners (GitHub's timestamps).",
    ["namespace", "pool"],
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600),
)
DELIVERIES = Counter(
    "runnerpool_webhook_deliveries",
    "Webhook deliveries by event and outcome (accepted, duplicate, ignored, unsigned, "
    "bad_signature, too_large, invalid, stale (a replay, changed nothing), failed).",
    ["event", "result"],
)
DELIVERY_POOLS = Histogram(
    "runnerpool_webhook_delivery_pools",
    "Pools a verified workflow_job delivery was recorded on: 1 for a queued job (one pool counts "
    "it), 0 when none it matches trusts the secret that signed it.",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100),
)


def observe(
    pool: api.RunnerPool, demand: api.Demand, moved: Iterable[Transition], runners: Container[str]
) -> None:
    """``runners``: the names of the pool's runners (its pods' names)."""
    labels = (pool.namespace, pool.name)
    QUEUED.labels(*labels).set(demand.queued)
    BUSY.labels(*labels).set(demand.busy)
    for step in moved:
        job = step.job
        ours = job.runner_name is not None and job.runner_name in runners
        if not ours:
            continue
        if step.state == "in_progress" and job.created_at and job.started_at:
            PICKUP.labels(*labels).observe(max(0.0, (job.started_at - job.created_at).total_seconds()))
        if step.state == "completed" and job.started_at and job.completed_at:
            DURATION.labels(*labels).observe(max(0.0, (job.completed_at - job.started_at).total_seconds()))


def forget_pool(namespace: str, pool: str) -> None:
    """A deleted pool's series end instead of lingering at their last value."""
    for metric in (QUEUED, BUSY, PICKUP, DURATION):
        try:
            metric.remove(namespace, pool)
        except KeyError:
            continue
