"""The benchmarks' plots, from small synthetic results: no benchmark runs here.

What a reader of bench/results/ notices is a PNG that opens and shows a plot, drawn from the
JSON the benchmark wrote; and that the resource samples the plots are drawn from are the
process's own figures.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import image

from bench import demand, plots, run
from bench.sampler import ProcessSampler
from tests.helpers import wait_for

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _picture(path: Path) -> np.ndarray[Any, Any]:
    """The PNG's pixels; fails unless it is a PNG with more than a blank page in it."""
    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    pixels: np.ndarray[Any, Any] = image.imread(str(path))
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20, f"{path} is (nearly) blank"
    return pixels


def _samples(seconds: int) -> list[dict[str, float]]:
    return [{"t": t * 0.5, "cpu_seconds": t * 0.1, "rss_mib": 60 + t % 7} for t in range(seconds * 2)]


def test_bench_run_plots_from_its_json(tmp_path: Path) -> None:
    rng = random.Random(1)
    tokens = [rng.uniform(0.2, 3.0) for _ in range(20)]
    result: dict[str, Any] = {
        "pools": 20,
        "series": {
            "token_seconds": tokens,
            "ready_seconds": [t + rng.uniform(0.5, 2.0) for t in tokens],
            "token_at": [rng.uniform(0.5, 4.0) for _ in range(20)],
            "ready_at": [rng.uniform(1.0, 6.0) for _ in range(20)],
            "resources": {
                "interval": 0.5,
                "samples": _samples(30),
                "marks": [{"t": 2.0, "label": "creates"}, {"t": 8.0, "label": "all Ready"}],
            },
        },
    }

    written = run.write_plots(result, tmp_path / "bench-20261201T000000Z")

    assert [p.name for p in written] == [
        "bench-20261201T000000Z-N20-convergence.png",
        "bench-20261201T000000Z-N20-latency.png",
        "bench-20261201T000000Z-N20-resources.png",
    ]
    height, width, _ = _picture(written[1]).shape
    assert (width, height) == (plots.SIZE[0] * plots.DPI, plots.SIZE[1] * plots.DPI)
    for path in written:
        _picture(path)
        assert path.stat().st_size < 150_000, "small enough to commit"


def test_bench_run_plots_a_size_that_did_not_converge(tmp_path: Path) -> None:
    """No pool Ready and no samples (the operator never started): the plots still come."""
    result = {"pools": 5, "series": {"token_seconds": [1.0], "ready_seconds": [], "token_at": [1.0]}}
    written = run.write_plots(result, tmp_path / "bench-x")
    assert [p.name for p in written] == ["bench-x-N5-convergence.png", "bench-x-N5-latency.png"]
    for path in written:
        _picture(path)


def test_bench_demand_plots_from_its_json(tmp_path: Path) -> None:
    bursts = [
        {"mode": mode, "jobs": jobs, "pickups": [1.0 + 0.1 * i for i in range(jobs)]}
        for mode in ("webhooks", "polling")
        for jobs in (1, 10)
    ]
    modes = [
        {"mode": "webhooks", "resources": {"interval": 0.5, "samples": _samples(10), "marks": []}},
        {"mode": "polling", "resources": {}},
    ]

    written = demand.write_plots(bursts, modes, tmp_path)

    assert [p.name for p in written] == ["pickup.png", "resources-webhooks.png"]
    for path in written:
        _picture(path)


def test_the_sampler_reads_the_process_as_proc_shows_it() -> None:
    sampler = ProcessSampler(os.getpid(), interval=0.01).start()
    sum(i * i for i in range(300_000))  # some CPU between the samples
    wait_for(lambda: len(sampler.samples) >= 3, message="three samples")
    sampler.mark("now")
    sampler.stop()

    taken = sampler.as_json()
    first, last = taken["samples"][0], taken["samples"][-1]
    assert first["t"] < last["t"]
    now = os.times()
    # Both count whole clock ticks (1/100 s); the float sum of two of them may fall short by 1e-14.
    assert first["cpu_seconds"] <= last["cpu_seconds"] <= round(now.user + now.system, 2)
    assert 1 < last["rss_mib"] < 4096
    assert taken["marks"][0]["label"] == "now"
    assert taken["marks"][0]["t"] >= last["t"] - 1


def test_the_sampler_stops_when_the_process_is_gone() -> None:
    no_such_pid = 2**22 + 12345  # above the largest pid_max
    sampler = ProcessSampler(no_such_pid, interval=0.01).start()
    wait_for(lambda: not sampler._thread.is_alive(), message="the sampler to give up")
    assert sampler.samples == []


def test_plots_are_drawn_again_from_an_earlier_result(tmp_path: Path) -> None:
    """``--plot`` runs no benchmark: it redraws a committed result's plots beside its JSON."""
    earlier = tmp_path / "bench-earlier.json"
    earlier.write_text(json.dumps({"results": [{"pools": 3, "series": {"token_at": [0.1, 0.2, 0.3]}}]}))
    assert run.main(["--plot", str(earlier)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "bench-earlier-N3-convergence.png",
        "bench-earlier-N3-latency.png",
    ]

    found = tmp_path / "demand-earlier" / "demand.json"
    found.parent.mkdir()
    found.write_text(
        json.dumps({"bursts": [{"mode": "webhooks", "jobs": 2, "pickups": [1.0, 2.0]}], "modes": []})
    )
    assert demand.main(["--plot", str(found)]) == 0
    _picture(found.parent / "pickup.png")
