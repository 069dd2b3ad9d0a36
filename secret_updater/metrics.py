"""Prometheus series for registration-token refreshes.

Labels are the pool's namespace and name (plus the failure reason), never anything derived
from a token. Series are removed when a pool's job stops so deleted pools do not linger on
dashboards.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

__all__ = ["TOKEN_EXPIRY", "TOKEN_FAILURES", "TOKEN_FILLS", "forget_pool"]

TOKEN_FILLS = Counter(
    "runnerpool_token_fills_total",
    "Registration tokens written into a pool's token Secret.",
    ["namespace", "pool"],
)

TOKEN_FAILURES = Counter(
    "runnerpool_token_failures_total",
    "Failed attempts to refresh a pool's registration token, by reason.",
    ["namespace", "pool", "reason"],
)

TOKEN_EXPIRY = Gauge(
    "runnerpool_token_expiry_timestamp_seconds",
    "Unix time at which the registration token in a pool's Secret expires.",
    ["namespace", "pool"],
)


def forget_pool(namespace: str, pool: str, reasons: set[str]) -> None:
    """Drop every series of one pool; ``reasons`` are the failure reasons it has reported."""
    TOKEN_FILLS.remove(namespace, pool)
    TOKEN_EXPIRY.remove(namespace, pool)
    for reason in reasons:
        TOKEN_FAILURES.remove(namespace, pool, reason)
