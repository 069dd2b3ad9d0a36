"""Two operator processes on one Lease: one reconciles; a SIGKILLed leader is replaced in time.

The Lease and its timings: ``tests.e2e.leaders``.
"""

from __future__ import annotations

import signal
import time

from kubernetes import client

from runnerpool import naming
from tests.e2e.conftest import StartOperator
from tests.e2e.leaders import (
    LEASE_DURATION,
    RETRY_PERIOD,
    became_leader,
    leader_election_flags,
    lease_holder,
    log_records,
)
from tests.e2e.runners import REPO, get_pool
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.simulator import OperatorProcess


def _reconciled(operator: OperatorProcess, pool: str) -> bool:
    """``pool`` as the log writes it: ``namespace/name``."""
    return any(r.get("msg") == "reconciled pool" and r.get("pool") == pool for r in log_records(operator))


def _has_finalizer(api_client: client.ApiClient, namespace: str, name: str) -> bool:
    pool = get_pool(api_client, namespace, name) or {}
    return naming.POOL_FINALIZER in (pool.get("metadata") or {}).get("finalizers", [])


def test_one_leader_reconciles_and_a_killed_leader_hands_over(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    start_operator: StartOperator,
) -> None:
    flags = leader_election_flags(api_client, namespace)
    first, second = start_operator(*flags), start_operator(*flags)
    holder = wait_for(lambda: lease_holder(api_client, namespace), message="a Lease holder")
    leader = wait_for(
        lambda: next((op for op in (first, second) if became_leader(op)), None),
        message="a leader's log line",
    )
    standby = second if leader is first else first

    create_pool(api_client, namespace, pool_manifest("before", repo=REPO))
    wait_for(lambda: _has_finalizer(api_client, namespace, "before"), message="the leader to reconcile")
    wait_for(lambda: _reconciled(leader, f"{namespace}/before"), message="the leader's log line for the pool")
    assert not _reconciled(standby, f"{namespace}/before"), "a standby replica must not reconcile"

    assert leader.popen is not None
    leader.popen.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    leader.popen.wait()
    wait_for(
        lambda: lease_holder(api_client, namespace) not in (None, holder),
        timeout=LEASE_DURATION * 3,
        interval=0.05,
        message="the standby to take the Lease",
    )
    failover = time.monotonic() - killed_at
    print(f"leader failover after SIGKILL: {failover:.2f}s (lease duration {LEASE_DURATION}s)")
    assert failover <= LEASE_DURATION + 2 * RETRY_PERIOD + 1.0

    create_pool(api_client, namespace, pool_manifest("after", repo=REPO))
    wait_for(lambda: _reconciled(standby, f"{namespace}/after"), message="the new leader to reconcile")
    assert _has_finalizer(api_client, namespace, "after")

    leader.start().wait_ready()  # back as a standby, so teardown stops both cleanly
