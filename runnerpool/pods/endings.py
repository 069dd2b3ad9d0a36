"""Runner pods that ended badly: killed for memory, or taken away with a job on them.

A pod whose runner ended is replaced by the runner managers without a word (one job per pod:
``runnerpool.runners.lifecycle``). Two endings are news for the platform team, because a job
was or may be lost, and GitHub shows its users only "The runner has received a shutdown
signal" or "lost communication with the server":

* ``RunnerOOMKilled``: a container of the pod (the runner, the dind daemon, a sidecar of the
  template) was killed by the kernel for passing its memory limit (its ``state`` or, once
  the kubelet restarted it, ``lastState`` says ``OOMKilled``). Always told: an idle runner
  does not run out of memory, so a job did.
* ``RunnerPodDisrupted``: the pod was taken away while marked busy (``naming.BUSY_LABEL``):
  the kubelet evicted it under node pressure, the scheduler preempted it, the taint manager
  or the pod garbage collector deleted it. Kubernetes says so in the pod's
  ``DisruptionTarget`` condition (its reason and message), and a kubelet eviction also in
  ``status.reason: Evicted``. The eviction API refuses a busy pod (the busy-runner
  PodDisruptionBudget), but these paths do not ask it. The pod gets SIGTERM and its runner
  finishes the job within the grace period it is given (``docs/busy-runners.md``), which a
  kubelet's hard eviction sets to 0. An idle pod taken away is routine (its replacement comes)
  and not told.

Each ending is told once per pod (by uid) while the reconciler lives, as a Warning Event on the
pool; :func:`bad_endings` is the pure rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runnerpool.api_errors import one_line
from runnerpool.naming import BUSY_LABEL, BUSY_VALUE
from runnerpool.reasons import Reason

__all__ = ["Ending", "bad_endings"]

_OOM = "OOMKilled"
_DISRUPTION = "DisruptionTarget"


@dataclass(frozen=True)
class Ending:
    """One pod's bad ending: the Event's reason and message."""

    uid: str
    reason: Reason
    message: str


def bad_endings(pods: Iterable[Mapping[str, Any]]) -> list[Ending]:
    """The pods of ``pods`` that ended badly, as the module docstring says."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        uid, name = str(meta.get("uid") or ""), str(meta.get("name"))
        ending = _killed_for_memory(pod, name) or _disrupted_busy(pod, meta, name)
        if uid and ending is not None:
            found.append(Ending(uid, *ending))
    return found


def _killed_for_memory(pod: Mapping[str, Any], name: str) -> tuple[Reason, str] | None:
    # The pod's containers, not its init containers: those run before any job (one killed at
    # start is a stuck pod, ``runnerpool.pods.failures``).
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        for state in ("state", "lastState"):
            if ((container.get(state) or {}).get("terminated") or {}).get("reason") == _OOM:
                limit = _memory_limit(pod, str(container.get("name")))
                return Reason.RUNNER_OOM_KILLED, (
                    f"pod {name}: container {container.get('name')} was killed for passing its memory "
                    f"limit ({limit or 'none set: the node ran out'}); the job it ran failed. Raise the "
                    "limit (spec.resources, or the container's in spec.template)"
                )
    return None


def _memory_limit(pod: Mapping[str, Any], container: str) -> str | None:
    for each in (pod.get("spec") or {}).get("containers") or ():
        if each.get("name") == container:
            return ((each.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def _disrupted_busy(pod: Mapping[str, Any], meta: Mapping[str, Any], name: str) -> tuple[Reason, str] | None:
    if (meta.get("labels") or {}).get(BUSY_LABEL) != BUSY_VALUE:
        return None
    status = pod.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == _DISRUPTION and condition.get("status") == "True":
            said = one_line(str(condition.get("message") or ""))
            return Reason.RUNNER_POD_DISRUPTED, (
                f"pod {name} is taken away while its runner runs a job ({condition.get('reason')}: "
                f"{said}); the job finishes only within the pod's grace period"
            )
    if status.get("reason") == "Evicted":
        said = one_line(str(status.get("message") or ""))
        return Reason.RUNNER_POD_DISRUPTED, (
            f"pod {name} is evicted while its runner runs a job ({said}); the job finishes only within "
            "the pod's grace period"
        )
    return None
