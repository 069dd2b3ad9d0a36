"""Which pods a scale-down or a rollout takes away: pure decisions, never a busy runner's pod.

The reconciler only ever creates runner pods (``runnerpool.pods.scaling``); taking pods
away is done here, by the runner managers, because only they know from GitHub's listing
which runner is busy.  Given every pod's decision from ``lifecycle.plan``, the pool's
``spec.replicas`` and the current template hash, :func:`retirements` picks pods for each
pod above ``replicas`` (the *surplus*), in this order:

1. **outdated pods first** (another template hash, or none: adopted pods), then pods with
   the current template, but only as many of those as exceed ``replicas`` — so a rollout
   never takes away the new pods it is waiting for, and the reconciler (which creates
   while fewer than ``replicas`` pods are up to date) and the runner managers cannot undo
   each other's work;
2. among those, pods without a registered runner whose container is not running (they
   are not capacity and can go without asking GitHub), then idle runners, newest first;
3. **a busy runner is never picked**, and an idle registered runner only while at least
   ``replicas`` other pods of the pool have an online runner (``maxUnavailable: 0``:
   the replacement has to be registered before the pod it replaces goes).

Each pick goes the busy-safe way of ``lifecycle.replacement``: deregister on GitHub first,
delete the pod only after GitHub's 204 (422 means it took a job meanwhile, and it stays).
A scale-down below the number of busy runners therefore ends as their jobs end: an
ephemeral runner's pod is used up after its job and goes like every finished pod.
"""

from __future__ import annotations

from collections.abc import Sequence

from runnerpool.runners.lifecycle import Action, PodDecision, replacement

__all__ = ["OUTDATED", "SCALE_DOWN", "retirements"]

OUTDATED = "Outdated"
SCALE_DOWN = "ScaleDown"


def _counted(decision: PodDecision) -> bool:
    """Counted against ``replicas`` the way the reconciler counts (``pods.state``)."""
    return decision.action is Action.KEEP and decision.pod.active


def _online(decision: PodDecision) -> bool:
    return decision.runner is not None and decision.runner.online


def _order(decision: PodDecision) -> tuple[bool, float]:
    created = decision.pod.created.timestamp() if decision.pod.created is not None else 0.0
    return (decision.runner is not None, -created)


def retirements(
    decisions: Sequence[PodDecision], replicas: int, wanted_hash: str | None
) -> tuple[PodDecision, ...]:
    """The pods to take away now (see the module docstring); ``wanted_hash`` ``None``: no rollout."""
    counted = [d for d in decisions if _counted(d)]
    surplus = len(counted) - replicas
    if surplus <= 0:
        return ()
    outdated = [d for d in counted if wanted_hash is not None and d.pod.template_hash != wanted_hash]
    current = [d for d in counted if wanted_hash is None or d.pod.template_hash == wanted_hash]
    spare_current = max(0, len(current) - replicas)
    online = sum(1 for d in counted if _online(d))
    picked: list[PodDecision] = []
    for group, reason in ((outdated, OUTDATED), (current, SCALE_DOWN)):
        for decision in sorted(group, key=_order):
            if surplus <= 0 or (group is current and spare_current <= 0):
                break
            runner = decision.runner
            if runner is None and decision.pod.runner_running:
                continue  # may be registering right now: wait for a listing that shows it
            if runner is not None and runner.busy:
                continue
            if runner is not None and runner.online:
                if online - 1 < replicas:
                    continue  # its replacement has not registered yet
                online -= 1
            picked.append(replacement(decision.pod, runner, reason))
            surplus -= 1
            if group is current:
                spare_current -= 1
    return tuple(picked)
