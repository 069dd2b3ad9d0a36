"""What GitHub's answers say about the API budget, as Prometheus series.

Labelled by templated endpoint (bounded values) and by credential identity (never a token).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from runnerpool.github.types import RateLimit

__all__ = ["GITHUB_REQUESTS", "NO_ANSWER", "publish_budget"]

#: Label value for answers that never came (connection reset, timeout).
NO_ANSWER = "error"

GITHUB_REQUESTS = Counter(
    "runnerpool_github_requests",
    "GitHub API answers by templated endpoint, method and HTTP status (error: no answer). "
    "A 304 costs no rate-limit budget.",
    ["endpoint", "method", "status"],
)
RATE_LIMIT_REMAINING = Gauge(
    "runnerpool_github_rate_limit_remaining",
    "Requests left in the current rate-limit window, from the last x-ratelimit-remaining seen.",
    ["credential"],
)
RATE_LIMIT_LIMIT = Gauge(
    "runnerpool_github_rate_limit_limit",
    "Size of the rate-limit window, from the last x-ratelimit-limit seen.",
    ["credential"],
)
RATE_LIMIT_RESET = Gauge(
    "runnerpool_github_rate_limit_reset_timestamp_seconds",
    "Unix time at which the rate-limit window resets, from the last x-ratelimit-reset seen.",
    ["credential"],
)


def publish_budget(credential: str, budget: RateLimit) -> None:
    RATE_LIMIT_REMAINING.labels(credential).set(budget.remaining)
    RATE_LIMIT_LIMIT.labels(credential).set(budget.limit)
    RATE_LIMIT_RESET.labels(credential).set(budget.reset)
