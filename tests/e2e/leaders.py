"""Operator processes on one Lease (leader election), for the e2e tests that kill a leader.

The Lease is deploy/'s (its name, and its Role, which lets the operator's ServiceAccount read and
renew that one Lease only), in the test's own namespace: tests never share a Lease.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from runnerpool.settings import LeaderElectionSettings
from testworld.envtest.serviceaccount import allow_leader_election_in
from testworld.simulator import OperatorProcess

LEASE = LeaderElectionSettings().lease_name
LEASE_DURATION = 4
RETRY_PERIOD = 1.0


def leader_election_flags(api_client: client.ApiClient, namespace: str) -> tuple[str, ...]:
    """Short lease timings, so a SIGKILLed leader is replaced within seconds."""
    return (
        *allow_leader_election_in(api_client, namespace),
        "--lease-duration",
        str(LEASE_DURATION),
        "--renew-deadline",
        "2.5",
        "--retry-period",
        str(RETRY_PERIOD),
    )


def lease_holder(api_client: client.ApiClient, namespace: str) -> str | None:
    try:
        found = client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return found.spec.holder_identity or None


def log_records(operator: OperatorProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in operator.log_text().splitlines() if line.startswith("{")]


def became_leader(operator: OperatorProcess) -> bool:
    return any("became leader" in r.get("msg", "") for r in log_records(operator))
