"""Leader election on a real Lease, plus the checks that need no API server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runnerpool.runtime.leader import LeaderElector
from runnerpool.settings import LeaderElectionSettings
from tests.helpers import wait_for
from testworld.envtest.controlplane import ControlPlane

LEASE = "runnerpool-operator"


def election(namespace: str, identity: str, **timings: Any) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        enabled=True, namespace=namespace, lease_name=LEASE, identity=identity, **timings
    )


class Candidate:
    """A LeaderElector running in its own thread, with its callbacks recorded."""

    def __init__(self, api_client: client.ApiClient, namespace: str, identity: str, **kwargs: Any) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.holder_when_stopped: str | None = None
        self._coordination = client.CoordinationV1Api(api_client)
        self._namespace = namespace
        kwargs.setdefault("lease_duration", 15)
        kwargs.setdefault("renew_deadline", 10)
        kwargs.setdefault("retry_period", 1)
        self.elector = LeaderElector(
            api_client,
            election(namespace, identity, **kwargs),
            on_started_leading=self.started.set,
            on_stopped_leading=self._on_stopped,
        )
        self.thread = threading.Thread(target=self.elector.run, name=f"elector-{identity}", daemon=True)

    def _on_stopped(self) -> None:
        self.holder_when_stopped = holder(self._coordination, self._namespace)
        self.stopped.set()

    def start(self) -> Candidate:
        self.thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        assert self.elector.stop(release=release, timeout=15)
        self.thread.join(5)
        assert not self.thread.is_alive()


def holder(coordination: client.CoordinationV1Api, namespace: str) -> str | None:
    spec = coordination.read_namespaced_lease(LEASE, namespace).spec
    return spec.holder_identity if spec else None


@pytest.fixture
def candidates(api_client: client.ApiClient, namespace: str) -> Iterator[list[Candidate]]:
    made: list[Candidate] = []
    yield made
    for candidate in made:
        candidate.elector.stop(release=False, timeout=15)


def first_leader(a: Candidate, b: Candidate, timeout: float = 20) -> tuple[Candidate, Candidate]:
    wait_for(lambda: a.started.is_set() or b.started.is_set(), timeout=timeout, message="a leader")
    return (a, b) if a.started.is_set() else (b, a)


def test_exactly_one_leads_and_release_hands_over_fast(
    api_client: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    coordination = client.CoordinationV1Api(api_client)
    a = Candidate(api_client, namespace, "replica-a")
    b = Candidate(api_client, namespace, "replica-b")
    candidates += [a, b]
    a.start()
    b.start()
    leader, follower = first_leader(a, b)
    # A few retry periods later the follower is still waiting.
    assert not follower.started.wait(3)
    assert leader.elector.is_leader and not follower.elector.is_leader
    assert holder(coordination, namespace) == leader.elector.identity

    handed_over_from = time.monotonic()
    leader.stop(release=True)
    assert leader.stopped.is_set()
    # on_stopped_leading ran while the Lease was still ours: work stops before the successor starts.
    assert leader.holder_when_stopped == leader.elector.identity
    # Much sooner than the 15 s lease duration: the Lease was released.
    assert follower.started.wait(5), "follower did not take over after release"
    assert time.monotonic() - handed_over_from < 5
    assert holder(coordination, namespace) == follower.elector.identity
    follower.stop(release=True)
    assert holder(coordination, namespace) is None


def lease_requests(plane: ControlPlane, namespace: str) -> list[tuple[str, int]]:
    """(verb, HTTP code) of every request on the test's Lease, from the API server's audit log."""
    return [
        (e["verb"], int((e.get("responseStatus") or {}).get("code", 0)))
        for e in plane.audit_events()
        if e.get("stage") == "ResponseComplete"
        and (e.get("objectRef") or {}).get("resource") == "leases"
        and e["objectRef"].get("namespace") == namespace
        and e["objectRef"].get("name") == LEASE
    ]


def renewals(plane: ControlPlane, namespace: str) -> int:
    return sum(1 for verb, code in lease_requests(plane, namespace) if verb == "update" and code == 200)


def gets(plane: ControlPlane, namespace: str) -> int:
    return sum(1 for verb, _ in lease_requests(plane, namespace) if verb == "get")


def test_the_holder_renews_without_reading_the_lease(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, candidates: list[Candidate]
) -> None:
    """client-go renews from its last observed Lease; a GET per renewal is 90 reads per 3 minutes."""
    a = Candidate(api_client, namespace, "replica-a").start()
    candidates.append(a)
    assert a.started.wait(20)
    wait_for(lambda: renewals(control_plane, namespace) >= 6, timeout=20, message="6 renewals")
    assert gets(control_plane, namespace) <= 1, lease_requests(control_plane, namespace)
    assert a.elector.is_leader


def test_a_renewal_that_conflicts_reads_the_lease_once_and_keeps_leading(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, candidates: list[Candidate]
) -> None:
    coordination = client.CoordinationV1Api(api_client)
    a = Candidate(api_client, namespace, "replica-a").start()
    candidates.append(a)
    assert a.started.wait(20)
    wait_for(lambda: renewals(control_plane, namespace) >= 2, timeout=20, message="2 renewals")
    reads_before = gets(control_plane, namespace)
    # Anyone else's write moves the resourceVersion the holder's next replace carries.
    coordination.patch_namespaced_lease(LEASE, namespace, {"metadata": {"labels": {"touched": "yes"}}})
    wait_for(
        lambda: ("update", 409) in lease_requests(control_plane, namespace),
        timeout=10,
        message="the stale renewal to be refused",
    )
    settled = renewals(control_plane, namespace)
    wait_for(lambda: renewals(control_plane, namespace) >= settled + 3, timeout=20, message="3 more renewals")
    assert gets(control_plane, namespace) - reads_before == 1, lease_requests(control_plane, namespace)
    assert a.elector.is_leader and not a.stopped.is_set()
    assert holder(coordination, namespace) == "replica-a"


def test_stop_without_release_keeps_the_lease(
    api_client: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    coordination = client.CoordinationV1Api(api_client)
    a = Candidate(api_client, namespace, "replica-a").start()
    candidates.append(a)
    assert a.started.wait(20)
    a.stop(release=False)
    assert a.stopped.is_set()
    assert not a.elector.is_leader
    assert holder(coordination, namespace) == "replica-a"


def test_stopping_a_follower_is_prompt(
    api_client: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    a = Candidate(api_client, namespace, "replica-a").start()
    candidates.append(a)
    assert a.started.wait(20)
    b = Candidate(api_client, namespace, "replica-b").start()
    candidates.append(b)
    assert not b.started.wait(1.5)
    began = time.monotonic()
    b.stop(release=True)
    assert time.monotonic() - began < 3
    assert not b.started.is_set() and not b.stopped.is_set(), "a follower never leads, so never stops leading"
    assert holder(client.CoordinationV1Api(api_client), namespace) == "replica-a"


def test_lost_lease_calls_on_stopped_and_returns(
    api_client: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    coordination = client.CoordinationV1Api(api_client)
    a = Candidate(api_client, namespace, "replica-a", lease_duration=3, renew_deadline=2, retry_period=1)
    candidates.append(a)
    a.start()
    assert a.started.wait(20)

    def steal() -> bool:
        lease = coordination.read_namespaced_lease(LEASE, namespace)
        now = datetime.now(UTC).replace(microsecond=1)
        lease.spec.holder_identity = "intruder"
        lease.spec.lease_duration_seconds = 60
        lease.spec.acquire_time = now
        lease.spec.renew_time = now
        try:
            coordination.replace_namespaced_lease(LEASE, namespace, lease)
        except ApiException as err:
            if err.status == 409:  # raced with a renewal
                return False
            raise
        return True

    wait_for(steal, timeout=10, message="intruder to take the lease")
    assert a.stopped.wait(10), "leader did not notice it lost the lease"
    a.thread.join(5)
    assert not a.thread.is_alive(), "run() returns after losing the lease"
    assert not a.elector.is_leader
    assert holder(coordination, namespace) == "intruder", "a lost lease is not 'released'"


def test_on_stopped_waits_for_on_started(
    api_client: client.ApiClient, namespace: str, candidates: list[Candidate]
) -> None:
    entered = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def slow_start() -> None:
        entered.set()
        assert release.wait(10)
        order.append("started")

    elector = LeaderElector(
        api_client,
        election(namespace, "replica-a", retry_period=1),
        on_started_leading=slow_start,
        on_stopped_leading=lambda: order.append("stopped"),
    )
    runner = threading.Thread(target=elector.run, daemon=True)
    runner.start()
    assert entered.wait(20)
    stopper = threading.Thread(target=lambda: elector.stop(release=True, timeout=15), daemon=True)
    stopper.start()
    stopper.join(1.5)
    assert order == []
    release.set()
    stopper.join(10)
    runner.join(5)
    assert order == ["started", "stopped"]


# --------------------------------------------------------------------------- no API server


def test_invalid_timings_raise_value_error() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(client.ApiClient(), election("ns", "me", lease_duration=5, renew_deadline=10))
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElector(client.ApiClient(), election("ns", "me", renew_deadline=2, retry_period=2))


def test_unreachable_api_server_neither_crashes_nor_blocks_stop() -> None:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: connection refused
    configuration.retries = 0
    elector = LeaderElector(client.ApiClient(configuration), election("ns", "me", retry_period=1))
    runner = threading.Thread(target=elector.run, daemon=True)
    runner.start()
    assert not elector.is_leader
    runner.join(1.5)
    assert runner.is_alive(), "a transport error must not end the election loop"
    assert elector.stop(timeout=5)
    runner.join(5)
    assert not runner.is_alive()


def test_stop_before_run() -> None:
    elector = LeaderElector(client.ApiClient(), election("ns", "me"))
    assert elector.stop()
    elector.run()  # returns at once
    with pytest.raises(RuntimeError):
        elector.run()


def test_a_silent_api_server_holds_a_lease_call_no_longer_than_the_renew_deadline() -> None:
    """client-go bounds a renewal by the renew deadline; a Lease call on ``--api-timeout`` alone
    (15 s, four attempts) let a leader whose server stopped answering believe it led a minute."""
    renew_deadline = 2.0
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel accepts; nobody answers
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
    elector = LeaderElector(
        client.ApiClient(configuration),
        election("ns", "me", lease_duration=3, renew_deadline=renew_deadline, retry_period=1),
    )
    runner = threading.Thread(target=elector.run, daemon=True)
    try:
        runner.start()
        silent.settimeout(10)
        held, _ = silent.accept()  # the elector's first Lease read is in flight
        with held:
            assert elector.stop(timeout=renew_deadline + 3), "the Lease read outlived the renew deadline"
    finally:
        silent.close()
    assert not elector.is_leader
