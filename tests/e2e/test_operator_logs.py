"""The operator's JSON log as a log pipeline reads it: one object per line, and a pool's lines
findable by ``pool``, a reconcile's by ``reconcileID``.

The operator runs as its own process with ``--log-format json`` (as deploy/ runs it); the
runner simulator plays the pods.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.runners import REPO, wait_condition
from tests.pools import create_pool, pool_manifest
from testworld.simulator import OperatorProcess, RunnerSimulator

pytestmark = pytest.mark.usefixtures("credentials")


def _entries(log: str) -> list[dict[str, Any]]:
    """Every line the operator wrote (the test world's ``--- operator start`` headers aside)."""
    entries = []
    for line in log.splitlines():
        if line.startswith("--- operator start"):
            continue
        entry = json.loads(line)  # a line that is not one whole JSON object fails here
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


def test_a_pools_lines_carry_its_key_and_each_reconcile_its_own_id(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    simulator: RunnerSimulator,
) -> None:
    create_pool(api_client, namespace, pool_manifest("logged", repo=REPO, replicas=1))
    wait_condition(api_client, namespace, "logged", "Ready", "True")
    key = f"{namespace}/logged"

    entries = _entries(operator.log_text())

    passes = [e for e in entries if e["msg"] == "reconciled pool"]
    assert passes, "the reconciles logged their one line"
    assert {e["pool"] for e in passes} == {key}
    ids = [e["reconcileID"] for e in passes]
    assert len(set(ids)) == len(ids) > 1, "every reconcile has an id of its own"
    # The token job runs on the scheduler's threads, outside any reconcile.
    refreshed = [e for e in entries if e["msg"].startswith(f"registration token for pool {key} refreshed")]
    assert refreshed and all(e["pool"] == key and "reconcileID" not in e for e in refreshed)
    # A line about the operator, not a pool, has neither.
    started = next(e for e in entries if e["msg"] == "starting runnerpool-operator")
    assert "pool" not in started and "reconcileID" not in started
    # Every line of a reconcile names the pool it worked for.
    by_id = {e["reconcileID"]: e["pool"] for e in entries if "reconcileID" in e}
    assert set(by_id) >= set(ids) and set(by_id.values()) == {key}
