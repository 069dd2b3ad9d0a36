"""Per-pool gauges: what users alert on (desired vs. ready runner pods)."""

from __future__ import annotations

from prometheus_client import Gauge

POOL_DESIRED = Gauge(
    "runnerpool_pool_desired_replicas",
    "Runner pods a pool asks for (spec.replicas, or the autoscaling decision).",
    ["namespace", "pool"],
)
POOL_READY = Gauge(
    "runnerpool_pool_ready_replicas", "Runner pods of a pool that are ready.", ["namespace", "pool"]
)


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
