"""What both benchmarks compute from their samples."""

from __future__ import annotations

import statistics

__all__ = ["percentile"]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (1..99), inclusive method; one sample is every percentile."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]
