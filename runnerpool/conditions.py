"""Kubernetes-convention conditions that only move ``lastTransitionTime`` on a real change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

READY = "Ready"
TOKEN_READY = "TokenReady"


def condition(
    type_: str, status: bool, reason: str, message: str, generation: int, now: datetime
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observedGeneration": generation,
    }


def merge(previous: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``previous`` with ``updates`` applied, keeping the old transition time
    of every condition whose status did not change, so a reconcile that only
    re-confirms a state produces an identical status (and therefore no write)."""
    by_type = {c["type"]: c for c in previous}
    for update in updates:
        old = by_type.get(update["type"])
        if old is not None and old.get("status") == update["status"]:
            update = {**update, "lastTransitionTime": old["lastTransitionTime"]}
        by_type[update["type"]] = update
    return sorted(by_type.values(), key=lambda c: str(c["type"]))


def find(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)
