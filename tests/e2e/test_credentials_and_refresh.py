"""Registration tokens over time: refreshed before they expire, and what bad credentials do.

These run first in the e2e suite (files run in name order): the refresh test is the slowest
one, and meanwhile the garbage-collector probe started by conftest finishes in the background.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from runnerpool import api, naming
from tests.e2e.conftest import StartOperator, node_pool
from tests.e2e.runners import (
    BAD_PAT,
    GOOD_PAT,
    REPO,
    condition,
    events,
    get_pool,
    pool_runners,
    token_of,
    token_secret,
    wait_condition,
    wait_token,
)
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.node.node import Node
from testworld.simulator import RunnerSimulator

#: A short token life and a margin just under it make the operator refresh as soon as it may.
TOKEN_LIFETIME = 180.0
MARGIN_MINUTES = 2.9
#: The secret updater never refreshes sooner than a minute after a success
#: (secret_updater.timing.RetryPolicy.min_refresh), so that is how long this test waits.
REFRESH_WITHIN = 90.0
NODE_TIMEOUT = 90.0


@pytest.mark.usefixtures("credentials")
def test_token_is_refreshed_before_it_expires(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    node: Node,
) -> None:
    """On the node: a runner pod started after the refresh registers with the new token."""
    fake_github.registration_token_lifetime = TOKEN_LIFETIME
    start_operator(
        "--token-refresh-margin", str(MARGIN_MINUTES), "--runner-image", node.runner_image.reference
    )
    create_pool(api_client, namespace, node_pool("fresh", replicas=1))
    first = token_of(wait_token(api_client, namespace, "fresh"))
    wait_condition(api_client, namespace, "fresh", "Ready", "True", timeout=NODE_TIMEOUT)
    [issued] = fake_github.tokens_issued(REPO)
    assert issued.token == first

    assert fake_github.wait_for(lambda: len(fake_github.tokens_issued(REPO)) >= 2, timeout=REFRESH_WITHIN)
    second = fake_github.tokens_issued(REPO)[1]
    assert second.issued_at < issued.expires_at, "refreshed only after the old token had expired"
    secret = wait_token(api_client, namespace, "fresh", unlike=first)
    assert token_of(secret) == second.token
    published = secret["metadata"]["annotations"][naming.TOKEN_EXPIRY_ANNOTATION]
    assert published == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(second.expires_at)))
    wait_for(
        lambda: (
            ((get_pool(api_client, namespace, "fresh") or {}).get("status") or {}).get("tokenExpiresAt")
            == published
        ),
        message="the pool's status to report the new expiry",
    )

    # A pod started now registers with the new token.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "fresh", {"spec": {"replicas": 2}}
    )
    assert fake_github.wait_for(lambda: fake_github.token_uses(second.token) == 1, timeout=NODE_TIMEOUT)
    assert fake_github.token_uses(first) == 1
    assert len(pool_runners(fake_github, REPO, namespace, "fresh")) == 2
    wait_condition(api_client, namespace, "fresh", "Ready", "True", timeout=NODE_TIMEOUT)


def test_bad_credentials_are_reported_and_fixing_the_secret_recovers(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": BAD_PAT}}
    )
    start_operator()
    create_pool(api_client, namespace, pool_manifest("locked", repo=REPO, replicas=1))

    pool = wait_condition(api_client, namespace, "locked", "TokenReady", "False", reason="BadCredentials")
    message = condition(pool, "TokenReady")["message"]  # type: ignore[index]
    assert "401" in message and BAD_PAT not in message
    ready = condition(pool, "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "TokenNotReady")
    wait_for(
        lambda: any(
            t == "Warning" and r == "BadCredentials" for t, r, _ in events(api_client, namespace, "locked")
        ),
        message="a BadCredentials Warning event",
    )
    assert token_of(token_secret(api_client, namespace, "locked")) is None
    assert client.CoreV1Api(api_client).list_namespaced_pod(namespace).items == [], "no pod without a token"
    assert fake_github.count("actions/create-registration-token-for-repo", status=401) >= 1

    # The fix, in place and without touching the operator: the PAT in the Secret is replaced.
    # Well within the secret updater's first retry of a permanent failure (1-2 minutes): the
    # change of the Secret itself must set the retry off.
    core.patch_namespaced_secret(
        naming.DEFAULT_CREDENTIAL_SECRET, namespace, {"stringData": {"token": GOOD_PAT}}
    )
    wait_token(api_client, namespace, "locked", timeout=15)
    pool = wait_condition(api_client, namespace, "locked", "Ready", "True")
    token_ready = condition(pool, "TokenReady")
    assert token_ready is not None and (token_ready["status"], token_ready["reason"]) == (
        "True",
        "TokenIssued",
    )
    assert len(simulator.registrations(namespace, "locked")) == 1
