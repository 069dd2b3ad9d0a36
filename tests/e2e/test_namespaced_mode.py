"""Namespace-scoped mode: the operator process with only deploy/overlays/namespaced's RBAC.

The overlay is rendered with the real kustomize (``kubectl kustomize``); its roles and
RoleBindings are applied as they are, moved only from ``ci-runners`` to the test's namespace
and from ``runnerpool-system`` to an operator namespace of the test's own.  That namespace's
``runnerpool-operator`` ServiceAccount is bound by nothing else (deploy/'s ClusterRoleBinding
names ``runnerpool-system``'s), so whatever the operator needs beyond the overlay's bindings is
refused and shows in the API server's audit log.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import StartOperator
from tests.e2e.runners import REPO, delete_namespace_and_wait, runners_of_namespace, wait_condition
from tests.pools import create_pool, pool_manifest
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    DEPLOY,
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    apply_manifests,
    kubectl,
    service_account_kubeconfig,
    service_account_user,
)
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess, RunnerSimulator

OVERLAY = DEPLOY / "overlays" / "namespaced"
WATCHED = "ci-runners"  # the overlay's sample watched namespace
#: The overlay's own ClusterRole (the operator's rules, bound only in the watched namespaces).
NAMESPACED_ROLE = "runnerpool-operator-namespaced"
#: The harness's own login check with the token (``service_account_kubeconfig``), not the operator.
HARNESS = {"selfsubjectreviews"}
#: The operator asking what it may do in a watched namespace (``runnerpool.namespace_access``):
#: a review of its own permissions, which needs none and shows nothing of the cluster.
SELF_REVIEWS = {"selfsubjectaccessreviews"}


def render_overlay(control_plane: ControlPlane) -> list[dict[str, Any]]:
    done = kubectl(control_plane, "kustomize", str(OVERLAY))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _moved(obj: dict[str, Any], namespaces: dict[str, str]) -> dict[str, Any]:
    meta = obj["metadata"]
    if "namespace" in meta:  # a ClusterRole stays as it is
        meta["namespace"] = namespaces[meta["namespace"]]
    for subject in obj.get("subjects") or []:
        subject["namespace"] = namespaces[subject["namespace"]]
    return obj


@pytest.fixture
def namespace(disabled_namespace: str) -> str:
    """The watched namespace, not enabled through runnerpool-operator-namespace: the overlay's
    RoleBinding there is all the operator gets."""
    return disabled_namespace


@pytest.fixture
def operator_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """Where this test's operator account and Lease live (``runnerpool-system`` in the overlay)."""
    name = f"op-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespaced_kubeconfig(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    namespace: str,
    operator_namespace: str,
    tmp_path: Path,
) -> Iterator[Path]:
    """The overlay's roles and RoleBindings applied, and a token of the account they bind; its
    own ClusterRole deleted after (the namespaces take the rest, and the shared ClusterRoles are
    the suite's: a later test's check of what an uninstall leaves cluster-wide would find it)."""
    objects = render_overlay(control_plane)
    moves = {WATCHED: namespace, OPERATOR_NAMESPACE: operator_namespace}
    kinds = ("ClusterRole", "Role", "RoleBinding", "ServiceAccount")
    rbac = [_moved(obj, moves) for obj in objects if obj["kind"] in kinds]
    assert {(o["kind"], o["metadata"].get("namespace")) for o in rbac} >= {
        ("ClusterRole", None),  # bound only in the watched namespace
        ("RoleBinding", namespace),
        ("Role", operator_namespace),  # the Lease
        ("ServiceAccount", operator_namespace),
    }
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert NAMESPACED_ROLE in {o["metadata"]["name"] for o in rbac if o["kind"] == "ClusterRole"}
    apply_manifests(control_plane, "-f", "-", stdin=yaml.safe_dump_all(rbac))
    yield service_account_kubeconfig(
        control_plane, operator_namespace, OPERATOR_SERVICE_ACCOUNT, tmp_path / "namespaced.kubeconfig"
    )
    client.RbacAuthorizationV1Api(api_client).delete_cluster_role(NAMESPACED_ROLE)


def _cluster_wide(event: dict[str, Any]) -> bool:
    ref = event.get("objectRef")
    return ref is not None and not ref.get("namespace") and ref.get("resource") not in HARNESS | SELF_REVIEWS


def _start_namespaced(
    start_operator: StartOperator, operator_namespace: str, kubeconfig: Path
) -> OperatorProcess:
    return start_operator(
        "--namespaced",
        "--leader-elect",
        "--leader-election-namespace",
        operator_namespace,
        # No separate receiver here, and the mirror's default Secret is in runnerpool-system,
        # outside this operator's namespaces: nothing to copy.
        "--webhook-secret-mirror=",
        kubeconfig=kubeconfig,
        user=service_account_user(operator_namespace, OPERATOR_SERVICE_ACCOUNT),
    )


@pytest.mark.usefixtures("credentials")
def test_the_operator_with_only_namespace_bindings_makes_a_pool_ready(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator_namespace: str,
    namespaced_kubeconfig: Path,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    user = service_account_user(operator_namespace, OPERATOR_SERVICE_ACCOUNT)
    since = audit.end_of_complete_events(control_plane.audit_log)
    _start_namespaced(start_operator, operator_namespace, namespaced_kubeconfig)
    create_pool(api_client, namespace, pool_manifest("scoped", repo=REPO, replicas=2))
    wait_condition(api_client, namespace, "scoped", "Ready", "True", timeout=60)
    assert len(simulator.registrations(namespace, "scoped")) == 2

    requests = [
        e for e in audit.complete_events(control_plane.audit_log, since) if e["user"]["username"] == user
    ]
    assert any(e["verb"] == "watch" for e in requests), "the audit log shows the operator's requests"
    wide = sorted({f"{e['verb']} {e['requestURI']}" for e in requests if _cluster_wide(e)})
    assert not wide, f"namespace-scoped mode asked for cluster-wide access: {wide}"
    # And no refusal at all: the fixture's teardown checks the audit log for this user.


@pytest.mark.usefixtures("credentials")
def test_deleting_a_watched_namespace_deregisters_its_runners_and_finishes(
    api_client: client.ApiClient,
    namespace: str,
    operator_namespace: str,
    namespaced_kubeconfig: Path,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
    fake_github: FakeGitHub,
) -> None:
    """The namespace controller deletes the overlay's RoleBinding there together with the pools,
    without waiting for their finalizers. The binding grants a ClusterRole, so the operator holds
    it with its finalizer (``runnerpool.binding_protection``) until the pools have deregistered
    their runners; a Role there would be gone at once, every write of the finalizer refused, and
    the namespace left Terminating with its runners registered."""
    _start_namespaced(start_operator, operator_namespace, namespaced_kubeconfig)
    create_pool(api_client, namespace, pool_manifest("scoped", repo=REPO, replicas=2))
    wait_condition(api_client, namespace, "scoped", "Ready", "True", timeout=60)
    assert len(runners_of_namespace(fake_github, namespace)) == 2

    core = client.CoreV1Api(api_client)
    delete_namespace_and_wait(core, namespace)
    assert runners_of_namespace(fake_github, namespace) == [], "runners left registered on GitHub"
    # And no refusal: the fixture's teardown checks the audit log for the operator's account.
