"""How many runner pods a pool has, and how many to create: pure rules.

The capacity rule of a rollout (and of every scale-up): **surge, never take capacity away
first.**  ``maxUnavailable`` is 0 and ``maxSurge`` is 25 % of ``spec.replicas`` rounded up,
at least 1 — a Deployment's defaults, except that none of the pool's capacity is given up
for speed: a runner pool is most needed exactly when a rollout happens to run (jobs
queue while pods start).  So:

* the reconciler creates pods with the current template while fewer than ``replicas`` run
  it, but never more than ``replicas + maxSurge`` pods in all (``creates``);
* the runner managers retire one outdated idle pod for each pod above ``replicas``, and
  only while at least ``replicas`` pods have a registered runner
  (``runnerpool.runners.retirement``), so the pool never has fewer ready runners than
  asked for because of a rollout;
* a busy outdated pod keeps its job and its place until the job ends (then it is used up
  and goes like every finished pod); until then it holds a surge slot.

Both sides count pods the same way (``runnerpool.pods.state.active``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runnerpool.naming import TEMPLATE_HASH_LABEL
from runnerpool.pods.failures import Failing
from runnerpool.pods.state import active, ready, used_up

__all__ = ["SURGE_FRACTION", "PodCounts", "count", "creates", "max_surge"]

SURGE_FRACTION = 0.25


def pod_hash(pod: Mapping[str, Any]) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(TEMPLATE_HASH_LABEL)
    return str(value) if value else None


def max_surge(replicas: int) -> int:
    """Pods a rollout may add above ``replicas``: 25 % rounded up, at least 1 (0 at 0)."""
    if replicas <= 0:
        return 0
    return max(1, math.ceil(replicas * SURGE_FRACTION))


@dataclass(frozen=True)
class PodCounts:
    """A pool's pods as status reports them (``pending`` creates count as active and updated)."""

    desired: int
    active: int = 0
    ready: int = 0
    updated: int = 0
    #: Pods that are used up (``runnerpool.pods.state``) and not being deleted yet: the runner
    #: managers replace them.
    used_up: int = 0
    #: Active pods stuck before their runner can run, by reason (``runnerpool.pods.failures``).
    failing: tuple[Failing, ...] = ()
    #: Of the ready pods, those with the current template (a rollout's old pods do not say
    #: that the new template's runners start).
    ready_updated: int = 0

    @property
    def outdated(self) -> int:
        return self.active - self.updated

    @property
    def surplus(self) -> int:
        return max(0, self.active - self.desired)


def count(
    pods: Iterable[Mapping[str, Any]],
    desired: int,
    wanted: str,
    pending: int = 0,
    failing: tuple[Failing, ...] = (),
) -> PodCounts:
    """``pending``: pods created but not yet in the cache (see ``expectations``); ``failing``: the
    stuck ones (``failures.judge``, which needs the reconciler's clock)."""
    live = list(pods)
    running = [p for p in live if active(p)]
    return PodCounts(
        desired=desired,
        active=len(running) + pending,
        ready=sum(1 for p in running if ready(p)),
        updated=sum(1 for p in running if pod_hash(p) == wanted) + pending,
        used_up=sum(1 for p in live if used_up(p) and not (p.get("metadata") or {}).get("deletionTimestamp")),
        failing=failing,
        ready_updated=sum(1 for p in running if ready(p) and pod_hash(p) == wanted),
    )


def creates(counts: PodCounts) -> int:
    """Pods with the current template to create now (see the module docstring)."""
    missing = counts.desired - counts.updated
    room = counts.desired + max_surge(counts.desired) - counts.active
    return max(0, min(missing, room))
