"""Per-pool gauges: what users alert on (desired vs. ready runner pods)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from importlib import metadata

from prometheus_client import Gauge

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


def observe_pool(namespace: str, pool: str, desired: int, ready: int) -> None:
    POOL_DESIRED.labels(namespace, pool).set(desired)
    POOL_READY.labels(namespace, pool).set(ready)


def forget_pool(namespace: str, pool: str) -> None:
    """A deleted pool's series must end, not linger at its last value."""
    for gauge in (POOL_DESIRED, POOL_READY):
        try:
            gauge.remove(namespace, pool)
        except KeyError:
            continue


# A constant of the process, exported from import on, as prometheus-client's ``python_info``.
publish_build_info()
