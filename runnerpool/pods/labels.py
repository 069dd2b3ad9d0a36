"""The labels a pool's runners carry on GitHub, in one place for the two that need them.

``config.sh`` gives a runner ``self-hosted``, its OS and its architecture itself, and the
labels it is told (``template.runner_labels``: the pool's own, then ``spec.labels``). A JIT
runner is made by GitHub from the generate-jitconfig request alone, with the labels the request
names ("the custom labels to add"; the documented example names ``self-hosted`` and ``X64``
itself), so the request must name them all or a ``runs-on: [self-hosted, ...]`` job never
reaches it. Demand matching must know the same set, or a pool scales for jobs GitHub will
never give it. Both read :func:`registered`.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api
from runnerpool.pods import template

__all__ = ["ARCH_SELECTOR", "architectures", "registered"]

ARCH_SELECTOR = "kubernetes.io/arch"
#: The runner's own architecture label, by its node's ``kubernetes.io/arch``.
_ARCH_LABELS = {"amd64": "X64", "arm64": "ARM64", "arm": "ARM"}


def registered(pool: api.RunnerPool) -> list[str]:
    """The labels GitHub lists for the pool's runners, spelled as GitHub does: ``self-hosted``,
    ``Linux``, the architecture's, then the operator's.

    Where the pods may land on nodes of several architectures (:func:`architectures`), a
    ``config.sh`` runner has its node's, so any of them may be there; a JIT runner has none:
    its config is asked for before its pod is scheduled, and a wrong one would draw jobs it
    cannot run.
    """
    arches = sorted({_ARCH_LABELS.get(arch, "X64") for arch in architectures(pool)})
    if pool.spec.registers_jit and len(arches) > 1:
        arches = []
    builtin = ["self-hosted", "Linux", *arches]
    named = {label.lower() for label in builtin}
    return [*builtin, *(label for label in template.runner_labels(pool) if label.lower() not in named)]


def architectures(pool: api.RunnerPool) -> frozenset[str]:
    """The ``kubernetes.io/arch`` values the pool's runner pods may run on, as their merged pod
    spec says (``pods.template.node_placement``: a template's nodeSelector or affinity counts as
    much as ``spec.nodeSelector``): the node selector's value, else the values a required node
    affinity allows, else ``amd64``. Several when the affinity allows several."""
    placed = template.node_placement(pool)
    chosen = (placed.get("nodeSelector") or {}).get(ARCH_SELECTOR)
    if chosen is not None:
        return frozenset({chosen})
    return _required_architectures(placed.get("affinity") or {}) or frozenset({"amd64"})


def _required_architectures(affinity: dict[str, Any]) -> frozenset[str]:
    """The architectures a required node affinity allows (empty: it does not limit them). Its
    terms are ORed, each term's expressions ANDed; only ``In`` is read."""
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    allowed: set[str] = set()
    for term in (required or {}).get("nodeSelectorTerms") or ():
        limits = [
            set(expression.get("values") or ())
            for expression in term.get("matchExpressions") or ()
            if expression.get("key") == ARCH_SELECTOR and expression.get("operator") == "In"
        ]
        if not limits:
            return frozenset()  # this term lets the pod on a node of any architecture
        allowed |= set.intersection(*limits)
    return frozenset(allowed)
