"""CPU per watch event: the library's ``Watch`` against ``SingleDecodeWatch`` (issue 32).

Every pod, Secret and pool event the operator's informers receive goes through
``unmarshal_event``. The library's parses the line, serialises the object again and parses
that copy; ours parses once. The events here are the operator's own runner pods (built by
``runnerpool.pods.template.runner_pod``, with a status as the kubelet writes it), so the
bytes per event are what a burst of pod creations delivers.

    python -m bench.watch_decode [--events 5000] [--repeat 5]

Prints a table, writes ``bench/results/watch_decode-<time>.json`` and adds a row to the
history (``bench/history.jsonl``). CPU is the process's (``time.process_time``), best of
``--repeat`` rounds, so other work on the machine moves it less than wall time.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.watch import Watch

from bench import history
from runnerpool import api
from runnerpool.pods import template
from runnerpool.runtime.listwatch import SingleDecodeWatch

RESULTS = Path(__file__).parent / "results"


def _event_lines(count: int) -> list[str]:
    pool = api.RunnerPool.model_validate(
        {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {"name": "burst", "namespace": "ci", "uid": "u-1", "generation": 1},
            "spec": {"organization": "octo-org", "labels": ["linux", "x64"]},
        }
    )
    pod = template.runner_pod(pool, "ghcr.io/actions/actions-runner:2.336.0", "https://api.github.com")
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": t, "status": "True"} for t in ("Initialized", "Ready", "PodScheduled")],
        "containerStatuses": [
            {"name": "runner", "ready": True, "restartCount": 0, "state": {"running": {}}},
        ],
    }
    lines = []
    for i in range(count):
        pod["metadata"] = {**pod.get("metadata", {}), "name": f"burst-{i}", "resourceVersion": str(1000 + i)}
        lines.append(json.dumps({"type": "MODIFIED", "object": pod}))
    return lines


def _cpu(make: type[Watch], lines: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        watch = make()
        start = time.process_time()
        for line in lines:
            watch.unmarshal_event(line, object)
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = _event_lines(args.events)
    size = sum(len(line) for line in lines) / len(lines)
    library = _cpu(Watch, lines, args.repeat)
    ours = _cpu(SingleDecodeWatch, lines, args.repeat)
    figures: dict[str, Any] = {
        "event_bytes": round(size),
        "library_us_per_event": round(library / args.events * 1e6, 1),
        "single_decode_us_per_event": round(ours / args.events * 1e6, 1),
        "saved_percent": round((1 - ours / library) * 100, 1),
    }
    print(f"{args.events} pod events of {figures['event_bytes']} bytes, best of {args.repeat}")
    print(f"{'watch':<16}{'CPU µs/event':>14}")
    print(f"{'library':<16}{figures['library_us_per_event']:>14}")
    print(f"{'single decode':<16}{figures['single_decode_us_per_event']:>14}")
    print(f"saved: {figures['saved_percent']} %")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    load = {"events": args.events, "repeat": args.repeat}
    (RESULTS / f"watch_decode-{stamp}.json").write_text(
        json.dumps({"load": load, "figures": figures}, indent=2)
    )
    history.append("watch_decode", load, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
