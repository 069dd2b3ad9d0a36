"""The operator's memory and CPU over a benchmark run, sampled from /proc by a thread of the bench.

The benchmarks already read the operator's totals (peak RSS, CPU seconds) at a few moments;
a plot over time shows what the totals hide: where start-up ends, how CPU follows the creates,
whether memory comes back after convergence. The thread reads two small /proc files of the
operator per sample (``stat`` for user+system ticks, ``status`` for ``VmRSS``), in the bench's
process, so the operator pays nothing and the bench about 0.1 ms of CPU per sample.

Times are seconds on the bench's ``time.perf_counter`` clock, from the moment given as ``zero``,
so that events the bench records on the same clock (pools created, all Ready) can be marked on
the plot (``mark``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["ProcessSampler", "Sample", "read_sample"]

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    #: Seconds since the sampler's zero.
    t: float
    #: User plus system CPU seconds the process has used so far.
    cpu_seconds: float
    rss_mib: float


def read_sample(pid: int, t: float) -> Sample:
    """One reading of ``pid``; raises ``OSError`` once the process is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICK
    rss_kib = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
                break
    return Sample(t, cpu, rss_kib / 1024)


class ProcessSampler:
    """Samples one process every ``interval`` seconds from ``start()`` until ``stop()`` or its exit."""

    def __init__(self, pid: int, interval: float = 0.5, zero: float | None = None) -> None:
        self.pid = pid
        self.interval = interval
        self.zero = time.perf_counter() if zero is None else zero
        self.samples: list[Sample] = []
        #: ``(seconds since zero, label)`` of what the bench did meanwhile.
        self.marks: list[tuple[float, str]] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sampler-{pid}", daemon=True)

    def start(self) -> ProcessSampler:
        self._thread.start()
        return self

    def mark(self, label: str, at: float | None = None) -> None:
        """Note an event at ``at`` (a ``perf_counter`` reading; now if ``None``)."""
        self.marks.append(((time.perf_counter() if at is None else at) - self.zero, label))

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            try:
                self.samples.append(read_sample(self.pid, time.perf_counter() - self.zero))
            except (OSError, ValueError, IndexError):
                return  # the process is gone (or a zombie without a status): nothing more to see
            if self._stopped.wait(self.interval):
                return

    def as_json(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "samples": [asdict(s) for s in self.samples],
            "marks": [{"t": t, "label": label} for t, label in self.marks],
        }
