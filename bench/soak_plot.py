"""The soak's picture: jobs over time above, operator RSS and CPU over time below (PNG).

Drawn with bench.plots' figures (matplotlib's object API on an Agg canvas, no pyplot state).
Disturbances are short ticks along the top of the jobs panel, so a jump in RSS or a pile
of queued jobs can be read against what was done to the world at that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import plots


def job_curves(events: Sequence[tuple[float, str, int]], until: float) -> dict[str, list[tuple[float, int]]]:
    """(t, action, job id) events -> step curves of queued, running and completed job counts."""
    state: dict[int, str] = {}
    curves: dict[str, list[tuple[float, int]]] = {"queued": [], "running": [], "completed": []}

    def point(t: float) -> None:
        values = list(state.values())
        curves["queued"].append((t, values.count("queued")))
        curves["running"].append((t, values.count("in_progress")))
        curves["completed"].append((t, values.count("completed")))

    point(0.0)
    for t, action, job in sorted(events):
        if state.get(job) == "completed":
            continue
        state[job] = action
        point(t)
    point(until)
    return curves


def draw(path: Path, report: dict[str, Any]) -> Path:
    """Write the PNG for a soak report (the JSON's dict) to ``path``."""
    samples = report["samples"]
    until = max([s["t"] for s in samples] or [1.0])
    curves = job_curves([tuple(e) for e in report["job_events"]], until)
    drawn, (jobs_ax, rss_ax) = plots.figure(2, 1, (11, 7), sharex=True)
    for name, curve in curves.items():
        xs, ys = zip(*curve, strict=True) if curve else ((), ())
        jobs_ax.step(xs, ys, where="post", label=name)
    top = max([y for c in curves.values() for _, y in c] or [1])
    for event in report["disturbances"]:
        jobs_ax.plot([event["t"]] * 2, [top * 1.02, top * 1.08], color="grey", linewidth=0.6)
    for start, end in report.get("settles", []):
        jobs_ax.axvspan(start, end, color="green", alpha=0.07)
        rss_ax.axvspan(start, end, color="green", alpha=0.07)
    jobs_ax.set_ylabel("jobs")
    jobs_ax.set_title(
        f"chaos soak, seed {report['options']['seed']}: jobs (ticks: disturbances, green: settles)"
    )
    jobs_ax.legend(loc="upper left")
    ts = [s["t"] for s in samples]
    for replica in report["replicas"]:
        rss_ax.plot(ts, [s["rss_mib"].get(replica) for s in samples], label=f"RSS {replica}")
    rss_ax.set_ylabel("operator RSS (MiB)")
    rss_ax.set_xlabel("seconds since the chaos began")
    cpu_ax = rss_ax.twinx()
    cpu_ax.plot(ts, [s["cpu_percent"] for s in samples], color="black", alpha=0.4, label="CPU (both)")
    cpu_ax.set_ylabel("operator CPU (% of one core)")
    handles, labels = rss_ax.get_legend_handles_labels()
    more_handles, more_labels = cpu_ax.get_legend_handles_labels()
    rss_ax.legend(handles + more_handles, labels + more_labels, loc="upper left")
    return plots.save(drawn, path, dpi=100)
