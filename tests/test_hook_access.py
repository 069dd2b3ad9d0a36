"""The runner ServiceAccount and RoleBinding of ``containerMode: kubernetes``, on a real API server.

What a user would check: the pool owns both, the binding grants (in the pool's namespace only)
the shipped ClusterRole, which lets the runner do exactly what the runner container hooks
check for and nothing more; the operator makes them with deploy/'s RBAC (not as admin) and
creates no Role; a converged pool writes nothing, a hand edit is repaired, a pool that leaves
the mode takes its binding away at once; and a same-named object the pool does not control is
never touched: the pool says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import responses
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.apply import apply
from runnerpool.hook_access import HOOK_RULES, RBAC_GROUP, RUNNER_HOOKS_CLUSTER_ROLE
from runnerpool.reconciler import Reconciler
from runnerpool.runtime.kube import Kube
from runnerpool.writes import Writes
from tests.github_mocks import RunnerEndpoint, github
from tests.helpers import wait_for
from tests.pools import LiveReader, create_pool, mark_pods_ready, pool_events, pool_manifest
from tests.test_reconciler import _finalize, reconciler, runners, tokens
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    DEPLOY,
    install_operator_rbac,
    operator_kubeconfig,
    service_account_kubeconfig,
)

# Fixtures shared with test_reconciler and github_mocks.
__all__ = ["github", "make_runner_access", "reconciler", "runners", "tokens"]

#: actions/runner-container-hooks' ``requiredPermissions`` (packages/k8s/src/k8s/index.ts), by
#: (group, resource, subresource): the hooks ask a SelfSubjectAccessReview for each before every
#: command. 0.8 (k8s-novolume in the actions-runner image) asks the first four; 0.7 (k8s, the
#: work-volume flavour the image ships) asks for Jobs too, as it runs container steps as Jobs.
HOOKS_CHECK = {
    ("", "pods", ""): {"get", "list", "create", "delete"},
    ("", "pods", "exec"): {"get", "create"},
    ("", "pods", "log"): {"get", "list", "watch"},
    ("", "secrets", ""): {"create", "delete", "get", "list"},
    ("batch", "jobs", ""): {"create", "delete", "get", "list"},
}
#: What a runner could want and must not have: changing pods (say, another pool's), other
#: Secrets' contents by watch, Roles, changing Jobs, ConfigMaps, CronJobs.
NOT_GRANTED = [
    ("", "pods", "", "patch"),
    ("", "pods", "", "update"),
    ("", "secrets", "", "watch"),
    ("", "secrets", "", "patch"),
    ("", "serviceaccounts", "token", "create"),
    ("", "configmaps", "", "get"),
    ("", "pods", "ephemeralcontainers", "patch"),
    ("batch", "jobs", "", "patch"),
    ("batch", "cronjobs", "", "create"),
]
HOOKS_ROLE_FILE = DEPLOY / "rbac" / "runner_hooks_cluster_role.yaml"


def make_runner_access(kube: Kube, pool: api.RunnerPool) -> Writes:
    """What the operator's apply makes for a kubernetes-mode pool that has none yet."""
    writes = Writes()
    for row in children.runner_access(pool, None, None):
        apply(kube, row, writes)
    return writes


def _kubernetes_pool(name: str, **spec: Any) -> dict[str, Any]:
    return pool_manifest(name, containerMode=api.KUBERNETES_MODE, **spec)


def _access(api_client: client.ApiClient, namespace: str, pool: str) -> list[dict[str, Any] | None]:
    reader, name = LiveReader(api_client), naming.runner_account_name(pool)
    return [reader.get_service_account(namespace, name), reader.get_role_binding(namespace, name)]


def _roles(api_client: client.ApiClient, namespace: str) -> list[str]:
    return [
        r.metadata.name
        for r in client.RbacAuthorizationV1Api(api_client).list_namespaced_role(namespace).items
    ]


def _allowed(
    as_runner: client.ApiClient, namespace: str, group: str, resource: str, sub: str, verb: str
) -> bool:
    review = client.AuthorizationV1Api(as_runner).create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "group": group,
                    "resource": resource,
                    "subresource": sub,
                    "verb": verb,
                }
            }
        }
    )
    return bool(review.status.allowed)


