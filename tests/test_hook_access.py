"""The runner ServiceAccount, Role and RoleBinding of ``containerMode: kubernetes``, on a real API server.

What a user would check: the pool owns all three, the Role lets the runner do exactly what the
runner container hooks check for and nothing more, the operator makes them with deploy/'s RBAC
(not as admin), a converged pool writes nothing, a hand edit is repaired, and a pool that leaves
the mode takes its Role away at once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.hook_access import HOOK_RULES, HookAccessStep
from runnerpool.reconciler import Reconciler
from runnerpool.runtime.kube import Kube
from runnerpool.writes import Writes
from tests.pools import LiveReader, create_pool, mark_pods_ready, pool_manifest
from tests.test_reconciler import reconciler, runners, tokens
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import DEPLOY, operator_kubeconfig, service_account_kubeconfig

__all__ = ["reconciler", "runners", "tokens"]  # the fixtures, shared with test_reconciler

#: actions/runner-container-hooks' ``requiredPermissions`` (packages/k8s/src/k8s/index.ts, the
#: same in k8s-novolume): the hooks ask a SelfSubjectAccessReview for each before every command.
HOOKS_CHECK = {
    ("pods", ""): {"get", "list", "create", "delete"},
    ("pods", "exec"): {"get", "create"},
    ("pods", "log"): {"get", "list", "watch"},
    ("secrets", ""): {"create", "delete", "get", "list"},
}
#: What a runner could want and must not have: changing pods (say, another pool's), other
#: Secrets' contents by watch, Roles, Jobs, ConfigMaps.
NOT_GRANTED = [
    ("pods", "", "patch"),
    ("pods", "", "update"),
    ("secrets", "", "watch"),
    ("secrets", "", "patch"),
    ("serviceaccounts", "token", "create"),
    ("configmaps", "", "get"),
    ("pods", "ephemeralcontainers", "patch"),
]
BATCH_JOBS = ("batch", "jobs", "create")


def _kubernetes_pool(name: str, **spec: Any) -> dict[str, Any]:
    return pool_manifest(name, containerMode=api.KUBERNETES_MODE, **spec)


def _access(api_client: client.ApiClient, namespace: str, pool: str) -> list[dict[str, Any] | None]:
    reader, name = LiveReader(api_client), naming.runner_account_name(pool)
    return [
        reader.get_service_account(namespace, name),
        reader.get_role(namespace, name),
        reader.get_role_binding(namespace, name),
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


def test_the_role_grants_what_the_hooks_check_for() -> None:
    granted = {
        (resource.partition("/")[0], resource.partition("/")[2]): set(rule["verbs"])
        for rule in HOOK_RULES
        for resource in rule["resources"]
    }
    assert granted == HOOKS_CHECK
    assert all(rule["apiGroups"] == [""] for rule in HOOK_RULES)


def test_the_operator_makes_the_runner_account_with_deploys_rbac_and_it_holds_exactly_the_hooks_rules(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> None:
    operator = config.new_client_from_config(config_file=str(operator_kubeconfig(control_plane)))
    pool = api.RunnerPool.model_validate(create_pool(api_client, namespace, _kubernetes_pool("km")))
    writes = Writes()

    HookAccessStep(LiveReader(api_client), Kube(operator)).converge(pool, writes)

    assert writes.as_log() == ["create serviceaccount", "create role", "create rolebinding"]
    name = naming.runner_account_name("km")
    as_runner = config.new_client_from_config(
        config_file=str(service_account_kubeconfig(control_plane, namespace, name, tmp_path / "runner"))
    )
    for (resource, sub), verbs in HOOKS_CHECK.items():
        for verb in verbs:
            assert _allowed(as_runner, namespace, "", resource, sub, verb), (resource, sub, verb)
    for resource, sub, verb in NOT_GRANTED:
        assert not _allowed(as_runner, namespace, "", resource, sub, verb), (resource, sub, verb)
    assert not _allowed(as_runner, namespace, *BATCH_JOBS[:2], "", BATCH_JOBS[2])
    # Only in its own namespace.
    assert not _allowed(as_runner, "default", "", "pods", "", "create")


def test_without_the_hooks_permissions_the_api_server_refuses_the_role(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Why deploy/rbac holds pods/exec and pods/log the operator never uses: RBAC's escalation check."""
    rules = yaml.safe_load((DEPLOY / "rbac" / "cluster_role.yaml").read_text())["rules"]
    without_exec = [r for r in rules if "pods/exec" not in r["resources"]]
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "no-exec"}, "rules": without_exec})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "no-exec"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-exec"},
            "subjects": [{"kind": "ServiceAccount", "name": "no-exec", "namespace": namespace}],
        },
    )
    path = service_account_kubeconfig(control_plane, namespace, "no-exec", tmp_path / "no-exec", create=True)
    limited = client.RbacAuthorizationV1Api(config.new_client_from_config(config_file=str(path)))

    with pytest.raises(ApiException) as refused:
        limited.create_namespaced_role(namespace, {"metadata": {"name": "hooks"}, "rules": list(HOOK_RULES)})

    assert refused.value.status == 403
    assert "attempting to grant RBAC permissions not currently held" in refused.value.body


def test_a_kubernetes_mode_pool_owns_its_runner_account_keeps_it_and_takes_it_away(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, caplog: pytest.LogCaptureFixture
) -> None:
    key = f"{namespace}/km"
    uid = create_pool(api_client, namespace, _kubernetes_pool("km"))["metadata"]["uid"]
    reconciler(key)
    reconciler(key)  # registration is JIT in this mode: the pod's own Secret, no pool token
    [pod] = mark_pods_ready(api_client, namespace, "km", 1)
    reconciler(key)
    name = naming.runner_account_name("km")

    account, role, binding = _access(api_client, namespace, "km")
    assert account and role and binding
    for obj in (account, role, binding):
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (api.KIND, uid, True)
    assert role["rules"] == [{k: v for k, v in r.items()} for r in HOOK_RULES]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    spec = client.CoreV1Api(api_client).read_namespaced_pod(pod, namespace).spec
    assert (spec.service_account_name, spec.automount_service_account_token) == (name, True)

    # Converged: a pass writes nothing.
    versions = [o["metadata"]["resourceVersion"] for o in (account, role, binding)]
    caplog.set_level(logging.INFO, logger="runnerpool.reconciler")
    reconciler(key)
    assert [(r.__dict__["action"], r.__dict__["writes"]) for r in caplog.records] == [("noop", [])]
    assert [o["metadata"]["resourceVersion"] for o in _access(api_client, namespace, "km") if o] == versions

    # A hand edit that widens the Role is put back.
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.patch_namespaced_role(
        name, namespace, {"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    )
    caplog.clear()
    reconciler(key)
    assert "update role" in caplog.records[-1].__dict__["writes"]
    assert (_access(api_client, namespace, "km")[1] or {})["rules"] == role["rules"]

    # Leaving the mode takes all three away at once.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "km", {"spec": {"containerMode": None}}
    )
    reconciler(key)
    assert _access(api_client, namespace, "km") == [None, None, None]
