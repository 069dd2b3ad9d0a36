"""PNG plots of benchmark results, shared by bench.run, bench.demand and the soak.

A table gives p50 and p99; a plot shows the shape behind them: a tail of a few slow pools, a
plateau where the workers wait, memory that does not come back. Each function takes plain
data (what the benchmarks write to their JSON, so a plot can be redrawn from an old result)
and writes one PNG.

matplotlib's object API with the Agg canvas: no display, no pyplot global state, so a plot can
be drawn from any thread of a benchmark. Small files (``DPI``): they are committed beside the
README's figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.stats import percentile

__all__ = ["DPI", "convergence", "figure", "latency", "resources", "save"]

#: 8 x 4.5 inches at 80 dpi: 640 x 360 pixels, a few tens of KiB per plot.
DPI = 80
SIZE = (8.0, 4.5)
#: Histograms never get more bins than this, however many samples.
MAX_BINS = 40


def figure(
    rows: int = 1, cols: int = 1, size: tuple[float, float] = SIZE, *, sharex: bool = False
) -> tuple[Figure, list[Axes]]:
    """A figure on its own Agg canvas: no pyplot state, so threads may draw at once."""
    drawn = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(drawn)
    axes = drawn.subplots(rows, cols, squeeze=False, sharex=sharex)
    return drawn, [a for row in axes for a in row]


def save(drawn: Figure, path: Path, dpi: int = DPI) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn.savefig(path, dpi=dpi, format="png")
    return path


def _marks(ax: Axes, marks: Sequence[Mapping[str, Any]]) -> None:
    for mark in marks:
        ax.axvline(mark["t"], color="grey", linestyle=":", linewidth=1)
        ax.annotate(
            mark["label"],
            (mark["t"], 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=7,
            color="dimgrey",
        )


def convergence(
    path: Path, series: Mapping[str, Sequence[float]], *, title: str, total: int | None = None
) -> Path:
    """How many pools reached each state over time: ``series`` maps a state ("token", "Ready")
    to the seconds, from the first create, at which each pool first reached it."""
    drawn, (ax,) = figure()
    for label, times in series.items():
        ordered = sorted(times)
        # From (0, 0): a step up at each pool's time.
        ax.step([0.0, *ordered], range(len(ordered) + 1), where="post", label=f"{label} ({len(ordered)})")
    if total is not None:
        ax.axhline(total, color="grey", linestyle="--", linewidth=1, label=f"{total} pools")
    ax.set(title=title, xlabel="seconds since the first create", ylabel="pools")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return save(drawn, path)


def latency(
    path: Path, series: Mapping[str, Sequence[float]], *, title: str, xlabel: str = "seconds"
) -> Path:
    """Histogram (left) and ECDF (right) of each series of latencies, p50 and p99 in the legend."""
    drawn, (hist, ecdf) = figure(1, 2)
    present = {label: list(values) for label, values in series.items() if values}
    everything = [v for values in present.values() for v in values]
    if everything:
        edges = np.histogram_bin_edges(everything, bins="auto")
        if len(edges) > MAX_BINS + 1:
            edges = np.linspace(min(everything), max(everything), MAX_BINS + 1)
        for label, values in present.items():
            ordered = sorted(values)
            p50, p99 = percentile(ordered, 50), percentile(ordered, 99)
            legend = f"{label}: p50 {p50:.2f}, p99 {p99:.2f} (n={len(ordered)})"
            hist.hist(ordered, bins=edges, alpha=0.55, label=legend)
            fraction = np.arange(1, len(ordered) + 1) / len(ordered)
            # From 0 at the first sample: a series of one job is a visible step too.
            ecdf.step([ordered[0], *ordered], [0.0, *fraction], where="post", label=label)
    hist.set(xlabel=xlabel, ylabel="count")
    ecdf.set(xlabel=xlabel, ylabel="fraction at or below", ylim=(0, 1.02))
    for ax in (hist, ecdf):
        ax.grid(alpha=0.3)
    if everything:
        hist.legend(fontsize=7)
        ecdf.legend(fontsize=7, loc="lower right")
    drawn.suptitle(title)
    return save(drawn, path)


def resources(
    path: Path,
    samples: Sequence[Mapping[str, float]],
    *,
    title: str,
    marks: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Resident memory (top) and CPU (bottom, cores in use between two samples) over time.

    ``samples`` are :class:`bench.sampler.Sample` as dicts (``t``, ``cpu_seconds``, ``rss_mib``);
    ``marks`` (``t``, ``label``) are what the bench did, drawn as dotted lines on both.
    """
    drawn, (memory, cpu) = figure(2, 1, (SIZE[0], SIZE[1] * 1.2))
    times = [s["t"] for s in samples]
    memory.plot(times, [s["rss_mib"] for s in samples], color="tab:blue")
    if len(samples) > 1:
        rates = [
            (b["cpu_seconds"] - a["cpu_seconds"]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0
            for a, b in itertools.pairwise(samples)
        ]
        # Each rate belongs to the interval that ends at its sample.
        cpu.step(times[1:], rates, where="pre", color="tab:red")
    memory.set(ylabel="RSS (MiB)", title=title)
    memory.set_ylim(bottom=0)
    cpu.set(ylabel="CPU (cores)", xlabel="seconds")
    cpu.set_ylim(bottom=0)
    for ax in (memory, cpu):
        ax.grid(alpha=0.3)
        ax.set_xlim(left=0)
        _marks(ax, marks)
    return save(drawn, path)
