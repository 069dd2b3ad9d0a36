"""The webhook receiver's account, as deploy/ installs it, against the real API server.

The receiver faces the internet (issue 30): whoever breaks into it gets its ServiceAccount's
token. That account may read RunnerPools and write their status, and read one Secret by
name (the pools' own webhook secrets, copied by the operator); the API server must refuse it
a tenant's credential Secret, any Secret list, the operator's own Secrets, and a pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from tests.helpers import wait_for
from tests.pools import create_pool, pat_secret, pool_manifest
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import OPERATOR_NAMESPACE, receiver_kubeconfig

MIRROR = "runnerpool-operator-webhook-pool-secrets"


@pytest.fixture
def receiver(control_plane: ControlPlane, runnerpool_crd: object) -> Iterator[client.ApiClient]:
    """An API client logged in as deploy/'s webhook receiver account."""
    path: Path = receiver_kubeconfig(control_plane)
    api_client = config.new_client_from_config(config_file=str(path))
    try:
        yield api_client
    finally:
        api_client.close()


def _status(call: Callable[[], object]) -> int:
    """The API server's answer: 200, or the refusal's code."""
    try:
        call()
    except ApiException as err:
        return int(err.status)
    return 200


def test_the_receiver_cannot_read_a_credential_secret_nor_create_a_pod(
    api_client: client.ApiClient, receiver: client.ApiClient, namespace: str
) -> None:
    pat_secret(api_client, namespace)
    as_receiver = client.CoreV1Api(receiver)
    pod = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    refused = {
        "get a credential Secret": _status(
            lambda: as_receiver.read_namespaced_secret(naming.DEFAULT_CREDENTIAL_SECRET, namespace)
        ),
        "list Secrets in a runner namespace": _status(lambda: as_receiver.list_namespaced_secret(namespace)),
        "list Secrets in its own namespace": _status(
            lambda: as_receiver.list_namespaced_secret(OPERATOR_NAMESPACE)
        ),
        "create a pod": _status(lambda: as_receiver.create_namespaced_pod(namespace, pod)),
        "list pods": _status(lambda: as_receiver.list_namespaced_pod(namespace)),
        "patch a pool's spec": _status(
            lambda: client.CustomObjectsApi(receiver).patch_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, "p", {"spec": {"replicas": 3}}
            )
        ),
    }
    assert refused == dict.fromkeys(refused, 403)


def test_the_receiver_reads_pools_writes_their_status_and_reads_the_mirror(
    api_client: client.ApiClient, receiver: client.ApiClient, namespace: str
) -> None:
    create_pool(api_client, namespace, pool_manifest("p", repo="acme/app"))
    custom = client.CustomObjectsApi(receiver)
    assert custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)["items"]
    custom.patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "p", {"status": {"demand": {"queued": 1}}}
    )
    mirror = client.CoreV1Api(receiver).read_namespaced_secret(MIRROR, OPERATOR_NAMESPACE)
    assert mirror.metadata.name == MIRROR


def test_the_receiver_changes_a_pools_demand_and_nothing_else_of_its_status(
    api_client: client.ApiClient, receiver: client.ApiClient, namespace: str
) -> None:
    """RBAC grants the whole status subresource; deploy/'s admission policy narrows it to
    status.demand, so a stolen receiver token cannot rewrite a pool's conditions, its counts
    (the scale subresource's), or take a count away."""
    create_pool(api_client, namespace, pool_manifest("p", repo="acme/app"))
    as_admin, as_receiver = client.CustomObjectsApi(api_client), client.CustomObjectsApi(receiver)

    def patch(custom: client.CustomObjectsApi, status: dict[str, object]) -> int:
        return _status(
            lambda: custom.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, namespace, api.PLURAL, "p", {"status": status}
            )
        )

    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "RunnersReady",
        "message": "",
        "lastTransitionTime": "2030-01-01T00:00:00Z",
    }
    the_operators = {"readyReplicas": 1, "conditions": [ready], "runners": {"online": 1, "busy": 1}}
    assert patch(as_admin, the_operators) == 200
    wait_for(lambda: patch(as_receiver, {"desiredReplicas": 7}) == 403, message="the policy to take effect")
    refused = {
        "set replicas": patch(as_receiver, {"replicas": 9}),
        "take readyReplicas away": patch(as_receiver, {"readyReplicas": None}),
        "say it is not ready": patch(as_receiver, {"conditions": [{**ready, "status": "False"}]}),
        "count no busy runner": patch(as_receiver, {"runners": {"busy": 0}}),
        "write demand and a count together": patch(as_receiver, {"demand": {"queued": 2}, "replicas": 9}),
    }
    assert refused == dict.fromkeys(refused, 403)
    assert patch(as_receiver, {"demand": {"queued": 3}}) == 200
    status = as_admin.get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, "p")[
        "status"
    ]
    assert status["demand"]["queued"] == 3 and "replicas" not in status
    assert {k: status[k] for k in the_operators} == the_operators
