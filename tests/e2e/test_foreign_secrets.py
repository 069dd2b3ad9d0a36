"""The operator process caches only its own Secrets, however many others its namespaces hold.

The count comes from the operator's ``runnerpool_cache_objects`` gauge; no timing: foreign
Secrets made before the start (the initial list) and after it (the watch), then a Secret of
the operator's own made after them (each pool's token Secret deleted, and made again by the
operator), so the watch has passed every foreign Secret's event when the count is read.
``bench/foreign_secrets.py`` measures what 20,000 of them would cost in memory.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from runnerpool import naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import REPO, token_secret, wait_token
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.simulator import OperatorProcess

pytestmark = pytest.mark.usefixtures("credentials")

FOREIGN = 200


def _foreign(core: client.CoreV1Api, namespace: str, prefix: str) -> None:
    for index in range(FOREIGN // 2):
        body = {"metadata": {"name": f"{prefix}-{index}"}, "stringData": {"blob": "x" * 4096}}
        core.create_namespaced_secret(namespace, body)


def _cached(operator: OperatorProcess) -> dict[str, float]:
    return {
        s.labels["watch"]: s.value
        for family in text_string_to_metric_families(operator.metrics())
        for s in family.samples
        if s.name == "runnerpool_cache_objects"
    }


def test_the_cache_holds_the_pools_secrets_and_no_other(
    api_client: client.ApiClient, namespace: str, start_operator: StartOperator
) -> None:
    core = client.CoreV1Api(api_client)
    _foreign(core, namespace, "before")
    operator = start_operator()
    create_pool(api_client, namespace, pool_manifest("only", repo=REPO, replicas=0))
    first = wait_token(api_client, namespace, "only")
    _foreign(core, namespace, "after")

    core.delete_namespaced_secret(naming.token_secret_name("only"), namespace)
    wait_for(
        lambda: (
            (token_secret(api_client, namespace, "only") or first)["metadata"]["uid"]
            != first["metadata"]["uid"]
        ),
        message="the token Secret made again",
    )

    # The operator made it after it had taken in the deletion; its own copy arrives next.
    wait_for(lambda: _cached(operator).get("Secrets") == 1.0, message="the token Secret cached again")
    assert _cached(operator)["CredentialSecrets"] == 1.0, f"{FOREIGN} foreign Secrets, none cached"
    labels = core.read_namespaced_secret(naming.DEFAULT_CREDENTIAL_SECRET, namespace).metadata.labels
    assert labels == {naming.CREDENTIAL_LABEL: naming.CREDENTIAL_VALUE}
