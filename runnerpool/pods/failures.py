"""Runner pods stuck before their runner can run, in the words the pool reports them with.

The kubelet says why a container does not run in its status's ``state.waiting.reason``; most
reasons are a normal start (``ContainerCreating``, ``PodInitializing``), some mean the pod will
not get further without someone fixing something. Those are this module's vocabulary, the one
place the pool's ``Ready`` condition (reason ``RunnerPodsFailing``), its ``RunnerPodsFailing``
Event and the ``runnerpool_runner_pods_failing{reason}`` metric take their words from
(docs/troubleshooting.md lists them):

=============================  ==========================================  ====================
reported as                    kubelet waiting reasons                     the message names
=============================  ==========================================  ====================
``ImagePullBackOff``           ``ErrImagePull``, ``ImagePullBackOff``      the image
``ErrImageNeverPull``          ``ErrImageNeverPull``                       the image
``InvalidImageName``           ``InvalidImageName``                        the image
``CrashLoopBackOff``           ``CrashLoopBackOff``                        the container
``CreateContainerConfigError`` ``CreateContainerConfigError``              the kubelet's message
``CreateContainerError``       ``CreateContainerError``                    the kubelet's message
=============================  ==========================================  ====================

One is the scheduler's: ``Unschedulable``, a pod whose ``PodScheduled`` condition has been
``False`` with reason ``Unschedulable`` for ``UNSCHEDULABLE_AFTER`` (no node fits its requests, a
``nodeSelector`` no node has, a taint it does not tolerate). Such a pod has no container status
at all, so without it the pool would say ``RunnersStarting`` for ever; the message quotes the
scheduler's own (``0/3 nodes are available: 3 Insufficient cpu.``), cut at
``SCHEDULER_MESSAGE_MAX``. The wait lets a cluster autoscaler's new node or a preemption place
the pod without a Warning; :func:`judge` says when to look again.

Two more are not the kubelet's: ``ExitedAtStart`` and ``RunnerVersionOutdated``, pods whose
runner ended at start (``runnerpool.pods.start_backoff``, which reports them). The second is
GitHub refusing the runner as outdated, and is the Ready condition's reason itself
(:func:`ready_reason`): the fix is a newer runner image, not a look at the pods.

``ErrImagePull`` (an attempt failed) and ``ImagePullBackOff`` (waiting for the next attempt)
alternate for as long as the image cannot be pulled: one cause, reported as one reason, so the
condition, the Event and the metric's series do not flip with every retry of the kubelet. For
the same reason the message names the image or the container, not the kubelet's text of the
moment (which carries the back-off time); a configuration error's text is stable and says what
is missing (a Secret, a ConfigMap, a key), so it is kept.

Init containers are looked at first: a pod whose init container is stuck never starts the
others. A pod counts once, under the first stuck container's reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerpool.api_errors import one_line
from runnerpool.domain import parse_rfc3339
from runnerpool.pods.state import active
from runnerpool.reasons import Reason

__all__ = [
    "EXITED_AT_START",
    "REPORTED",
    "RUNNER_VERSION_OUTDATED",
    "SCHEDULER_MESSAGE_MAX",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_AFTER",
    "Failing",
    "Judged",
    "describe",
    "judge",
    "ready_reason",
    "reported_reason",
    "start_failure",
]

_IMAGE = "image"
_CONTAINER = "container"
_MESSAGE = "message"

#: Kubelet waiting reason -> (the reason reported, what the message names).
_VOCABULARY: dict[str, tuple[str, str]] = {
    "ErrImagePull": ("ImagePullBackOff", _IMAGE),
    "ImagePullBackOff": ("ImagePullBackOff", _IMAGE),
    "ErrImageNeverPull": ("ErrImageNeverPull", _IMAGE),
    "InvalidImageName": ("InvalidImageName", _IMAGE),
    "CrashLoopBackOff": ("CrashLoopBackOff", _CONTAINER),
    "CreateContainerConfigError": ("CreateContainerConfigError", _MESSAGE),
    "CreateContainerError": ("CreateContainerError", _MESSAGE),
}
#: Not a kubelet reason: the pool's runner containers keep exiting at start, so its new pods
#: back off (``runnerpool.pods.start_backoff``, which reports it).
EXITED_AT_START = "ExitedAtStart"
#: Not a kubelet reason either: GitHub refuses the pool's runners as outdated (the start backoff
#: reports it, from the runner container's termination message: ``runnerpool.pods.outdated``).
RUNNER_VERSION_OUTDATED = str(Reason.RUNNER_VERSION_OUTDATED)
#: The scheduler's word for a pod no node can take (the ``PodScheduled`` condition's reason).
UNSCHEDULABLE = str(Reason.UNSCHEDULABLE)
#: How long a pod may stay unschedulable before it counts as failing: a cluster autoscaler's
#: scale-up or a preemption often places it within that, and a pool that only waits for room
#: is not worth a Warning; one that waits longer is (nothing else tells the user it waits).
UNSCHEDULABLE_AFTER = timedelta(minutes=1)
#: The scheduler's message, cut to this: it lists each node's reason, one per node group, and
#: a big cluster's would swamp the condition and the Event.
SCHEDULER_MESSAGE_MAX = 300
#: Every reason reported (the metric's ``reason`` label takes no other value).
REPORTED = tuple(
    sorted(
        {reported for reported, _ in _VOCABULARY.values()}
        | {EXITED_AT_START, RUNNER_VERSION_OUTDATED, UNSCHEDULABLE}
    )
)


@dataclass(frozen=True)
class Failing:
    """Pods stuck for one reported reason, and what stops the first of them (by name)."""

    reason: str
    pods: int
    detail: str


@dataclass(frozen=True)
class _Stuck:
    pod: str
    reason: str
    detail: str


def reported_reason(waiting_reason: str) -> str | None:
    """The reason a kubelet waiting reason is reported as; ``None``: not a failure (yet)."""
    found = _VOCABULARY.get(waiting_reason)
    return found[0] if found else None


def _unschedulable_since(pod: Mapping[str, Any]) -> tuple[datetime | None, str] | None:
    """When the scheduler last said the pod fits no node (``None``: the condition has no time),
    and its message; ``None``: the pod is not unschedulable. Only a pending pod bound to no node
    can be: a status patched by hand (or a stale condition) must not fail a running pod."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return None
    for condition in status.get("conditions") or ():
        if (condition.get("type"), condition.get("status")) != ("PodScheduled", "False"):
            continue
        if condition.get("reason") != UNSCHEDULABLE:
            return None
        return parse_rfc3339(condition.get("lastTransitionTime")), str(condition.get("message") or "")
    return None


