"""Prometheus series of the runner managers.

Labelled by pool (namespace, name) or scope, never by anything from a credential. A pool's
series go when the pool does, so deleted pools do not linger on dashboards. The GitHub
request and rate-limit series live in ``runnerpool.github.metrics``, next to the answers they
count.
"""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge

from runnerpool import api

__all__ = [
    "LISTING_FAILURES",
    "PODS_REPLACED",
    "RUNNERS",
    "RUNNERS_COLLECTED",
    "SYNC_DELAY",
    "forget_pool",
    "forget_scope",
    "publish_counts",
]

STATES = ("online", "busy", "offline")

RUNNERS = Gauge(
    "runnerpool_runners",
    "Runners GitHub lists for a pool, by state (online means online and idle).",
    ["namespace", "pool", "state"],
)
RUNNERS_COLLECTED = Counter(
    "runnerpool_runners_collected",
    "Offline runners without a pod, or whose pod is terminating, that were deleted from GitHub.",
    ["namespace", "pool"],
)
PODS_REPLACED = Counter(
    "runnerpool_runner_pods_replaced",
    "Runner pods taken away by the runner managers, by reason (RunnerFinished, "
    "RunnerRestarted, RecreateDeadline, RegistrationTimeout, Outdated, ScaleDown).",
    ["namespace", "pool", "reason"],
)
SYNC_DELAY = Gauge(
    "runnerpool_runner_sync_delay_seconds",
    "Seconds until a scope's next runner listing; above the interval while the budget is low "
    "or GitHub asked to wait.",
    ["scope"],
)
LISTING_FAILURES = Counter(
    "runnerpool_runner_listing_failures",
    "Runner listings of a scope that failed, by reason.",
    ["scope", "reason"],
)

_REPLACE_REASONS = ("RunnerFinished", "RunnerRestarted", "RecreateDeadline")


def publish_counts(namespace: str, pool: str, counts: api.RunnerCounts) -> None:
    for state in STATES:
        RUNNERS.labels(namespace, pool, state).set(getattr(counts, state))


def forget_pool(namespace: str, pool: str) -> None:
    for state in STATES:
        with contextlib.suppress(KeyError):
            RUNNERS.remove(namespace, pool, state)
    with contextlib.suppress(KeyError):
        RUNNERS_COLLECTED.remove(namespace, pool)
    for reason in _REPLACE_REASONS:
        with contextlib.suppress(KeyError):
            PODS_REPLACED.remove(namespace, pool, reason)


def forget_scope(scope: str) -> None:
    with contextlib.suppress(KeyError):
        SYNC_DELAY.remove(scope)
