"""Demand metrics: queued and busy jobs per pool, pickup latency, job duration, deliveries.

Pickup latency (``created_at`` -> ``started_at``) and duration (``started_at`` ->
``completed_at``) come from GitHub's own timestamps in the job, observed by the replica
whose write moved the job forward, so each job is observed once whichever replica (or the
poller) learnt of it. They are labelled with the pool whose runner took the job.

"Once" across replicas: a transition (queued -> in_progress, -> completed) is written to
``status.demand`` with the pool's ``resourceVersion`` as precondition (``writer``), so of
two replicas (or a replica and the poller) that learn of it, one write moves the job and
the other finds it already moved and writes nothing. Only the process whose write succeeded
observes, so the sum over all replicas' series counts each job once; a replica that
crashes between its write and its observation loses that one observation.

The same observations are also made per repository and workflow (``QUEUE``, ``RUN``), with
the labels ``job_labels.JobLabels`` bounds: the pool-only histograms stay as the cheap view
that the per-pool alert and panels use, the labelled ones answer "which workflow waits".
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from contextlib import suppress
from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram

from runnerpool import api
from runnerpool.demand.job_labels import JobLabels
from runnerpool.demand.rules import Transition
from runnerpool.github.jobs import Job

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


def _by_workflow(name: str, what: str, buckets: tuple[float, ...]) -> Histogram:
    """A job histogram with the bounded ``repository`` and ``workflow`` labels (``job_labels``)."""
    return Histogram(
        name,
        f"{what} (GitHub's timestamps), by repository and workflow (--job-metrics-labels; past "
        "the per-pool cap, 'other').",
        ["namespace", "pool", "repository", "workflow"],
        buckets=buckets,
    )


#: CI waits: seconds for a warm pool, minutes for one scaling from zero, hours for a pool at
#: its maximum; GitHub cancels a job queued for 24 hours. 600 and 900 are the alert's neighbours.
QUEUE = _by_workflow(
    "runnerpool_job_queue_seconds",
    "From a job being queued to a runner of the pool starting it",
    (5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 10800, 86400),
)
#: CI runs: under a minute for a lint, hours for a build; GitHub ends a self-hosted job at 5 days.
RUN = _by_workflow(
    "runnerpool_job_run_seconds",
    "How long jobs ran on a pool's runners",
    (30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600, 86400, 432000),
)
DELIVERIES = Counter(
    "runnerpool_webhook_deliveries",
    "Webhook deliveries by event and outcome (accepted, duplicate, ignored, unsigned, "
    "bad_signature, too_large, invalid, stale (a replay or a late delivery: counted nothing), failed).",
    ["event", "result"],
)
DELIVERY_POOLS = Histogram(
    "runnerpool_webhook_delivery_pools",
    "Pools a verified workflow_job delivery was recorded on: 1 for a queued job (one pool counts "
    "it), 0 when none it matches trusts the secret that signed it.",
    buckets=(0, 1, 2, 5, 10, 20, 50, 100),
)


def observe(
    pool: api.RunnerPool,
    demand: api.Demand,
    moved: Iterable[Transition],
    runners: Container[str],
    job_labels: JobLabels,
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
            waited = _seconds(job.created_at, job.started_at)
            PICKUP.labels(*labels).observe(waited)
            QUEUE.labels(*labels, *_job_labels(job_labels, pool, job)).observe(waited)
        if step.state == "completed" and job.started_at and job.completed_at:
            ran = _seconds(job.started_at, job.completed_at)
            DURATION.labels(*labels).observe(ran)
            RUN.labels(*labels, *_job_labels(job_labels, pool, job)).observe(ran)


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def _job_labels(job_labels: JobLabels, pool: api.RunnerPool, job: Job) -> tuple[str, str]:
    return job_labels.of(pool.namespace, pool.name, job.repository, job.workflow)


def forget_pool(namespace: str, pool: str, job_labels: JobLabels) -> None:
    """A deleted pool's series end instead of lingering at their last value."""
    for metric in (QUEUED, BUSY, PICKUP, DURATION):
        with suppress(KeyError):
            metric.remove(namespace, pool)
    for repository, workflow in job_labels.forget(namespace, pool):
        for metric in (QUEUE, RUN):
            with suppress(KeyError):
                metric.remove(namespace, pool, repository, workflow)
