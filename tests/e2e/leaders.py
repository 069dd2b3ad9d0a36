"""Operator processes on one Lease (leader election), for the e2e tests that kill a leader.

The Lease lives where deploy/ puts it (``runnerpool-system``, the only namespace whose Leases
the operator's ServiceAccount may touch), named after the test's namespace.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from testworld.envtest.serviceaccount import OPERATOR_NAMESPACE
from testworld.simulator import OperatorProcess

LEASE = "failover-test"
LEASE_DURATION = 4
RETRY_PERIOD = 1.0


def lease(namespace: str) -> str:
    return f"{LEASE}-{namespace}"


def leader_election_flags(namespace: str) -> tuple[str, ...]:
    """Short lease timings, so a SIGKILLed leader is replaced within seconds."""
    return (
        "--leader-elect",
        "--leader-election-namespace",
        OPERATOR_NAMESPACE,
        "--leader-election-id",
        lease(namespace),
        "--lease-duration",
        str(LEASE_DURATION),
        "--renew-deadline",
        "2.5",
        "--retry-period",
        str(RETRY_PERIOD),
    )


def lease_holder(api_client: client.ApiClient, namespace: str) -> str | None:
    try:
        found = client.CoordinationV1Api(api_client).read_namespaced_lease(
            lease(namespace), OPERATOR_NAMESPACE
        )
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found.spec.holder_identity or None


def log_records(operator: OperatorProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in operator.log_text().splitlines() if line.startswith("{")]


def became_leader(operator: OperatorProcess) -> bool:
    return any("became leader" in r.get("msg", "") for r in log_records(operator))
