"""What both benchmarks compute from their samples."""

from __future__ import annotations

import statistics

__all__ = ["peak_overlap", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (1..99), inclusive method; one sample is every percentile."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most ``(start, end)`` spans open at one time (one ending as another starts: not both)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    peak = open_now = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak
