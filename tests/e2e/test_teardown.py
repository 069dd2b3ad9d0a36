"""Teardown and self-healing with the operator as a process: what users do all the time.

Deleting a whole namespace (preview environments, tenant offboarding) must finish and leave
nothing registered on GitHub, although the namespace controller deletes the credential
Secret alongside the pools that need it to deregister.  A token Secret that loses its token
must get one back at once, from the scope's still-fresh token, without asking GitHub.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from runnerpool import children, naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import (
    ORG,
    REPO,
    delete_namespace_and_wait,
    namespace_gone,
    runners_of_namespace,
    token_of,
    wait_condition,
    wait_token,
)
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.envtest.serviceaccount import OPERATOR_SERVICE_ACCOUNT
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess, RunnerSimulator

pytestmark = pytest.mark.usefixtures("credentials")

#: A token Secret that lost its token has one again within this many seconds.
TOKEN_BACK_WITHIN = 5.0


def _error_lines(operator: OperatorProcess) -> list[str]:
    lines = []
    for line in operator.log_text().splitlines():
        if not line.startswith("{"):
            continue  # the harness's start marker
        if json.loads(line).get("level") in ("error", "critical"):
            lines.append(line)
    return lines


def test_deleting_a_namespace_deregisters_every_runner_and_finishes(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    operator: OperatorProcess,
    simulator: RunnerSimulator,
) -> None:
    """3 pools, their runners registered, the credential Secret in the same namespace."""
    for name, scope in (("web", {"repo": REPO}), ("api", {"repo": REPO}), ("org", {"org": ORG})):
        create_pool(api_client, namespace, pool_manifest(name, replicas=2, **scope))
    assert simulator.wait(lambda s: len(s.registrations(namespace)) == 6), simulator.rejections
    assert len(runners_of_namespace(fake_github, namespace)) == 6

    core = client.CoreV1Api(api_client)
    started = time.monotonic()
    delete_namespace_and_wait(core, namespace)
    took = time.monotonic() - started

    assert runners_of_namespace(fake_github, namespace) == [], "runners left registered on GitHub"
    assert _error_lines(operator) == [], "a namespace being deleted is no error"
    print(f"namespace gone {took:.1f}s after its deletion")


def test_a_namespace_whose_last_pool_went_while_no_operator_led_finishes_once_one_leads(
    api_client: client.ApiClient, namespace: str, credentials: str, start_operator: StartOperator
) -> None:
    """The leader was killed between the last pool's finalizer and the releases of the credential
    Secret and of the RoleBinding that enables the operator there: both keep the operator's
    finalizer, and no pool is left whose pass would come. Deleting the namespace must still
    finish, once an operator leads."""
    client.RbacAuthorizationV1Api(api_client).patch_namespaced_role_binding(
        OPERATOR_SERVICE_ACCOUNT, namespace, {"metadata": {"finalizers": [naming.BINDING_FINALIZER]}}
    )
    core = client.CoreV1Api(api_client)
    protection = {
        "finalizers": [naming.CREDENTIAL_FINALIZER],
        "labels": {naming.CREDENTIAL_LABEL: naming.CREDENTIAL_VALUE},
    }
    core.patch_namespaced_secret(credentials, namespace, {"metadata": protection})
    core.delete_namespace(namespace)

    start_operator()

    wait_for(lambda: namespace_gone(core, namespace), message=f"namespace {namespace} to be gone")


def test_a_live_namespace_whose_last_pool_went_while_no_operator_led_is_left_clean_once_one_leads(
    api_client: client.ApiClient, namespace: str, credentials: str, start_operator: StartOperator
) -> None:
    """The same stop, but the namespace stays (the team deleted its pools, not the namespace):
    the next leader releases the Secret and the binding and deletes the busy budget that the
    gone pools' passes would have deleted; nothing of the operator is left there."""
    client.RbacAuthorizationV1Api(api_client).patch_namespaced_role_binding(
        OPERATOR_SERVICE_ACCOUNT, namespace, {"metadata": {"finalizers": [naming.BINDING_FINALIZER]}}
    )
    policy = client.PolicyV1Api(api_client)
    policy.create_namespaced_pod_disruption_budget(namespace, children.disruption_budget(namespace))

    start_operator()

    def left_clean() -> bool:
        budgets = policy.list_namespaced_pod_disruption_budget(namespace).items
        binding = client.RbacAuthorizationV1Api(api_client).read_namespaced_role_binding(
            OPERATOR_SERVICE_ACCOUNT, namespace
        )
        return not budgets and not binding.metadata.finalizers

    wait_for(left_clean, message=f"the busy budget and the binding's finalizer in {namespace} to be gone")


def test_a_lost_token_comes_back_at_once_without_asking_github(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    # No runner listing in between: every GitHub request would be the refill's.
    start_operator("--runner-sync-interval", "3600")
    create_pool(api_client, namespace, pool_manifest("heal", repo=REPO, replicas=1))
    first = token_of(wait_token(api_client, namespace, "heal"))
    wait_condition(api_client, namespace, "heal", "Ready", "True")
    core = client.CoreV1Api(api_client)
    name = naming.token_secret_name("heal")

    for how in ("deleted", "emptied by hand"):
        requests = fake_github.count()
        started = time.monotonic()
        if how == "deleted":
            core.delete_namespaced_secret(name, namespace)  # gone once this returns
        else:
            core.patch_namespaced_secret(name, namespace, {"data": {naming.TOKEN_SECRET_KEY: None}})
        secret = wait_token(api_client, namespace, "heal", timeout=TOKEN_BACK_WITHIN)
        took = time.monotonic() - started

        assert token_of(secret) == first, f"{how}: the scope's fresh token, not a new one"
        assert fake_github.count() == requests, f"{how}: no GitHub request for a token still fresh"
        print(f"token back {took:.2f}s after the Secret was {how}")
