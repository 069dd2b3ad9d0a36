"""``bench/history.jsonl``: one line per benchmark run, kept in the repository.

Seconds measured on a shared machine move with its load, so one run proves little; a row
per run, with the commit it measured, the machine it ran on and the load it offered, shows
a trend and lets a later run be set beside an earlier one at the same load. The JSON files
in ``bench/results/`` keep every detail and are not committed; the history keeps the
figures and is (commit the rows of the runs a change is judged by).

A row: ``time`` (UTC), ``bench`` (which script), ``commit`` (``git describe --always
--dirty`` of the tree measured), ``machine`` (cores, CPU model, Python, load average at the
end), ``load`` (what was offered: pools, rates, durations) and ``figures`` (what was
measured, the script's names and units). ``python -m bench.history`` prints the rows.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["HISTORY", "append", "machine", "rows"]

HISTORY = Path(__file__).parent / "history.jsonl"
ROOT = Path(__file__).parent.parent


def _commit() -> str:
    """``$BENCH_COMMIT`` when set (a tree measured outside a checkout, e.g. a ``before``
    exported with ``git archive``), else ``git describe`` of this tree."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=10"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "model": _cpu_model(),
        "arch": platform.machine(),
        "python": sys.version.split()[0],
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


def append(bench: str, load: dict[str, Any], figures: dict[str, Any], path: Path = HISTORY) -> dict[str, Any]:
    """Add one run's row; returns it."""
    row = {
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "bench": bench,
        "commit": _commit(),
        "machine": machine(),
        "load": load,
        "figures": figures,
    }
    with path.open("a") as out:
        out.write(json.dumps(row, sort_keys=True) + "\n")
    print(f"history: added a row to {path}")
    return row


def rows(path: Path = HISTORY) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    for row in rows():
        figures = ", ".join(f"{key} {value}" for key, value in row["figures"].items())
        print(f"{row['time']} {row['bench']} {row['commit']} ({row['machine']['cores']} cores): {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
