"""Per-pool gauges: what users alert on (desired vs. ready runner pods, Ready, waiting jobs).

Set by the leader's reconciler on every pass from the status it computes, so they follow the
pool's own status (``status.demand`` included), whichever replica recorded the demand.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from prometheus_client import Gauge

from runnerpool import api, conditions
from runnerpool.pods.failures import REPORTED, Failing
from runnerpool.reasons import ConditionType

#: Set by the operator image's build (``--build-arg COMMIT=...``, see its Dockerfile).
COMMIT_ENV = "RUNNERPOOL_BUILD_COMMIT"
UNKNOWN = "unknown"

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
RUNNER_PODS_FAILING = Gauge(
    "runnerpool_runner_pods_failing",
    "Runner pods of a pool stuck before their runner can run, by reason (ImagePullBackOff, "
    "CrashLoopBackOff, CreateContainerConfigError, ExitedAtStart, RunnerVersionOutdated (GitHub "
    "refuses the runner image's version), ...: docs/troubleshooting.md); no series while none is.",
    ["namespace", "pool", "reason"],
)
#: 1 with the build in its labels, as Prometheus' own ``*_build_info`` series: a dashboard shows
#: which build runs, and a query joins it onto other series (``on (instance) group_left``).
BUILD_INFO = Gauge(
    "runnerpool_build_info",
    "Always 1: the operator's version, the commit it was built from, its Python and kubernetes client.",
    ["version", "commit", "python", "kubernetes_client"],
)


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return UNKNOWN


def build_info(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The labels of ``runnerpool_build_info``.

    The commit comes from the environment because it is the one source both ways of running
    have: the image's build cannot see ``.git`` (its context holds only the sources) but
    takes a build argument into ``ENV``, and an editable install has nothing built at all;
    without the variable the commit is ``unknown`` rather than a guess.
    """
    return {
        "version": _distribution_version("runnerpool-operator"),
        "commit": environ.get(COMMIT_ENV, "").strip() or UNKNOWN,
        "python": platform.python_version(),
        "kubernetes_client": _distribution_version("kubernetes"),
    }


def publish_build_info() -> None:
    BUILD_INFO.clear()
    BUILD_INFO.labels(**build_info()).set(1)


def observe_pool(pool: api.RunnerPool, status: dict[str, Any], failing: Iterable[Failing] = ()) -> None:
    """``status``: the status the reconciler computed for ``pool`` in this pass; ``failing``: its
    stuck pods, as counted for that status."""
    labels = (pool.namespace, pool.name)
    stuck = {f.reason: f.pods for f in failing}
    for reason in REPORTED:
        if reason in stuck:
            RUNNER_PODS_FAILING.labels(*labels, reason).set(stuck[reason])
        else:
            with contextlib.suppress(KeyError):
                RUNNER_PODS_FAILING.remove(*labels, reason)
    POOL_DESIRED.labels(*labels).set(status["desiredReplicas"])
    POOL_READY.labels(*labels).set(status["readyReplicas"])
    ready = conditions.find(status["conditions"], ConditionType.READY)
    POOL_READY_CONDITION.labels(*labels).set(1 if ready is not None and ready["status"] == "True" else 0)
    demand = pool.status.demand
    jobs = demand.jobs.values() if demand else ()
    queued = [job.updated_at for job in jobs if job.state == "queued" and not job.unconfirmed]
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
    for reason in REPORTED:
        with contextlib.suppress(KeyError):
            RUNNER_PODS_FAILING.remove(namespace, pool, reason)


# A constant of the process, exported from import on, as prometheus-client's ``python_info``.
publish_build_info()
