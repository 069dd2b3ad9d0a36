"""Which runners to delete from GitHub and which pods to replace: pure decisions.

Everything here is a function of a pool's pods, its runners as the shared listing saw them,
and the time, so every rule can be tested case by case without GitHub or a cluster; the
runner manager only carries the decisions out.

The invariants, and how the rules keep them:

* **A busy runner is never deleted, and neither is its pod.** A runner the listing shows as
  busy is left alone whatever its pod looks like, and its pod is marked busy
  (``runnerpool.pods.naming.BUSY_LABEL``, which the pool's PodDisruptionBudget selects,
  plus the cluster autoscaler's and Karpenter's do-not-disrupt annotations) until the
  listing shows it idle again, so no voluntary eviction takes it either. The listing can
  be up to one interval old, so no pod whose runner process may be alive is deleted on
  the listing's word alone: its runner is deleted on GitHub first, and
  only GitHub's 204 (it refuses a busy runner with 422) lets the pod go. A pod is deleted
  without that handshake only when its runner container is not running, and then with the
  pod's resourceVersion as a precondition, so a container restarted since the decision
  (which changes the pod's status) makes the delete fail instead.
* **No offline runner piles up.** A runner of the pool that is offline, not busy and has no
  pod of that name left, or only one being deleted (``deletionTimestamp``), is deleted from
  GitHub. Its pod is gone or going, so nothing can bring it back; a pod on a dead node stays
  Terminating for as long as its Node object exists, and waiting for it to vanish would leave
  its runner registered for that long. (The pod list is read after the listing, so a runner
  that registered before the listing finds its pod in the list.)
* **One job per pod.** Runners register ``--ephemeral``: after one job the listener exits and
  the kubelet restarts the container, which registers again in a used work directory. A pod
  whose runner container has restarted or terminated, or that has finished, is replaced.
* **recreateDeadline.** Idle pods older than the pool's ``spec.recreateDeadline`` are
  replaced the same way, never busy ones.
* **Registration timeout.** A pod whose runner is still not listed after
  ``registration_timeout`` and whose container is not running (stuck pulling its image,
  crash-looping) is replaced; one whose container runs is left to register. So is one whose
  runner is listed offline while its container cannot start (a kubelet failure reason: a JIT
  runner is registered before its pod runs), deregistered first.

* **A deleted pool's pods** (``drained``) go once the listing shows none of its runners busy:
  a pod whose runner that listing showed (and the drain deregistered), a pod whose runner
  container is not running (with its resourceVersion as precondition), or a running one
  whose runner is missing from a listing that started ``STARTED_MARGIN`` after the
  container did, once GitHub, asked for the runner by its name, has none either
  (``LOOK_UP_AND_DELETE``). A runner is registered before its container starts (token
  registration in the init container, a JIT runner before its pod exists), so such a listing
  would show it; an older listing may miss a runner that registered and took a job since.
  And even a later one can miss it: GitHub pages by number, so a runner that leaves while
  the pages are read moves the next one onto a page already read, and when another runner
  registers meanwhile ``total_count`` holds still and nothing tells. Only the lookup by name
  (one small page) proves the runner gone; the runner managers make it for such pods alone.
* **A deleted pool's pod stuck Terminating** (``overdue``: past its deletion time, its node
  lost) is waited for ``STUCK_MARGIN`` more (``given_up``); then the finalizer lets the pool go
  without it, once GitHub has no runner of the pod's name. Its node may only be cut off, the
  pod alive, but its runner is gone and it can register no other: nothing of the pool is left
  on GitHub, and no job is cut short (the pod is not touched, only no longer waited for).
* **A pod that outlives its stop** (``outlived_stop``; a deleted pool's, or a live one's that was
  scaled down or rolled out): its runner container still runs ``STOP_OVERDUE`` after the pod
  was told to stop, more than ``HURRY_SECONDS`` of its grace left, and GitHub shows no busy
  runner of its name (asked by it when the listing showed none; an idle one is deregistered
  first): it is deleted again so that its grace ends ``HURRY_SECONDS`` from now
  (``hurried_grace``). A runner stops within seconds of its SIGTERM (a busy one's job finishes
  inside the busy grace, and GitHub keeps a busy runner listed, so it is never hurried); one
  that does not (a signal lost, a listener hung on its way out) would otherwise hold its node,
  and a deleted pool's finalizer and its namespace's deletion, for the pod's whole grace, an
  hour by default. What the shorter grace can do is limited: a kubelet that had not begun to
  stop the pod (its node was cut off) kills it at the new end, but one already stopping it
  waits out the grace it began with (kubelet 1.36 too, kubernetes/kubernetes#113606: the
  running stop is not interrupted), so such a pod, past its new deletion time, is reported
  stuck (``overdue``) until that first grace ends. Its runner is deregistered either way.
* **A busy mark stays while a listing cannot see the runner** (``busy_mark_change``): for the
  same reason, a marked pod whose runner container runs keeps its mark until a listing shows
  its runner idle. The mark goes with the pod when its runner is done (the container exits).

Scale-down and rollouts choose among the pods kept here: ``runnerpool.runners.retirement``.

A deregistration that GitHub answers with 404 proves only that the runner id the listing
knew is gone. If the container is still running it may have registered again under a new
id, so the pod waits for the next listing; if it is not running, nothing can take a job in
it and the pod goes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerpool.domain import parse_rfc3339
from runnerpool.github.types import Runner
from runnerpool.naming import BUSY_ANNOTATIONS, BUSY_LABEL, BUSY_VALUE, TEMPLATE_HASH_LABEL
from runnerpool.pods import state
from runnerpool.pods.failures import start_failure
from runnerpool.pods.template import (
    busy_marked,
)

__all__ = [
    "Action",
    "BusyMark",
    "Plan",
    "PodDecision",
    "PodView",
    "busy_mark_change",
    "decide_pod",
    "drained",
    "given_up",
    "hurried_grace",
    "hurry",
    "looked_up",
    "outlived_stop",
    "overdue",
    "plan",
    "replacement",
    "runners_to_collect",
]


#: How long after a runner container's reported start a listing must have started to show its
#: runner: ``startedAt`` has whole seconds and comes from the node's clock, not ours.
STARTED_MARGIN = timedelta(seconds=2)
#: How long past its deletion time a deleted pool's pod stuck Terminating is waited for
#: (``given_up``): a registration token's life. A pod whose node is cut off from the API server
#: never learns that it was deleted and runs on; its register container may hold a token issued
#: before the pool's deletion (none is issued after), good for an hour at most, and register a
#: runner with it until then. After that it can register nothing, and a runner GitHub confirms
#: gone cannot come back.
STUCK_MARGIN = timedelta(hours=1)
#: How long a pod may keep its runner container running after it was told to stop before it is
#: told again, briefly (``outlived_stop``): an idle runner stops in seconds.
STOP_OVERDUE = timedelta(seconds=60)
#: How long the second deletion leaves it: a clean stop on the second signal, then the kill.
HURRY_SECONDS = 30


class Action(enum.Enum):
    KEEP = "Keep"
    #: The runner cannot be running: delete the pod (with its resourceVersion as precondition).
    DELETE_POD = "DeletePod"
    #: Delete the runner on GitHub; only a 204 (or a 404 where ``delete_if_gone``) frees the pod.
    DEREGISTER_AND_DELETE = "DeregisterAndDelete"
    #: A deleted pool's running pod that no listing showed a runner for: look its runner up by
    #: name first (a paged listing can miss one); the pod goes only if GitHub has none, or once
    #: the runner found is deregistered.
    LOOK_UP_AND_DELETE = "LookUpAndDelete"


@dataclass(frozen=True)
class PodView:
    """What the rules need from a pod, read once from its wire form."""

    name: str
    uid: str
    resource_version: str
    created: datetime | None
    deleting: bool
    phase: str
    #: The runner container runs right now (and the pod has not finished).
    runner_running: bool
    runner_restarts: int
    #: The runner container's current state is ``terminated``.
    runner_terminated: bool
    #: When the runner container's current run started (``None``: not running, or not said).
    runner_started: datetime | None = None
    #: Carries the operator's busy label (``BUSY_LABEL``).
    busy_marked: bool = False
    #: The busy annotations that carry the operator's own values (only those are removed).
    busy_annotations: frozenset[str] = frozenset()
    #: ``TEMPLATE_HASH_LABEL``: which pod template the pod was made from (none: adopted).
    template_hash: str | None = None
    #: ``deletionTimestamp``: when the pod's grace period ends (``None``: not being deleted).
    deleted_at: datetime | None = None
    #: ``spec.nodeName`` ("": not scheduled).
    node: str = ""
    #: ``deletionGracePeriodSeconds``: the grace its deletion gave it (``None``: not being deleted).
    grace_seconds: int | None = None
    #: Why a container of the pod cannot start (``failures.start_failure``: an init container's
    #: first, as the operator's ``register`` runs the runner's image first; ``None``: none).
    start_failure: str | None = None

    @property
    def stop_asked(self) -> datetime | None:
        """When the pod was told to stop: its grace period's end less the grace."""
        if self.deleted_at is None or self.grace_seconds is None:
            return None
        return self.deleted_at - timedelta(seconds=self.grace_seconds)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        meta = pod.get("metadata") or {}
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        runner = state.runner_status(pod)
        current = runner.get("state") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        return cls(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            created=parse_rfc3339(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            phase=phase,
            runner_running="running" in current and phase not in state.FINISHED_PHASES,
            runner_restarts=int(runner.get("restartCount") or 0),
            runner_terminated="terminated" in current,
            runner_started=parse_rfc3339((current.get("running") or {}).get("startedAt")),
            busy_marked=busy_marked(pod),
            busy_annotations=frozenset(k for k, v in BUSY_ANNOTATIONS.items() if annotations.get(k) == v),
            template_hash=labels.get(TEMPLATE_HASH_LABEL),
            deleted_at=parse_rfc3339(meta.get("deletionTimestamp")),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            grace_seconds=_whole(meta.get("deletionGracePeriodSeconds")),
            start_failure=start_failure(pod),
        )

    @property
    def used_up(self) -> bool:
        """``runnerpool.pods.state``: its runner has had its one job (or failed)."""
        return state.is_used_up(self.phase, self.runner_restarts, self.runner_terminated)

    @property
    def active(self) -> bool:
        """``runnerpool.pods.state``: counted against the pool's desired count."""
        return state.counted(self.deleting, self.phase)


@dataclass(frozen=True)
class PodDecision:
    pod: PodView
    action: Action
    reason: str
    runner: Runner | None = None
    #: For DEREGISTER_AND_DELETE: does a 404 (runner already gone) free the pod?
    delete_if_gone: bool = False
    #: For DELETE_POD (and LOOK_UP_AND_DELETE): the deletion's ``gracePeriodSeconds`` (``None``:
    #: the pod's own), which the API server counts from the pod's first deletion (``hurried_grace``).
    grace_seconds: int | None = None


@dataclass(frozen=True)
class BusyMark:
    """Mark (``busy``) or unmark one pod: the busy label and the do-not-disrupt annotations."""

    pod: PodView
    busy: bool

    def patch(self) -> dict[str, Any]:
        """A merge patch; unmarking removes only the annotations that carry the operator's values."""
        if self.busy:
            return {"metadata": {"labels": {BUSY_LABEL: BUSY_VALUE}, "annotations": dict(BUSY_ANNOTATIONS)}}
        meta: dict[str, Any] = {"labels": {BUSY_LABEL: None}}
        if self.pod.busy_annotations:
            meta["annotations"] = dict.fromkeys(sorted(self.pod.busy_annotations))
        return {"metadata": meta}


@dataclass(frozen=True)
class Plan:
    collect: tuple[Runner, ...]
    replace: tuple[PodDecision, ...]
    marks: tuple[BusyMark, ...]
    #: Every pod's decision, the kept ones included (what retirement chooses from).
    decisions: tuple[PodDecision, ...] = ()
    #: Pods being deleted that ``outlived_stop``: told again once GitHub shows no busy runner of
    #: theirs (``RunnerManagers._hurry``).
    outlived: tuple[PodView, ...] = ()


def runners_to_collect(runners: Iterable[Runner], pod_names: Iterable[str]) -> list[Runner]:
    """Offline, idle runners none of ``pod_names`` (the pods not being deleted) can bring back."""
    names = set(pod_names)
    return [r for r in runners if r.offline and not r.busy and r.name not in names]


def decide_pod(
    pod: PodView,
    runner: Runner | None,
    now: datetime,
    recreate_deadline: timedelta | None,
    registration_timeout: timedelta | None = None,
) -> PodDecision:
    """What to do with one pod, given the runner registered under its name (if listed)."""
    if pod.deleting:
        return PodDecision(pod, Action.KEEP, "Terminating", runner)
    if runner is not None and runner.busy:
        return PodDecision(pod, Action.KEEP, "RunnerBusy", runner)
    if pod.used_up:
        return replacement(pod, runner, "RunnerRestarted" if pod.runner_running else "RunnerFinished")
    if recreate_deadline is not None and _older(pod, now, recreate_deadline):
        return replacement(pod, runner, "RecreateDeadline")
    stuck = runner is None or _never_ran(pod, runner)
    if stuck and registration_timeout is not None and _older(pod, now, registration_timeout):
        return replacement(pod, runner, "RegistrationTimeout")
    return PodDecision(pod, Action.KEEP, "Idle" if runner is not None else "RunnerNotListed", runner)


def _never_ran(pod: PodView, runner: Runner) -> bool:
    """A JIT pod's runner is registered (offline) when its Secret is filled, before the pod
    runs: a pod whose runner container cannot start (its image cannot be pulled, the container
    cannot be created) has a runner all the same, and without this it held its slot (and an
    offline runner on GitHub) until GitHub dropped the runner a day later. Replaced the
    busy-safe way (deregistered first). Only for a kubelet reason that says a container of
    the pod cannot start (``failures.start_failure``, init containers first: ``register`` is
    built from the runner's image and runs first): a pod still initializing (the template's own
    init containers run after register, a sidecar's startup) or waiting for a node is slow, not
    stuck."""
    failed = pod.start_failure is not None
    return failed and runner.offline and not pod.runner_running and pod.runner_restarts == 0


def _older(pod: PodView, now: datetime, age: timedelta) -> bool:
    return pod.created is not None and now - pod.created >= age


def replacement(pod: PodView, runner: Runner | None, reason: str) -> PodDecision:
    """Take ``pod`` away the busy-safe way: deregister first if it has a runner, else delete it
    only when its container is not running."""
    if runner is not None:
        return PodDecision(
            pod, Action.DEREGISTER_AND_DELETE, reason, runner, delete_if_gone=not pod.runner_running
        )
    if pod.runner_running:
        # Registering right now, or registered after the listing: wait for a listing that
        # shows the runner, so that it can be deregistered first.
        return PodDecision(pod, Action.KEEP, "RunnerNotListed")
    return PodDecision(pod, Action.DELETE_POD, reason)


def drained(pod: PodView, runner: Runner | None, listing_started: datetime) -> PodDecision:
    """A deleted pool's pod, once the listing that started at ``listing_started`` showed none of
    the pool's runners busy and the drain deregistered the idle ones (``runner``: this pod's,
    if listed). ``DELETE_POD`` with a runner: any version of the pod (its runner is gone on
    GitHub); without, and ``LOOK_UP_AND_DELETE`` once GitHub has no runner of the pod's name:
    with its resourceVersion as precondition. A pod that ``outlived_stop`` goes again the same
    way, with ``hurried_grace``."""
    if pod.deleting:
        if not outlived_stop(pod, listing_started):
            return PodDecision(pod, Action.KEEP, "Terminating", runner)
        return hurry(pod, runner, listing_started)
    if runner is not None:
        return PodDecision(pod, Action.DELETE_POD, "Deregistered", runner)
    if not pod.runner_running:
        return PodDecision(pod, Action.DELETE_POD, "RunnerNotRunning")
    if pod.runner_started is not None and listing_started >= pod.runner_started + STARTED_MARGIN:
        return PodDecision(pod, Action.LOOK_UP_AND_DELETE, "RunnerGone")
    # Registered after the listing started, perhaps with a job: the next listing will say.
    return PodDecision(pod, Action.KEEP, "RunnerNotListed")


def looked_up(decision: PodDecision, runner: Runner | None) -> PodDecision:
    """``decision`` once its runner was looked up by name (``LOOK_UP_AND_DELETE``; others are
    returned as they are): GitHub has none (``runner`` ``None``), and the pod goes with its
    resourceVersion as precondition; or the lookup found the runner the listing missed, which
    the caller deregistered (not busy: a busy one keeps every pod of the pool), and the pod
    goes as one whose runner was listed."""
    if decision.action is not Action.LOOK_UP_AND_DELETE:
        return decision
    if runner is not None:
        return PodDecision(
            decision.pod, Action.DELETE_POD, "Deregistered", runner, grace_seconds=decision.grace_seconds
        )
    return PodDecision(decision.pod, Action.DELETE_POD, decision.reason, grace_seconds=decision.grace_seconds)


def outlived_stop(pod: PodView, listing_started: datetime) -> bool:
    """Its runner container still ran ``STOP_OVERDUE`` after the pod was told to stop, as the
    listing that started at ``listing_started`` saw it, with more than ``HURRY_SECONDS`` of its
    grace left: past its grace its node does not answer (``overdue``), and one told again (or
    deleted with a short grace) is about to be killed anyway."""
    asked = pod.stop_asked
    return (
        pod.runner_running
        and asked is not None
        and pod.deleted_at is not None
        and listing_started >= asked + STOP_OVERDUE
        and pod.deleted_at - listing_started > timedelta(seconds=HURRY_SECONDS)
    )


def hurried_grace(pod: PodView, now: datetime) -> int:
    """The ``gracePeriodSeconds`` that ends ``pod``'s grace ``HURRY_SECONDS`` after ``now``.

    The API server shortens a pod already being deleted by moving its deletionTimestamp to the
    first deletion's time plus the new grace (k8s.io/apiserver ``rest.BeforeDelete``), so the
    grace counts from when the pod was first told to stop, not from this request; a plain 30
    would end a grace that ended already, a kill without a second chance to stop cleanly."""
    asked = pod.stop_asked
    elapsed = 0 if asked is None else math.ceil(max((now - asked).total_seconds(), 0.0))
    return elapsed + HURRY_SECONDS


def hurry(pod: PodView, runner: Runner | None, now: datetime) -> PodDecision:
    """Tell ``pod``, which ``outlived_stop``, to stop again (``hurried_grace``), with its
    resourceVersion as precondition: once GitHub, asked by its name, has no runner of it
    (``LOOK_UP_AND_DELETE``), or once ``runner``, listed idle, is deregistered."""
    action = Action.DELETE_POD if runner is not None else Action.LOOK_UP_AND_DELETE
    return PodDecision(pod, action, "OutlivedStop", runner, grace_seconds=hurried_grace(pod, now))


def overdue(pod: PodView, now: datetime) -> bool:
    """Still there past its deletion time: by then the kubelet has stopped its containers and
    removed it, unless its node does not answer (powered off, cut off from the API server: the
    pod then stays Terminating for as long as the Node object exists), a finalizer of someone
    else's holds it, or its runner ignored its stop and its deletion time was moved earlier
    (``hurry``), which a kubelet already stopping it does not follow."""
    return pod.deleted_at is not None and now >= pod.deleted_at


def given_up(pod: PodView, now: datetime) -> bool:
    """``overdue`` for ``STUCK_MARGIN`` more: a deleted pool's finalizer no longer waits for it,
    once GitHub confirms it has no runner of the pod's name (a busy one keeps the pool)."""
    return pod.deleted_at is not None and now >= pod.deleted_at + STUCK_MARGIN


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def busy_mark_change(pod: PodView, runner: Runner | None) -> BusyMark | None:
    """Mark busy runners' pods (no eviction, no node scale-down), and unmark them when idle.

    A running pod whose runner the listing did not show keeps what it has: the listing may have
    missed a busy runner (see the module docstring), and a mark dropped on that word would let
    an eviction take the job. Only the operator's own values are ever removed, so an
    annotation set by someone else survives.
    """
    if pod.deleting or (runner is None and pod.runner_running):
        return None
    busy = runner is not None and runner.busy
    if busy and (not pod.busy_marked or pod.busy_annotations != frozenset(BUSY_ANNOTATIONS)):
        return BusyMark(pod, True)
    if not busy and pod.busy_marked:
        return BusyMark(pod, False)
    return None


def busy_marks(pods: Iterable[PodView], runners: Iterable[Runner]) -> tuple[BusyMark, ...]:
    """The pods of ``runners`` that run a job, marked busy (never unmarked): a deleted pool's,
    whose finalizer waits for those jobs while the live round that marks pods stopped with the
    pool (a job taken just before the deletion left its pod unmarked, and a node drain or a
    consolidation meanwhile would evict it, job and all); and any pod whose runner GitHub
    answered busy (422) when asked to delete it, which proves a job before a listing does."""
    busy = {runner.name: runner for runner in runners if runner.busy}
    marks = (busy_mark_change(pod, busy[pod.name]) for pod in pods if pod.name in busy)
    return tuple(mark for mark in marks if mark is not None and mark.busy)


def plan(
    pods: Sequence[PodView],
    runners: Sequence[Runner],
    now: datetime,
    recreate_deadline: timedelta | None,
    registration_timeout: timedelta | None = None,
    *,
    listing_started: datetime | None = None,
) -> Plan:
    """All decisions for one pool. ``runners`` are the pool's own (see ``pool_runners``), from
    the listing that started at ``listing_started`` (``None``: no pod is judged ``outlived_stop``)."""
    by_name: dict[str, Runner] = {}
    for runner in runners:
        # Two registrations under one name should not happen (``--replace``); if they do,
        # the busy one decides, which errs on the side of keeping the pod.
        if runner.name not in by_name or runner.busy:
            by_name[runner.name] = runner
    decisions = [
        decide_pod(pod, by_name.get(pod.name), now, recreate_deadline, registration_timeout) for pod in pods
    ]
    marks = [
        change
        for decision in decisions
        if decision.action is Action.KEEP
        and (change := busy_mark_change(decision.pod, decision.runner)) is not None
    ]
    return Plan(
        # A Terminating pod's runner counts as podless: its pod may never go (a dead node).
        collect=tuple(runners_to_collect(runners, (pod.name for pod in pods if not pod.deleting))),
        replace=tuple(d for d in decisions if d.action is not Action.KEEP),
        marks=tuple(marks),
        decisions=tuple(decisions),
        outlived=tuple(
            pod for pod in pods if listing_started is not None and outlived_stop(pod, listing_started)
        ),
    )
