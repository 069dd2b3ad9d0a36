"""Kubernetes-convention conditions that only move ``lastTransitionTime`` on a real change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerpool.domain import RFC3339

READY = "Ready"
TOKEN_READY = "TokenReady"
#: Pools that follow demand: the scaling decision and why (``runnerpool.autoscaling``).
SCALING = "Scaling"
#: Pools that follow demand: whether any source of demand reaches them (webhook or polling).
DEMAND_VISIBLE = "DemandVisible"
#: Pools with their own webhook secret (``spec.autoscaling.webhookSecretRef``): can it be read.
WEBHOOK_SECRET_READY = "WebhookSecretReady"
#: With --allow rules: whether the pool's namespace may register runners at its scope.
SCOPE_ALLOWED = "ScopeAllowed"
#: Pools that name spec.runnerGroup: whether the group exists and admits what the pool serves.
RUNNER_GROUP_READY = "RunnerGroupReady"
#: A deleted pool: whether its runners are off GitHub yet (the finalizer waits for True).
RUNNERS_DEREGISTERED = "RunnersDeregistered"


@dataclass(frozen=True)
class Stamp:
    """What every condition written in one reconcile shares: the generation seen and the time."""

    generation: int
    now: datetime

    def condition(self, type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
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
