"""Which runner names are a pool's, told by the name alone: for the webhook receiver, which may
not read pods.

A pool's runners register under their pod's name, ``<pool>-`` and the five characters the API
server draws for a ``generateName`` (``naming.runner_pod_name_pattern``). The operator tells a
pool's runners by its pods (``DemandWriter``'s default); the receiver, whose account reads
no pods (issue 30: the internet-facing part holds no power), tells them by that shape. The
fixed length keeps pools of one namespace apart: pool ``a``'s ``a-x1y2z`` is not pool
``a-x1y2z``'s (``a-x1y2z-`` and five more), nor the reverse. What the shape cannot tell is
two pools of the *same name* in two namespaces that both match one job: a job in progress on
one's runner then also counts busy on the other (one runner too many, never a job lost) until
it ends or the leader's next poll, which reads pods, ends it there: its runner is none of that
pool's pods (``rules._state_for`` when listed, ``rules._outlived`` a grace after it started
when not). The poll does not add it either.
"""

from __future__ import annotations

from collections.abc import Container

from runnerpool import naming

__all__ = ["RunnerNames", "by_name"]


class RunnerNames(Container[str]):
    """The runner names pool ``pool`` may have: ``name in RunnerNames(pool)``."""

    def __init__(self, pool: str) -> None:
        self._pattern = naming.runner_pod_name_pattern(pool)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._pattern.fullmatch(name) is not None


def by_name(namespace: str, pool: str) -> Container[str]:
    """``DemandWriter``'s ``runners`` for a process without the pod cache."""
    del namespace  # pod names are per namespace; the shape is the same in each
    return RunnerNames(pool)
