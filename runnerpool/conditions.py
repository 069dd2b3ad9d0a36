"""Kubernetes-convention conditions that only move ``lastTransitionTime`` on a real change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerpool.domain import RFC3339
from runnerpool.reasons import ConditionType, Reason

# The condition types by their old constant names (``runnerpool.reasons`` is the vocabulary).
READY = ConditionType.READY
TOKEN_READY = ConditionType.TOKEN_READY
SCALING = ConditionType.SCALING
DEMAND_VISIBLE = ConditionType.DEMAND_VISIBLE
WEBHOOK_SECRET_READY = ConditionType.WEBHOOK_SECRET_READY
NAMESPACE_ENABLED = ConditionType.NAMESPACE_ENABLED
SCOPE_ALLOWED = ConditionType.SCOPE_ALLOWED
RUNNER_GROUP_READY = ConditionType.RUNNER_GROUP_READY
RUNNERS_DEREGISTERED = ConditionType.RUNNERS_DEREGISTERED


@dataclass(frozen=True)
class Stamp:
    """What every condition written in one reconcile shares: the generation seen and the time."""

    generation: int
    now: datetime

    def condition(self, type_: ConditionType, status: bool, reason: Reason, message: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": "True" if status else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": self.now.strftime(RFC3339),
            "observedGeneration": self.generation,
        }


def merge(previous: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``previous`` with ``updates`` applied, keeping the old transition time
    of every condition whose status did not change, so a reconcile that only
    re-confirms a state produces an identical status (and therefore no write)."""
    by_type = {c["type"]: c for c in previous}
    for update in updates:
        old = by_type.get(update["type"])
        unchanged = old is not None and old.get("status") == update["status"]
        since = old["lastTransitionTime"] if old is not None and unchanged else update["lastTransitionTime"]
        by_type[update["type"]] = {**update, "lastTransitionTime": since}
    return sorted(by_type.values(), key=lambda c: str(c["type"]))


def find(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def same_state(conditions: list[dict[str, Any]], update: dict[str, Any]) -> bool:
    """Whether ``conditions`` already say ``update``'s status and reason (its message, time
    and generation aside): what a pass that only watches one condition need not write."""
    found = find(conditions, str(update["type"]))
    return found is not None and (found.get("status"), found.get("reason")) == (
        update["status"],
        update["reason"],
    )