def test_the_shipped_cluster_role_grants_what_the_hooks_check_for() -> None:
    granted = {
        (group, resource.partition("/")[0], resource.partition("/")[2]): set(rule["verbs"])
        for rule in HOOK_RULES
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == HOOKS_CHECK
    shipped = yaml.safe_load(HOOKS_ROLE_FILE.read_text())
    assert (shipped["kind"], shipped["metadata"]["name"]) == ("ClusterRole", RUNNER_HOOKS_CLUSTER_ROLE)
    assert shipped["rules"] == [dict(rule) for rule in HOOK_RULES]


def test_the_operator_binds_the_runner_account_with_deploys_rbac_and_it_holds_exactly_the_hooks_rules(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    operator = config.new_client_from_config(config_file=str(operator_kubeconfig(control_plane)))
    pool = api.RunnerPool.model_validate(create_pool(api_client, namespace, _kubernetes_pool("km")))

    writes = make_runner_access(Kube(operator), pool)

    assert writes.as_log() == ["create serviceaccount", "create rolebinding"]
    assert _roles(api_client, namespace) == [], "the operator creates no Role"
    name = naming.runner_account_name("km")
    as_runner = config.new_client_from_config(
        config_file=str(service_account_kubeconfig(control_plane, namespace, name, tmp_path / "runner"))
    )
    for (group, resource, sub), verbs in HOOKS_CHECK.items():
        for verb in verbs:
            assert _allowed(as_runner, namespace, group, resource, sub, verb), (group, resource, sub, verb)
    for group, resource, sub, verb in NOT_GRANTED:
        assert not _allowed(as_runner, namespace, group, resource, sub, verb), (group, resource, sub, verb)
    # Only in its own namespace.
    assert not _allowed(as_runner, "default", "", "pods", "", "create")


def test_without_bind_on_the_hooks_role_the_api_server_refuses_the_binding(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Why the namespace role holds ``bind`` on runnerpool-runner-hooks (and none of its verbs):
    RBAC's escalation check refuses a binding of a role whose verbs one does not hold, unless one
    may ``bind`` that very role."""
    install_operator_rbac(control_plane)  # the shipped hooks ClusterRole
    rules = yaml.safe_load((DEPLOY / "rbac" / "namespace_cluster_role.yaml").read_text())["rules"]
    rbac = client.RbacAuthorizationV1Api(api_client)
    hooks = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": RUNNER_HOOKS_CLUSTER_ROLE}
    subjects = [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}]

    def binder(name: str, role_rules: list[dict[str, object]]) -> client.RbacAuthorizationV1Api:
        rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": role_rules})
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )
        path = service_account_kubeconfig(control_plane, namespace, name, tmp_path / name, create=True)
        return client.RbacAuthorizationV1Api(config.new_client_from_config(config_file=str(path)))

    without_bind = binder("no-bind", [r for r in rules if "bind" not in r["verbs"]])
    with pytest.raises(ApiException) as refused:
        without_bind.create_namespaced_role_binding(
            namespace, {"metadata": {"name": "hooks-a"}, "roleRef": hooks, "subjects": subjects}
        )
    assert refused.value.status == 403
    assert "attempting to grant RBAC permissions not currently held" in refused.value.body

    shipped = binder("shipped", rules)
    shipped.create_namespaced_role_binding(
        namespace, {"metadata": {"name": "hooks-b"}, "roleRef": hooks, "subjects": subjects}
    )
    assert rbac.read_namespaced_role_binding("hooks-b", namespace).role_ref.name == RUNNER_HOOKS_CLUSTER_ROLE


def test_a_kubernetes_mode_pool_owns_its_runner_account_keeps_it_and_takes_it_away(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{namespace}/km"
    uid = create_pool(api_client, namespace, _kubernetes_pool("km"))["metadata"]["uid"]
    reconciler(key)
    reconciler(key)  # a JIT pool (kubernetes mode's default): no pool token to wait for
    [pod] = mark_pods_ready(api_client, namespace, "km", 1)
    reconciler(key)
    name = naming.runner_account_name("km")

    account, binding = _access(api_client, namespace, "km")
    assert account and binding
    for obj in (account, binding):
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (api.KIND, uid, True)
    assert binding["roleRef"] == {
        "apiGroup": RBAC_GROUP,
        "kind": "ClusterRole",
        "name": RUNNER_HOOKS_CLUSTER_ROLE,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    assert _roles(api_client, namespace) == [], "the operator creates no Role"
    spec = client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace).spec
    assert (spec.service_account_name, spec.automount_service_account_token) == (name, True)

    # Converged: a pass writes nothing.
    versions = [o["metadata"]["resourceVersion"] for o in (account, binding)]
    caplog.set_level(logging.INFO, logger="runnerpool.reconciler")
    reconciler(key)
    assert [(r.__dict__["action"], r.__dict__["writes"]) for r in caplog.records] == [("noop", [])]
    assert [o["metadata"]["resourceVersion"] for o in _access(api_client, namespace, "km") if o] == versions

    # A hand edit that binds the hooks' role to someone else too is put back.
    rbac = client.RbacAuthorizationV1Api(api_client)
    intruder = {"kind": "ServiceAccount", "name": "default", "namespace": namespace}
    rbac.patch_namespaced_role_binding(name, namespace, {"subjects": [*binding["subjects"], intruder]})
    caplog.clear()
    reconciler(key)
    assert "update rolebinding" in caplog.records[-1].__dict__["writes"]
    assert (_access(api_client, namespace, "km")[1] or {})["subjects"] == binding["subjects"]

    # Leaving the mode keeps both while a pod runs as the account (a busy runner's job hooks
    # use them: without the binding the job fails mid-run), then takes them away.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "km", {"spec": {"containerMode": None}}
    )
    reconciler(key)
    assert all(_access(api_client, namespace, "km")), "the runner pod still runs as the account"
    client.CoreV1Api(api_client).delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    wait_for(
        lambda: pod not in {p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, "km")},
        message="the old runner pod to go",
    )
    reconciler(key)
    assert _access(api_client, namespace, "km") == [None, None]


def test_the_hooks_job_pods_get_a_budget_that_refuses_their_eviction_until_the_namespaces_last_pool_goes(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """A job of this mode runs in the pods the hooks make, not in the busy-marked runner pod: a
    drain that evicted them failed the job. tests/node/test_kubernetes_mode.py evicts one."""
    RunnerEndpoint(github, "/repos/octo-org/octo-repo")  # no runners to deregister
    policy = client.PolicyV1Api(api_client)

    def budgets() -> dict[str, Any]:
        items = policy.list_namespaced_pod_disruption_budget(namespace).items
        return {b.metadata.name: api_client.sanitize_for_serialization(b.spec) for b in items}

    # No pods (whose JIT runners a deletion would wait for): the budgets come all the same.
    create_pool(api_client, namespace, pool_manifest("plain", registration="jit", replicas=0))
    reconciler(f"{namespace}/plain")
    assert list(budgets()) == [naming.BUSY_DISRUPTION_BUDGET], "only a pool of this mode makes it"

    create_pool(api_client, namespace, _kubernetes_pool("km", replicas=0))
    reconciler(f"{namespace}/km")
    job_pods = budgets()[naming.JOB_PODS_DISRUPTION_BUDGET]
    assert job_pods == {
        "minAvailable": children.BUSY_MIN_AVAILABLE,
        "selector": {"matchExpressions": [{"key": "runner-pod", "operator": "Exists"}]},
    }

    # Shared by the namespace: a pool leaving the mode, or going, while another is left, keeps it.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "km", {"spec": {"containerMode": None}}
    )
    reconciler(f"{namespace}/km")
    for name in ("km", "plain"):
        assert naming.JOB_PODS_DISRUPTION_BUDGET in budgets(), f"before {name} went"
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )
        _finalize(api_client, namespace, reconciler, name)
        reconciler(f"{namespace}/{name}")  # the pool's deletion event: gone from the cache
    assert budgets() == {}, "no budget is left behind in a namespace without pools"


def test_same_named_objects_the_pool_does_not_control_are_left_byte_for_byte_and_the_pool_says_so(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Someone else's Secret named like a pool's token Secret, and a Role and RoleBinding named
    like a kubernetes-mode pool's runner access: no patch, no delete, no pod, no token; a
    condition and an Event."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    name, secret = naming.runner_account_name("km"), naming.token_secret_name("tk")
    core.create_namespaced_secret(namespace, {"metadata": {"name": secret}, "stringData": {"a": "b"}})
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": [rule]})
    subjects = [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]
    role_ref = {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name}
    rbac.create_namespaced_role_binding(
        namespace, {"metadata": {"name": name}, "roleRef": role_ref, "subjects": subjects}
    )

    def foreign() -> list[Any]:
        return [
            api_client.sanitize_for_serialization(obj)
            for obj in (
                core.read_namespaced_secret(secret, namespace),
                rbac.read_namespaced_role(name, namespace),
                rbac.read_namespaced_role_binding(name, namespace),
            )
        ]

    before = foreign()
    create_pool(api_client, namespace, _kubernetes_pool("km"))
    create_pool(api_client, namespace, pool_manifest("tk"))
    for _ in range(2):
        reconciler(f"{namespace}/km")
        reconciler(f"{namespace}/tk")

    assert foreign() == before, "left byte for byte"
    for pool_name, taken in (("km", f"rolebindings {name}"), ("tk", f"secrets {secret}")):
        pool = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, pool_name
        )
        [ready] = [c for c in pool["status"]["conditions"] if c["type"] == "Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "ChildNotOwned"), pool_name
        assert taken in ready["message"]
        assert LiveReader(api_client).list_pods(namespace, pool_name) == []
    assert [r for _, r, _ in pool_events(api_client, namespace)].count("ChildNotOwned") == 2

    # Once they are gone, the pools make their own.
    core.delete_namespaced_secret(secret, namespace)
    rbac.delete_namespaced_role_binding(name, namespace)
    reconciler(f"{namespace}/km")
    reconciler(f"{namespace}/tk")
    account, binding = _access(api_client, namespace, "km")
    assert account is not None and binding is not None
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert rbac.read_namespaced_role(name, namespace).rules[0].resources == ["configmaps"], "still theirs"
    token_secret = core.read_namespaced_secret(secret, namespace)
    assert token_secret.metadata.owner_references[0].name == "tk"
