"""Secrets by name until the cache has them: bounded reads, a missing one backed off."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool.runtime.kube import Kube, Resource
from runnerpool.secret_reads import SecretReads

Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Server(Kube):
    """The API server's Secrets, counting the reads by name."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.secrets: dict[tuple[str, str], Obj] = {}
        self.gets = 0

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        self.gets += 1
        found = self.secrets.get((namespace or "", name))
        if found is None:
            raise ApiException(status=404, reason="Not Found")
        return found


class Cache:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], Obj] = {}

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        return self.secrets.get((namespace, name))


def secret(version: str = "1") -> Obj:
    return {
        "metadata": {"name": "creds", "namespace": "ns", "resourceVersion": version},
        "data": {"token": "eA=="},
    }


@pytest.fixture
def world() -> tuple[SecretReads, Server, Cache, Clock]:
    server, cache, clock = Server(), Cache(), Clock()
    return SecretReads(cache, server, clock=clock), server, cache, clock


def test_a_cached_secret_costs_no_read(world: tuple[SecretReads, Server, Cache, Clock]) -> None:
    reads, server, cache, _ = world
    cache.secrets[("ns", "creds")] = secret()
    assert reads.get("ns", "creds") == secret()
    assert reads.read("ns", "creds") == secret()
    assert server.gets == 0


def test_a_secret_not_cached_yet_is_read_by_name_and_the_read_reused_for_its_data(
    world: tuple[SecretReads, Server, Cache, Clock],
) -> None:
    reads, server, cache, clock = world
    server.secrets[("ns", "creds")] = secret()
    assert reads.get("ns", "creds") == secret(), "a new pool does not wait for the label"
    assert reads.get("ns", "creds") == secret()
    assert server.gets == 1
    assert reads.read("ns", "creds") == secret(), "what protection decides on is read again"
    assert server.gets == 2
    clock.now += 11
    reads.get("ns", "creds")
    assert server.gets == 3, "kept 10 s at most"
    cache.secrets[("ns", "creds")] = secret("2")
    assert reads.get("ns", "creds") == secret("2"), "the cache wins once it has the Secret"
    assert server.gets == 3


def test_what_a_write_answered_is_reused_until_the_cache_has_it(
    world: tuple[SecretReads, Server, Cache, Clock],
) -> None:
    reads, server, _, _ = world
    reads.remember("ns", "creds", secret("7"))
    assert reads.get("ns", "creds") == secret("7")
    assert server.gets == 0
    reads.forget("ns", "creds")
    assert reads.get("ns", "creds") is None
    assert server.gets == 1


def test_a_missing_secret_is_read_again_after_a_doubling_backoff(
    world: tuple[SecretReads, Server, Cache, Clock],
) -> None:
    """However often its pools ask, at most one read per backoff: 1, 2, 4 ... 30 s."""
    reads, server, _, clock = world
    waits = []
    for _ in range(7):
        for _ in range(5):  # five pools naming it, or five passes of one
            assert reads.read("ns", "creds") is None
            assert reads.get("ns", "creds") is None
        wait = reads.retry_in("ns", "creds")
        assert wait is not None
        waits.append(wait)
        clock.now += wait
    assert waits == [1, 2, 4, 8, 16, 30, 30]
    assert server.gets == 7

    server.secrets[("ns", "creds")] = secret()  # created after the pools that name it
    assert reads.read("ns", "creds") == secret()
    assert reads.retry_in("ns", "creds") is None, "found: nothing to look for again"


def test_a_callers_max_age_bounds_both_the_reuse_and_the_backoff(
    world: tuple[SecretReads, Server, Cache, Clock],
) -> None:
    """A webhook secret's condition asks with its own age: a Secret created after the pool is
    found within that age, not the backoff's 30 s later; a found one is reused only that long."""
    reads, server, _, clock = world
    for _ in range(6):  # the backoff climbs to 30 s
        reads.read("ns", "creds")
        clock.now += reads.retry_in("ns", "creds") or 0
    reads.read("ns", "creds")
    gets = server.gets
    assert reads.get("ns", "creds", max_age=5) is None and server.gets == gets, "within the age: no read"
    server.secrets[("ns", "creds")] = secret()
    clock.now += 5
    assert reads.get("ns", "creds", max_age=5) == secret(), "found 5 s on, not 30"
    assert reads.age("ns", "creds") == 0
    server.secrets[("ns", "creds")] = secret("2")
    clock.now += 4
    assert reads.get("ns", "creds", max_age=5) == secret(), "reused within the age"
    clock.now += 1
    assert reads.get("ns", "creds", max_age=5) == secret("2")


def test_other_errors_are_not_taken_for_a_missing_secret(
    world: tuple[SecretReads, Server, Cache, Clock],
) -> None:
    reads, server, _, _ = world

    def refuse(resource: Resource, namespace: str | None, name: str) -> Obj:
        raise ApiException(status=403, reason="Forbidden")

    server.get = refuse  # type: ignore[method-assign]
    with pytest.raises(ApiException):
        reads.get("ns", "creds")
    assert reads.retry_in("ns", "creds") is None


def test_the_reads_kept_are_bounded() -> None:
    server, cache = Server(), Cache()
    reads = SecretReads(cache, server, capacity=3)
    for index in range(10):
        reads.remember("ns", f"s{index}", secret())
    assert len(reads._reads) == 3


def test_a_reused_read_is_shared_not_copied(world: tuple[SecretReads, Server, Cache, Clock]) -> None:
    """Every delivery anyone posts to the receiver asks for its copy of every pool's webhook
    secret: a deep copy of that Secret per ask was the cost of a forged delivery."""
    reads, server, _, _ = world
    server.secrets[("ns", "creds")] = secret()
    first = reads.get("ns", "creds")
    assert reads.get("ns", "creds") is first
    assert reads.kept("ns", "creds") is first
    assert server.gets == 1
