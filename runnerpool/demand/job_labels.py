"""Which ``repository`` and ``workflow`` labels a job's queue-wait and run-time observations get.

Repositories and workflows are the users', not the operator's: an organization pool may
serve thousands of repositories, and a workflow's name is whatever its file says. Each
distinct label set costs a histogram's series (``runnerpool.demand.metrics``: 16 per
histogram, two histograms), so they are bounded twice:

* ``--job-metrics-labels``: ``repository,workflow`` (default), ``repository`` (workflow
  left empty) or ``none`` (both empty; Prometheus drops empty labels, so the series are
  then one per pool, like ``runnerpool_job_pickup_latency_seconds``);
* ``--job-metrics-max-label-sets`` (default 50) distinct label sets per pool, first come
  first kept for the process's life. Past it, a new workflow of a repository that already
  has a label set is counted as ``workflow="other"``, a new repository as
  ``repository="other", workflow="other"``. A pool therefore has at most
  ``2 x cap + 1`` label sets (the cap, one ``other`` workflow for each repository in it,
  and the all-``other`` set): 101 by default, about 3,200 series at worst, and a handful
  for a pool whose repositories run a few workflows each (docs/operating.md has the sums).

The sets are counted per process: each replica keeps its own, so which workflow is folded
into ``other`` once a pool is past its cap may differ between replicas and restarts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from runnerpool.settings import DemandSettings

__all__ = ["OTHER", "JobLabels"]

#: What the label says for jobs past the cap.
OTHER = "other"

LabelSet = tuple[str, str]


class JobLabels:
    """The ``(repository, workflow)`` label values for a pool's jobs, bounded per pool."""

    def __init__(self, settings: DemandSettings | None = None) -> None:
        settings = settings or DemandSettings()
        mode = settings.job_metrics_labels
        self._repository = mode in ("repository,workflow", "repository")
        self._workflow = mode == "repository,workflow"
        self._cap = settings.job_metrics_max_label_sets
        self._lock = threading.Lock()
        self._sets: dict[tuple[str, str], set[LabelSet]] = {}

    def of(self, namespace: str, pool: str, repository: str, workflow: str | None) -> LabelSet:
        """The label values for a job of ``pool``; remembered, so that ``forget`` can end them."""
        wanted = (
            repository if self._repository else "",
            (workflow or "") if self._workflow else "",
        )
        with self._lock:
            sets = self._sets.setdefault((namespace, pool), set())
            if wanted in sets or len(sets) < self._cap:
                sets.add(wanted)
                return wanted
            known = any(repo == wanted[0] for repo, _ in sets)
            folded = (wanted[0] if known else OTHER, OTHER if self._workflow else "")
            sets.add(folded)
            return folded

    def forget(self, namespace: str, pool: str) -> Iterator[LabelSet]:
        """The label sets a deleted pool had; it starts afresh if it comes back."""
        with self._lock:
            sets = self._sets.pop((namespace, pool), set())
        yield from sorted(sets)
