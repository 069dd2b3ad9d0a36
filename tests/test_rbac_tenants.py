"""Namespace owners use RunnerPools with the built-in roles: deploy/rbac's aggregated ClusterRoles.

A user with the built-in ``edit`` role in one namespace (a RoleBinding, the way a platform team
hands out namespaces) creates, scales and deletes pools there and nowhere else; ``view`` reads
them and their status but changes nothing.  Each request is sent as that user
(impersonation), so the API server's own RBAC decides, aggregation controller included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import api
from tests.helpers import wait_for
from tests.pools import pool_manifest
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import install_operator_rbac

EDITOR, VIEWER = "alice@example.com", "bob@example.com"


def _as(control_plane: ControlPlane, user: str) -> client.CustomObjectsApi:
    impersonating = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    impersonating.set_default_header("Impersonate-User", user)
    return client.CustomObjectsApi(impersonating)


def _bind(api_client: client.ApiClient, namespace: str, role: str, user: str) -> None:
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{role}-{user.split('@', maxsplit=1)[0]}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def _allowed(api_client: client.ApiClient, user: str, namespace: str, verb: str, sub: str = "") -> bool:
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(
        {
            "spec": {
                "user": user,
                "resourceAttributes": {
                    "group": api.GROUP,
                    "resource": api.PLURAL,
                    "subresource": sub,
                    "verb": verb,
                    "namespace": namespace,
                },
            }
        }
    )
    return bool(review.status.allowed)


@pytest.fixture
def tenant(
    api_client: client.ApiClient, control_plane: ControlPlane, runnerpool_crd: dict[str, Any], namespace: str
) -> Iterator[str]:
    """``namespace`` with EDITOR bound to ``edit`` and VIEWER to ``view``, aggregation done."""
    install_operator_rbac(control_plane)
    _bind(api_client, namespace, "edit", EDITOR)
    _bind(api_client, namespace, "view", VIEWER)
    # The controller manager folds the aggregated rules into edit and view asynchronously.
    wait_for(lambda: _allowed(api_client, EDITOR, namespace, "create"), message="edit to cover RunnerPools")
    wait_for(lambda: _allowed(api_client, VIEWER, namespace, "list"), message="view to cover RunnerPools")
    yield namespace


def _forbidden(call: Any, *args: Any) -> bool:
    try:
        call(*args)
    except ApiException as err:
        if err.status == 403:
            return True
        raise
    return False


def test_an_editor_creates_scales_and_deletes_pools_in_their_namespace(
    control_plane: ControlPlane, tenant: str, api_client: client.ApiClient
) -> None:
    alice = _as(control_plane, EDITOR)
    pools = (api.GROUP, api.VERSION, tenant, api.PLURAL)
    alice.create_namespaced_custom_object(*pools, pool_manifest("alices", replicas=1))
    alice.patch_namespaced_custom_object_scale(
        api.GROUP, api.VERSION, tenant, api.PLURAL, "alices", {"spec": {"replicas": 2}}
    )
    found = alice.get_namespaced_custom_object_status(api.GROUP, api.VERSION, tenant, api.PLURAL, "alices")
    assert found["spec"]["replicas"] == 2
    assert [p["metadata"]["name"] for p in alice.list_namespaced_custom_object(*pools)["items"]] == ["alices"]
    alice.delete_namespaced_custom_object(api.GROUP, api.VERSION, tenant, api.PLURAL, "alices")

    other = f"{tenant}-other"
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": other}})
    try:
        assert _forbidden(
            alice.create_namespaced_custom_object,
            api.GROUP,
            api.VERSION,
            other,
            api.PLURAL,
            pool_manifest("x"),
        ), "edit in one namespace must not reach another"
    finally:
        client.CoreV1Api(api_client).delete_namespace(other)


def test_a_viewer_reads_pools_and_their_status_but_cannot_change_them(
    control_plane: ControlPlane, tenant: str
) -> None:
    alice, bob = _as(control_plane, EDITOR), _as(control_plane, VIEWER)
    pools = (api.GROUP, api.VERSION, tenant, api.PLURAL)
    alice.create_namespaced_custom_object(*pools, pool_manifest("shared"))
    assert [p["metadata"]["name"] for p in bob.list_namespaced_custom_object(*pools)["items"]] == ["shared"]
    assert bob.get_namespaced_custom_object(*pools, "shared")["metadata"]["name"] == "shared"
    assert bob.get_namespaced_custom_object_status(*pools, "shared")["metadata"]["name"] == "shared"

    assert _forbidden(bob.create_namespaced_custom_object, *pools, pool_manifest("bobs"))
    assert _forbidden(bob.patch_namespaced_custom_object, *pools, "shared", {"spec": {"replicas": 3}})
    assert _forbidden(bob.patch_namespaced_custom_object_scale, *pools, "shared", {"spec": {"replicas": 3}})
    assert _forbidden(bob.delete_namespaced_custom_object, *pools, "shared")
