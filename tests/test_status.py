"""The status rules on their own: which reason when, and stable output for unchanged input."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerpool import api, conditions, status
from runnerpool.domain import TokenFailure

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STAMP = conditions.Stamp(generation=3, now=NOW)
POOL = api.RunnerPool.model_validate(
    {"metadata": {"name": "p", "namespace": "ns", "generation": 3}, "spec": {"organization": "octo"}}
)


def _secret(expires_in: timedelta | None) -> dict[str, Any]:
    if expires_in is None:
        return {"metadata": {}}
    expiry = (NOW + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"annotations": {api.TOKEN_EXPIRY_ANNOTATION: expiry}},
        "data": {api.TOKEN_SECRET_KEY: base64.b64encode(b"t").decode()},
    }


def _reason(secret: dict[str, Any], failure: TokenFailure | None = None) -> tuple[str, str]:
    cond = status.token_condition(STAMP, POOL, secret, failure)
    return cond["status"], cond["reason"]


FAILURE = TokenFailure(reason="BadCredentials", message="GitHub said 401", since=NOW)


def test_token_reasons() -> None:
    assert _reason(_secret(None)) == ("False", "WaitingForToken")
    assert _reason(_secret(timedelta(hours=1))) == ("True", "TokenIssued")
    assert _reason(_secret(-timedelta(minutes=1))) == ("False", "WaitingForToken"), "an expired token is none"
    assert _reason(_secret(None), FAILURE) == ("False", "BadCredentials")
    assert _reason(_secret(timedelta(hours=1)), FAILURE) == ("True", "RefreshFailing")


def test_ready_needs_the_deployment_settled_at_the_desired_size() -> None:
    token = status.token_condition(STAMP, POOL, _secret(timedelta(hours=1)), None)
    deployment = {
        "metadata": {"generation": 2},
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 2, "readyReplicas": 1},
    }
    assert status.ready_condition(STAMP, POOL, token, deployment)["reason"] == "RunnersReady"
    stale = {**deployment, "status": {"observedGeneration": 1, "readyReplicas": 1}}
    assert status.ready_condition(STAMP, POOL, token, stale)["reason"] == "RunnersStarting"
    assert status.ready_condition(STAMP, POOL, token, None)["reason"] == "DeploymentMissing"


def test_an_unchanged_state_gives_an_identical_status_later() -> None:
    inputs: dict[str, Any] = {"secret": _secret(timedelta(hours=1)), "deployment": None, "failure": None}
    first = status.desired_status(STAMP, POOL, old={}, runners=None, **inputs)
    later = conditions.Stamp(generation=3, now=NOW + timedelta(minutes=5))
    again = status.desired_status(later, POOL, old=first, runners=None, **inputs)
    assert again == first, "transition times stay put while statuses do not change"
