"""SIGKILL the operator at random moments while pools come and go; after restarts it converges.

The moments are random but reproducible: the seed is fixed (override with
``E2E_CHURN_SEED``) and each kill waits for a random number of further GitHub requests, so a
kill lands in the middle of the operator's own work (filling tokens, listing or deleting
runners) rather than at a wall-clock instant that a slower machine would shift.
"""

from __future__ import annotations

import os
import random

import pytest
from kubernetes import client

from runnerpool import api
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import (
    ORG,
    OTHER_REPO,
    REPO,
    get_pool,
    managed_children,
    pool_runners,
    wait_condition,
    wait_gone,
)
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

SEED = int(os.environ.get("E2E_CHURN_SEED", "20261129"))
POOLS = 10
DOOMED = 6
ROUNDS = 3


class Churn:
    """The scenario's moving parts and a record of where each kill landed, for failures."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        fake: FakeGitHub,
        operator: OperatorProcess,
        seed: int = SEED,
    ) -> None:
        self.api = api_client
        self.namespace = namespace
        self.fake = fake
        self.operator = operator
        self.seed = seed
        self.rng = random.Random(seed)
        self.kills: list[str] = []

    def kill_after_some_requests(self) -> None:
        """SIGKILL once GitHub has answered 1-6 more requests (or after 10 s of silence)."""
        target = len(self.fake.requests) + self.rng.randint(1, 6)
        self.fake.wait_for(lambda: len(self.fake.requests) >= target, timeout=10)
        self.operator.kill()
        last = self.fake.requests[-1] if self.fake.requests else None
        self.kills.append(
            f"after {len(self.fake.requests)} requests, last {last.method} {last.path}" if last else "-"
        )

    def restart(self) -> None:
        self.operator.start().wait_ready()

    def delete(self, name: str) -> None:
        client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, self.namespace, api.PLURAL, name
        )

    def story(self) -> str:
        return f"seed {self.seed}; kills: {self.kills}"


@pytest.mark.usefixtures("credentials", "simulator", "gc_follows_pools")
def test_operator_converges_after_sigkills_during_churn(
    api_client: client.ApiClient, namespace: str, fake_github: FakeGitHub, start_operator: StartOperator
) -> None:
    run_churn(api_client, namespace, fake_github, start_operator, SEED)


def run_churn(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    seed: int,
) -> None:
    churn = Churn(api_client, namespace, fake_github, start_operator(), seed)
    rng = churn.rng
    names = [f"churn-{i}" for i in range(POOLS)]
    scopes = {name: rng.choice([REPO, OTHER_REPO, ORG]) for name in names}
    doomed = rng.sample(names, DOOMED)
    kept = sorted(set(names) - set(doomed))
    batches = [doomed[i::ROUNDS] for i in range(ROUNDS)]

    for name in rng.sample(names, len(names)):
        scope = scopes[name]
        manifest = (
            pool_manifest(name, org=scope, replicas=1) if scope == ORG else pool_manifest(name, repo=scope)
        )
        create_pool(api_client, namespace, manifest)
    for batch in batches:
        churn.kill_after_some_requests()
        down = rng.random() < 0.5  # delete while the operator is dead, or just after it is back
        if not down:
            churn.restart()
        for name in batch:
            churn.delete(name)
        if down:
            churn.restart()

    story = churn.story()
    print(story)
    for name in doomed:
        wait_gone(api_client, namespace, name, timeout=60)
        # The finalizer may only go once the pool's runners are deregistered.
        assert pool_runners(fake_github, scopes[name], namespace, name) == [], f"{name} left runners; {story}"
    for name in kept:
        wait_condition(api_client, namespace, name, "Ready", "True", timeout=60)
        assert len(pool_runners(fake_github, scopes[name], namespace, name)) == 1, story
    remaining = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL
    )["items"]
    assert sorted(p["metadata"]["name"] for p in remaining) == kept, story
    assert not any(p["metadata"].get("deletionTimestamp") for p in remaining), story
    wait_for(
        lambda: set(managed_children(api_client, namespace)) == {*kept, "*"},
        timeout=60,
        message=f"only the kept pools' Secrets, budgets and pods to remain; {story}",
    )
    children = managed_children(api_client, namespace)
    assert children.pop("*") == {"PodDisruptionBudget"}, "the namespace's one busy budget"
    assert all(kinds == {"Secret", "Pod"} for kinds in children.values())
    registered = [r for scope in (REPO, OTHER_REPO, ORG) for r in fake_github.runners(scope)]
    assert len(registered) == len(kept), f"{[r['name'] for r in registered]}; {story}"
    assert churn.operator.starts == ROUNDS + 1
    assert all(get_pool(api_client, namespace, name) is not None for name in kept)