def _scheduler_said(message: str) -> str:
    folded = one_line(message)
    if len(folded) <= SCHEDULER_MESSAGE_MAX:
        return folded
    return folded[: SCHEDULER_MESSAGE_MAX - 3] + "..."


def _unschedulable(pod: Mapping[str, Any], now: datetime) -> _Stuck | None:
    """An unschedulable pod past ``UNSCHEDULABLE_AFTER`` (a condition without a time counts at
    once: the scheduler's verdict is there, only its age is unknown)."""
    found = _unschedulable_since(pod)
    if found is None:
        return None
    since, message = found
    if since is not None and now - since < UNSCHEDULABLE_AFTER:
        return None
    name = str((pod.get("metadata") or {}).get("name"))
    return _Stuck(name, UNSCHEDULABLE, f"scheduler: {_scheduler_said(message) or 'no node fits the pod'}")


def _cannot_start(pod: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any], str, str] | None:
    """The first container (init containers first: they run first) that waits for a failure
    reason: the container, its waiting state, the reason reported and what its message names."""
    status = pod.get("status") or {}
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        found = _VOCABULARY.get(str(waiting.get("reason") or ""))
        if found is not None:
            return container, waiting, *found
    return None


def start_failure(pod: Mapping[str, Any]) -> str | None:
    """The reason reported for the pod's first container that cannot start (an image that
    cannot be pulled, a container that cannot be created, a crash loop); ``None``: none."""
    found = _cannot_start(pod)
    return found[2] if found is not None else None


def _stuck(pod: Mapping[str, Any], now: datetime) -> _Stuck | None:
    found = _cannot_start(pod)
    if found is not None:
        container, waiting, reported, names = found
        detail = {
            _IMAGE: f"image {container.get('image')}",
            _CONTAINER: f"container {container.get('name')}",
            _MESSAGE: f"container {container.get('name')}: {one_line(str(waiting.get('message') or ''))}",
        }[names]
        return _Stuck(str((pod.get("metadata") or {}).get("name")), reported, detail)
    return _unschedulable(pod, now)


@dataclass(frozen=True)
class Judged:
    """The pool's active pods judged at one time: which are stuck, and when to look again."""

    #: The stuck pods, by reported reason (sorted, so that the same pods always give the same answer).
    failing: tuple[Failing, ...]
    #: Seconds until the first pod that is unschedulable, but not for long enough yet, counts as
    #: failing (``None``: none is): no pod event comes then, so the pool is looked at again.
    recheck_in: float | None


def judge(pods: Iterable[Mapping[str, Any]], now: datetime) -> Judged:
    """The pool's active pods, each looked at once (``now``: the reconciler's clock, which
    unschedulable pods are judged by)."""
    stuck: list[_Stuck] = []
    waits: list[float] = []
    for pod in pods:
        if not active(pod):
            continue
        found = _stuck(pod, now)
        if found is not None:
            stuck.append(found)
        elif (since := _unschedulable_since(pod)) is not None and since[0] is not None:
            waits.append((since[0] + UNSCHEDULABLE_AFTER - now).total_seconds())
    stuck.sort(key=lambda s: (s.reason, s.pod))
    by_reason: dict[str, list[_Stuck]] = {}
    for one in stuck:
        by_reason.setdefault(one.reason, []).append(one)
    failing = tuple(Failing(reason, len(group), group[0].detail) for reason, group in by_reason.items())
    return Judged(failing, min(waits) if waits else None)


def ready_reason(found: Iterable[Failing]) -> Reason:
    """The Ready condition's reason (and the Event's) while pods are stuck: ``RunnerVersionOutdated``
    when GitHub refuses the runners as outdated, whatever else is stuck, else ``RunnerPodsFailing``."""
    outdated = any(f.reason == RUNNER_VERSION_OUTDATED for f in found)
    return Reason.RUNNER_VERSION_OUTDATED if outdated else Reason.RUNNER_PODS_FAILING


def describe(found: Iterable[Failing]) -> str:
    """One sentence: ``2 runner pod(s) in ImagePullBackOff (image localhost/missing:1)``."""
    return "; ".join(f"{f.pods} runner pod(s) in {f.reason} ({f.detail})" for f in found)
