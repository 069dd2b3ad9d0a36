"""What a runner pod's state means, defined once for the reconciler and the runner managers.

* **active**: counted against the pool's desired count: not being deleted and not finished
  (phase Succeeded or Failed), which is what a ReplicaSet counts too. A pod being deleted is
  not counted, so its replacement starts at once.
* **used up**: its runner has had its one job (or failed): the pod finished, or its runner
  container restarted or terminated. An ephemeral runner never takes a second job, so such a
  pod is replaced.
* **ready**: the kubelet says so (the pod's ``Ready`` condition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runnerpool.naming import JIT_SECRET_ANNOTATION, RUNNER_CONTAINER

__all__ = [
    "FINISHED_PHASES",
    "active",
    "counted",
    "is_used_up",
    "ready",
    "runner_started",
    "runner_status",
    "runs_as",
    "used_up",
]

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def counted(deleting: bool, phase: str | None) -> bool:
    """The active rule on a pod's two facts (see the module docstring)."""
    return not deleting and phase not in FINISHED_PHASES


def is_used_up(phase: str | None, runner_restarts: int, runner_terminated: bool) -> bool:
    """The used-up rule on a pod's facts (see the module docstring)."""
    return phase in FINISHED_PHASES or runner_restarts > 0 or runner_terminated


def active(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return counted(bool(meta.get("deletionTimestamp")), (pod.get("status") or {}).get("phase"))


def runner_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The runner container's status (``{}`` before the kubelet reports one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == RUNNER_CONTAINER), {})


def runner_started(pod: Mapping[str, Any]) -> bool:
    """The runner container has started, now or before (running, ended, or restarted)."""
    runner = runner_status(pod)
    state = runner.get("state") or {}
    return "running" in state or "terminated" in state or int(runner.get("restartCount") or 0) > 0


def used_up(pod: Mapping[str, Any]) -> bool:
    runner = runner_status(pod)
    phase = (pod.get("status") or {}).get("phase")
    return is_used_up(
        phase, int(runner.get("restartCount") or 0), "terminated" in (runner.get("state") or {})
    )


def ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def runs_as(pod: Mapping[str, Any], account: str) -> bool:
    """A pod that has not finished and runs as ServiceAccount ``account``."""
    phase = (pod.get("status") or {}).get("phase")
    return (pod.get("spec") or {}).get("serviceAccountName") == account and phase not in FINISHED_PHASES


def jit_secret_name(pod: Mapping[str, Any]) -> str | None:
    """The pod's own JIT Secret (its annotation); ``None`` for a token-mode pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(JIT_SECRET_ANNOTATION)
    return str(name) if name else None


def jit_secret_names(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The JIT Secrets of ``pods`` (token-mode pods have none)."""
    return [name for name in map(jit_secret_name, pods) if name is not None]
