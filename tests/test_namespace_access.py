"""runnerpool.namespace_access on a real API server, as deploy/'s ServiceAccount: what it answers
for a namespace not enabled and for one enabled, when it asks again, and the informers it starts.

The pool-level proof (condition, Event, no pod, no token, no GitHub call, Ready once enabled
without a restart) is tests/test_deploy_on_server.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import naming
from runnerpool.hook_access import RUNNER_HOOKS_CLUSTER_ROLE
from runnerpool.namespace_access import FIRST_RECHECK, NEEDED, RECHECK, NamespaceAccess
from runnerpool.naming import NAMESPACE_CLUSTER_ROLE
from runnerpool.runtime.kube import ROLE_BINDINGS, Kube
from tests.helpers import wait_for
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    OPERATOR_NAMESPACE,
    OPERATOR_SERVICE_ACCOUNT,
    enable_namespace,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Watched:
    """The namespaces NamespaceAccess asked to have watched (the informer set's side)."""

    def __init__(self) -> None:
        self.namespaces: set[str] = set()

    def watch_namespace(self, namespace: str, timeout: float) -> bool:
        self.namespaces.add(namespace)
        return True

    def unwatch_namespace(self, namespace: str) -> bool:
        watched = namespace in self.namespaces
        self.namespaces.discard(namespace)
        return watched


def _allowed_now(kube: Kube, namespace: str) -> bool:
    """A fresh answer (no cache): the API server's authorizer takes a new binding within moments."""
    return NamespaceAccess(kube).check(namespace).enabled


def test_a_namespace_is_enabled_by_the_rolebinding_and_asked_about_again_after_the_recheck(
    api_client: client.ApiClient, operator_kube: Kube, disabled_namespace: str
) -> None:
    namespace, clock, watched = disabled_namespace, Clock(), Watched()
    access = NamespaceAccess(operator_kube, watch=watched, clock=clock)

    assert not access.refused(namespace), "not known before it is asked about"
    refused = access.check(namespace)
    assert not refused.enabled and access.refused(namespace)
    line = (
        f"kubectl create rolebinding runnerpool-operator -n {namespace} "
        f"--clusterrole=runnerpool-operator-namespace "
        f"--serviceaccount={OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
    )
    assert line in refused.message, "the line names the account the API server knows the operator as"
    assert "create pods" in refused.message and "list secrets" in refused.message
    assert "list pods" in refused.message and "watch pods" in refused.message
    assert refused.recheck == FIRST_RECHECK, "a first refusal: its RoleBinding may be on its way"
    assert not access.enabled(namespace) and watched.namespaces == set()
    clock.now += FIRST_RECHECK
    assert access.check(namespace).recheck == RECHECK, "refused again: asked every 30 s"

    enable_namespace(api_client, namespace)
    wait_for(lambda: _allowed_now(operator_kube, namespace), message="the binding to take effect")
    clock.now += 10
    assert not access.check(namespace).enabled, "cached until the recheck"
    assert access.check(namespace).recheck == RECHECK - 10
    clock.now += RECHECK - 10
    assert access.check(namespace).enabled and not access.refused(namespace)
    assert access.enabled(namespace) and watched.namespaces == {namespace}, "its Secrets are watched"
    assert "list pods" not in access.check(namespace).message

    access.let_go(namespace)  # its last pool is gone
    assert watched.namespaces == set(), "a deleted namespace's informers would retry for good"
    assert not access.enabled(namespace), "a pool made there later asks again"
    assert access.check(namespace).enabled and watched.namespaces == {namespace}


def test_a_namespace_enabled_just_after_its_first_check_is_asked_again_within_seconds(
    api_client: client.ApiClient, operator_kube: Kube, disabled_namespace: str
) -> None:
    """A platform team applies a namespace's RoleBinding and its pools together; a pool that came
    first (or a check the authorizer answered before it held the binding) waited 30 s."""
    namespace, clock = disabled_namespace, Clock()
    access = NamespaceAccess(operator_kube, watch=Watched(), clock=clock)
    assert not access.check(namespace).enabled

    enable_namespace(api_client, namespace)
    wait_for(lambda: _allowed_now(operator_kube, namespace), message="the binding to take effect")
    clock.now += 5

    assert access.check(namespace).enabled


def test_a_refused_write_has_the_namespace_asked_about_again(
    api_client: client.ApiClient, operator_kube: Kube, namespace: str
) -> None:
    """An enabled namespace stays cached; a 403 (``forget``) asks again, and a binding taken
    away stops its Secret informers."""
    clock, watched = Clock(), Watched()
    access = NamespaceAccess(operator_kube, watch=watched, clock=clock)
    assert access.check(namespace).enabled
    client.RbacAuthorizationV1Api(api_client).delete_namespaced_role_binding(
        OPERATOR_SERVICE_ACCOUNT, namespace
    )
    wait_for(
        lambda: not _allowed_now(operator_kube, namespace), message="the binding's removal to take effect"
    )
    assert access.check(namespace).enabled, "cached: no review per pass"
    access.forget(namespace)
    assert not access.check(namespace).enabled
    assert watched.namespaces == set()


def test_a_namespace_admin_cannot_enable_the_operator_in_their_own_namespace(
    api_client: client.ApiClient, operator_kube: Kube, disabled_namespace: str, control_plane: ControlPlane
) -> None:
    """A namespace admin may bind ``edit`` (which they hold) to the operator's account: it
    covers pods and Secrets, and the namespace counted as enabled without the platform team.
    The shipped namespace role they may not bind; its ``bind`` on the runner hooks' role is
    what the check now also asks for."""
    namespace, tenant = disabled_namespace, "carol@example.com"
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role_binding(namespace, _binding("admin-carol", "admin", _user(tenant)))
    as_tenant = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    as_tenant.set_default_header("Impersonate-User", tenant)
    tenant_rbac = client.RbacAuthorizationV1Api(as_tenant)
    operator = {"kind": "ServiceAccount", "name": OPERATOR_SERVICE_ACCOUNT, "namespace": OPERATOR_NAMESPACE}

    with pytest.raises(ApiException) as refused:
        tenant_rbac.create_namespaced_role_binding(
            namespace, _binding("runnerpool-operator", NAMESPACE_CLUSTER_ROLE, operator)
        )
    assert refused.value.status == 403
    tenant_rbac.create_namespaced_role_binding(namespace, _binding("operator-edit", "edit", operator))
    access = NamespaceAccess(operator_kube)
    wait_for(
        lambda: access._allowed(namespace, NEEDED[0]),
        message="the edit binding to take effect",
    )

    answer = access.check(namespace)
    assert not answer.enabled, "enabled by the namespace's own admin"
    assert "bind clusterroles/runnerpool-runner-hooks" in answer.message


def test_the_operator_binds_the_hooks_role_to_its_runner_accounts_only(
    api_client: client.ApiClient, operator_kube: Kube, namespace: str
) -> None:
    """With ``bind`` on runnerpool-runner-hooks and create/patch of RoleBindings, RBAC let the
    operator's account grant pods/exec and the namespace's Secrets to anyone (a group, a user,
    itself): deploy/rbac/operator_binding_policy.yaml holds it to the runner account's binding
    it builds, and to finalizer patches that change no binding's role or subjects."""
    runner = naming.runner_account_name("build")
    account = {"kind": "ServiceAccount", "name": runner, "namespace": namespace}
    everyone = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts"}
    hooks = RUNNER_HOOKS_CLUSTER_ROLE

    def refused(body: dict[str, Any]) -> bool:
        try:
            operator_kube.create(
                ROLE_BINDINGS, namespace, body | {"metadata": {"name": body["metadata"]["name"]}}
            )
        except ApiException as err:
            return err.status == 403 and "binds only runnerpool-runner-hooks" in str(err.body)
        operator_kube.delete(ROLE_BINDINGS, namespace, body["metadata"]["name"], {})
        return False

    # The API server compiles and binds a new policy shortly after deploy/rbac is applied.
    wait_for(lambda: refused(_binding("anyone", hooks, everyone)), 30.0, 0.2, "the policy to be enforced")
    assert refused(_binding(runner, hooks, _user("mallory@example.com")))
    assert refused(
        _binding(
            "runnerpool-runner-x",
            hooks,
            {**account, "name": "runnerpool-runner-x", "namespace": "kube-system"},
        )
    )
    assert refused(_binding(runner, NAMESPACE_CLUSTER_ROLE, account)), "another role"

    operator_kube.create(ROLE_BINDINGS, namespace, _binding(runner, hooks, account))
    with pytest.raises(ApiException) as widened:
        operator_kube.patch(ROLE_BINDINGS, namespace, runner, {"subjects": [account, everyone]})
    assert widened.value.status == 403
    enabling = client.RbacAuthorizationV1Api(api_client).list_namespaced_role_binding(namespace).items
    (other,) = [b.metadata.name for b in enabling if b.role_ref.name == NAMESPACE_CLUSTER_ROLE]
    finalizer = {"metadata": {"finalizers": [naming.BINDING_FINALIZER]}}
    operator_kube.patch(ROLE_BINDINGS, namespace, other, finalizer)  # role and subjects unchanged
    operator_kube.patch(ROLE_BINDINGS, namespace, other, {"metadata": {"finalizers": None}})


def _user(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


class _Reviews:
    """The SelfSubjectAccessReviews as the API server answers them: ``allowed``, or failing."""

    def __init__(self, allowed: bool) -> None:
        self.allowed, self.failing, self.asked = allowed, False, 0

    def create(self, resource: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked += 1
        if self.failing:
            raise ApiException(status=503, reason="Service Unavailable")
        return {"status": {"allowed": self.allowed}}


def test_a_part_beside_the_reconciler_asks_before_it_reads_and_keeps_the_last_answer_on_failure() -> None:
    """The webhook secret mirror reads pools' Secrets: in a namespace never enabled it must ask
    first rather than read and be refused; while the reviews fail it keeps the last answer."""
    reviews = _Reviews(allowed=False)
    access = NamespaceAccess(reviews)  # type: ignore[arg-type]
    assert not access.readable("stranger") and reviews.asked > 0, "asked, not guessed"
    reviews.failing = True
    access.forget("stranger")
    assert access.readable("stranger"), "nothing known: the read says what the API server thinks"
    clock = Clock()
    reviews.failing, access = False, NamespaceAccess(reviews, clock=clock)  # type: ignore[arg-type]
    assert not access.readable("stranger")
    reviews.failing = True
    clock.now += RECHECK  # due to be asked again
    assert not access.readable("stranger"), "the last answer stands while the reviews fail"
