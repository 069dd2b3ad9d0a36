"""deploy/ against the real API server: it applies, and its RBAC is exactly what the operator needs.

The least-privilege proof runs a whole pool lifecycle with the operator logged in
as deploy/'s ServiceAccount, in a namespace enabled as a platform team enables one (a
RoleBinding to runnerpool-operator-namespace), and reads the API server's audit log: the
operator is never refused (so the rules suffice), and every granted rule was exercised (so
removing any one of them would turn one of those requests into a refusal). In a namespace
not enabled the API server refuses it every Secret and every pod, and a pool there waits,
saying why, until the namespace is enabled.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.namespace_access import RECHECK
from runnerpool.naming import CREDENTIAL_FINALIZER
from runnerpool.operator import Operator
from runnerpool.settings import (
    DemandSettings,
    GitHubSettings,
    LeaderElectionSettings,
    ProbeSettings,
    RunnerSettings,
    Settings,
)
from tests.helpers import wait_for
from tests.pools import (
    LiveReader,
    create_pool,
    legacy_budget,
    mark_pods_ready,
    pat_secret,
    play_kubelet,
    pool_events,
    pool_manifest,
)
from tests.test_deploy_manifests import NAMESPACE_ROLE, render
from testworld.envtest import assets
from testworld.envtest.certs import private_server
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import allow_leader_election_in, enable_namespace
from testworld.fakegithub import FakeGitHub
from testworld.ports import free_port

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
OPERATOR_NAMESPACE = "runnerpool-system"
OPERATOR_SA = "runnerpool-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SA}"
# Checked by admission (OwnerReferencesPermissionEnforcement), never requested: it cannot show in
# the audit log as a request, but without it the operator's creates with an owner reference fail.
ADMISSION_ONLY = {("runnerpool.dev", "runnerpools/finalizers", "update")}
# Checked when the operator binds runnerpool-runner-hooks (containerMode: kubernetes), never
# requested: RBAC lets nobody bind a role granting more than they hold, unless they may `bind` it.
ESCALATION_ONLY = {("rbac.authorization.k8s.io", "clusterroles", "bind")}
# Requested only when a demand write loses a race (409: another replica or the receiver wrote the
# pool since the cache saw it), which one operator alone never provokes; the re-read is proved in
# tests/test_demand_writes.py (a conflict costs one GET).
CONFLICT_ONLY = {("runnerpool.dev", "runnerpools", "get")}


def kubectl(control_plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    binary = assets.ensure_binaries()["kubectl"]
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, runnerpool_crd: dict[str, Any]) -> None:
    """What a user does: ``kubectl apply -k deploy/``."""
    done = kubectl(control_plane, "apply", "-k", str(DEPLOY))
    assert done.returncode == 0, done.stderr


def test_server_side_dry_run_of_every_manifest(control_plane: ControlPlane, installed: None) -> None:
    done = kubectl(control_plane, "apply", "--dry-run=server", "-k", str(DEPLOY))
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if "(server dry run)" in line]
    kinds = {line.split("/", 1)[0] for line in applied}
    assert {
        "namespace",
        "customresourcedefinition.apiextensions.k8s.io",
        "serviceaccount",
        "clusterrole.rbac.authorization.k8s.io",
        "role.rbac.authorization.k8s.io",
        "deployment.apps",
        "service",
    } <= kinds


def test_samples_apply_on_top(
    api_client: client.ApiClient, control_plane: ControlPlane, installed: None
) -> None:
    # A dry run cannot create the namespaces its other objects go into (the dind sample brings
    # a privileged namespace of its own).
    documents = [
        d for p in sorted((DEPLOY / "samples").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
    ]
    for ns in (d for d in documents if d and d.get("kind") == "Namespace"):
        client.CoreV1Api(api_client).create_namespace(ns)
    done = kubectl(control_plane, "apply", "--dry-run=server", "-k", str(DEPLOY / "samples"))
    assert done.returncode == 0, done.stderr


def test_the_optional_network_policies_apply_on_top(control_plane: ControlPlane, installed: None) -> None:
    """As a user applies them after deploy/: the API server takes every rule (named ports, the
    receiver's egress, the metrics peers), so a refused one fails here, not at the user's."""
    folder = DEPLOY / "optional" / "network-policies"
    done = kubectl(control_plane, "apply", "--dry-run=server", "--validate=strict", "-k", str(folder))
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == 2, done.stdout


def _bearer_client(api_client: client.ApiClient, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = api_client.configuration.host
    cfg.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    cfg.api_key = {"BearerToken": f"Bearer {token}"}
    return client.ApiClient(cfg)


def _service_account_token(api_client: client.ApiClient, namespace: str, name: str) -> str:
    body = {"spec": {"expirationSeconds": 3600}}
    answer = client.CoreV1Api(api_client).create_namespaced_service_account_token(name, namespace, body)
    return str(answer.status.token)


def _granted(manifests: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for doc in manifests
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _rbac_manifests() -> list[dict[str, Any]]:
    """The roles deploy/rbac binds to the operator, and the one a platform team binds in each
    runner namespace (not the tenant or metrics reader roles)."""
    docs = render(DEPLOY / "rbac")
    operator = {"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": OPERATOR_NAMESPACE}
    bound = {
        (doc["roleRef"]["kind"], doc["roleRef"]["name"])
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding") and operator in doc["subjects"]
    } | {("ClusterRole", NAMESPACE_ROLE)}
    return [doc for doc in docs if (doc["kind"], doc["metadata"]["name"]) in bound]


@dataclass(frozen=True)
class RunningOperator:
    github: FakeGitHub
    metrics_port: int
    token: str  # the operator's own: it may not read /metrics (that is the reader role's)
    #: This operator's own User-Agent: other tests' operators use the same ServiceAccount, and
    #: their requests must not count as this one's (they hid an unused verb in a full run).
    user_agent: str


@contextlib.contextmanager
def _fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as github:
        github.add_scope(repo="octo-org/octo-repo")
        yield github


@contextlib.contextmanager
def _operator_as_service_account(
    api_client: client.ApiClient, namespace: str, github: FakeGitHub | None = None
) -> Iterator[RunningOperator]:
    """The operator in-process, logged in as deploy/'s ServiceAccount, watching ``namespace``
    and electing a leader there (``github``: one that outlives it, for a next operator)."""
    allow_leader_election_in(api_client, namespace)
    token = _service_account_token(api_client, OPERATOR_NAMESPACE, OPERATOR_SA)
    metrics_port = free_port()
    operator_client = _bearer_client(api_client, token)
    operator_client.user_agent = f"runnerpool-operator-least-privilege/{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        if github is None:
            github = stack.enter_context(_fake_github())
        operator = Operator(
            Settings(
                # Only the test's namespace, so other tests' pools stay out of the audit trail.
                namespaces=(namespace,),
                github=GitHubSettings(api_url=github.url),
                probes=ProbeSettings(
                    metrics_port=metrics_port,
                    metrics_bind_address="127.0.0.1",
                    metrics_secure=True,
                    health_port=0,
                ),
                # Polling (no webhook receiver here) records demand: a GET and a status patch.
                demand=DemandSettings(webhook_port=0, poll_interval=1.0),
                leader_election=LeaderElectionSettings(
                    enabled=True,
                    namespace=namespace,
                    lease_duration=5,
                    renew_deadline=4,
                    retry_period=1,
                ),
                runners=RunnerSettings(sync_interval=1.0),
            ),
            operator_client,
        )
        runner = threading.Thread(target=operator.run, name="operator-under-test")
        runner.start()
        try:
            wait_for(operator.leading, message="the operator to win the Lease")
            yield RunningOperator(github, metrics_port, token, operator_client.user_agent)
        finally:
            operator.shutdown()
            runner.join(timeout=60)
            assert not runner.is_alive(), "the operator did not stop"


@pytest.fixture
def operator_as_service_account(
    api_client: client.ApiClient, installed: None, namespace: str
) -> Iterator[RunningOperator]:
    with _operator_as_service_account(api_client, namespace) as running:
        yield running


def _lifecycle(api_client: client.ApiClient, namespace: str, github: FakeGitHub) -> None:
    """Everything the operator does for a pool: drop an earlier version's budget, converge
    (watching the namespace too), protect its credential Secret, repair drift, protect a busy
    runner, replace a finished pod, deregister, let go of the pool and of the Secret."""
    reader = LiveReader(api_client)
    core, policy = client.CoreV1Api(api_client), client.PolicyV1Api(api_client)
    scope = "octo-org/octo-repo"
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("lp", repo=scope))
    old_budget = legacy_budget(api_client, namespace, "lp")
    wait_for(
        lambda: not reader.get_disruption_budget(namespace, old_budget), message="the per-pool budget to go"
    )
    budget = naming.BUSY_DISRUPTION_BUDGET
    wait_for(lambda: reader.get_disruption_budget(namespace, budget), message="the disruption budget")
    assert CREDENTIAL_FINALIZER in _finalizers(reader, namespace, naming.DEFAULT_CREDENTIAL_SECRET)
    for _ in range(2):  # twice, so the repeated event is folded into a count (events patch)
        policy.patch_namespaced_pod_disruption_budget(budget, namespace, {"spec": {"minAvailable": 3}})

        def repaired() -> bool:
            spec = policy.read_namespaced_pod_disruption_budget(budget, namespace).spec
            return bool(spec.min_available == children.BUSY_MIN_AVAILABLE)

        wait_for(repaired, message="the hand edit to be repaired")
    [pod] = mark_pods_ready(api_client, namespace, "lp", 1)
    assert (core.read_namespaced_pod(pod, namespace).metadata.labels or {}).get(naming.TEMPLATE_HASH_LABEL)
    secret = reader.get_secret(namespace, naming.token_secret_name("lp")) or {}
    token = base64.b64decode(secret["data"][naming.TOKEN_SECRET_KEY]).decode()
    github.register_runner_with_token(scope, token, pod, [f"{namespace}/lp", "self-hosted"])
    wait_for(lambda: _pool_condition(reader, namespace, "Ready") == "True", message="the pool to be Ready")

    github.set_runner(scope, pod, busy=True)  # a job starts: no eviction may take the pod now
    wait_for(
        lambda: (core.read_namespaced_pod(pod, namespace).metadata.labels or {}).get(naming.BUSY_LABEL),
        message="the busy runner's pod to be marked busy",
    )
    github.complete_job(scope, pod)  # the ephemeral runner is gone; its container exits
    play_kubelet(api_client, namespace, pod, phase="Succeeded", state="terminated")
    wait_for(
        lambda: pod not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
        message="the finished pod to be replaced",
    )
    mark_pods_ready(api_client, namespace, "lp", 1)  # the fresh pod

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "lp"
    )
    wait_for(lambda: reader.get_pool(namespace, "lp") is None, timeout=60, message="the pool to be deleted")
    assert github.runners(scope) == [], "no runner of the pool is left on GitHub"
    wait_for(
        lambda: CREDENTIAL_FINALIZER not in _finalizers(reader, namespace, naming.DEFAULT_CREDENTIAL_SECRET),
        message="the credential Secret to be released with its last pool",
    )


def _finalizers(reader: LiveReader, namespace: str, secret: str) -> list[str]:
    return list(((reader.get_secret(namespace, secret) or {}).get("metadata") or {}).get("finalizers") or [])


def _pool_condition(reader: LiveReader, namespace: str, type_: str, *, pool: str = "lp") -> str | None:
    found_pool = reader.get_pool(namespace, pool) or {}
    conditions = (found_pool.get("status") or {}).get("conditions") or []
    found = [c["status"] for c in conditions if c["type"] == type_]
    return found[0] if found else None


def _permission(event: dict[str, Any]) -> tuple[str, str, str]:
    ref = event["objectRef"]
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ref.get("apiGroup", ""), resource, event["verb"]


def _demand(api_client: client.ApiClient, namespace: str, github: FakeGitHub) -> None:
    """A pool that follows demand: a queued job is recorded in status.demand and scales it up.
    It names its own webhook secret, which the operator reads by name (secrets: get)."""
    reader = LiveReader(api_client)
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": "dm-hooks"}, "stringData": {"webhook-secret": "dm's own"}}
    )
    autoscaling = {"minReplicas": 0, "maxReplicas": 2, "webhookSecretRef": {"name": "dm-hooks"}}
    create_pool(
        api_client, namespace, pool_manifest("dm", repo="octo-org/octo-repo", autoscaling=autoscaling)
    )
    wait_for(
        lambda: any(
            c["type"] == "WebhookSecretReady" and c["status"] == "True"
            for c in ((reader.get_pool(namespace, "dm") or {}).get("status") or {}).get("conditions") or []
        ),
        timeout=60,
        message="the pool's own webhook secret to be found",
    )
    github.queue_job("octo-org/octo-repo", ["self-hosted", naming.pool_runner_label(namespace, "dm")], 600)
    wait_for(
        lambda: ((reader.get_pool(namespace, "dm") or {}).get("status") or {}).get("desiredReplicas") == 1,
        timeout=60,
        message="the demand pool to want one runner",
    )


def _private_ca(api_client: client.ApiClient, namespace: str, folder: Path) -> None:
    """A pool whose GitHub server has a private CA, named in a ConfigMap: the operator reads it
    by name (configmaps: get) to trust the server itself, and its runner pod mounts it."""
    reader = LiveReader(api_client)
    client.CoreV1Api(api_client).create_namespaced_config_map(
        namespace, {"metadata": {"name": "ghes-ca"}, "data": {"ca.crt": private_server(folder).ca_pem}}
    )
    tls = {"certificateFrom": {"configMapKeyRef": {"name": "ghes-ca", "key": "ca.crt"}}}
    create_pool(
        api_client, namespace, pool_manifest("ca", repo="octo-org/octo-repo", replicas=1, githubServerTLS=tls)
    )
    wait_for(
        lambda: _pool_condition(reader, namespace, "TokenReady", pool="ca") == "True",
        timeout=60,
        message="the token of the pool that trusts its own CA",
    )
    wait_for(
        lambda: any(
            naming.CA_VOLUME in [v.name for v in p.spec.volumes or []]
            for p in client.CoreV1Api(api_client)
            .list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}=ca")
            .items
        ),
        message="a runner pod that mounts the CA",
    )


def _kubernetes_mode(api_client: client.ApiClient, namespace: str) -> None:
    """A containerMode: kubernetes pool: its runner ServiceAccount and RoleBinding (to the shipped
    hooks ClusterRole) are made (list, watch, create), hand edits repaired (patch), and both
    deleted when the pool leaves the mode (delete)."""
    reader, name = LiveReader(api_client), naming.runner_account_name("km")
    create_pool(
        api_client, namespace, pool_manifest("km", repo="octo-org/octo-repo", containerMode="kubernetes")
    )
    wait_for(lambda: reader.get_role_binding(namespace, name), message="the runner RoleBinding")
    rbac, core = client.RbacAuthorizationV1Api(api_client), client.CoreV1Api(api_client)
    intruder = [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]
    rbac.patch_namespaced_role_binding(name, namespace, {"subjects": intruder})
    core.patch_namespaced_service_account(name, namespace, {"metadata": {"labels": {naming.POOL_LABEL: "x"}}})

    def repaired() -> bool:
        account = reader.get_service_account(namespace, name) or {}
        binding = reader.get_role_binding(namespace, name) or {}
        return (
            binding.get("subjects") not in (None, intruder)
            and (account.get("metadata") or {}).get("labels", {}).get(naming.POOL_LABEL) == "km"
        )

    wait_for(repaired, message="the hand edits to be repaired")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "km", {"spec": {"containerMode": None}}
    )
    wait_for(
        lambda: (
            not any((reader.get_service_account(namespace, name), reader.get_role_binding(namespace, name)))
        ),
        message="the runner account to go with the mode",
    )
    _foreign_runner_access(api_client, namespace)


def _foreign_runner_access(api_client: client.ApiClient, namespace: str) -> None:
    """A ServiceAccount and RoleBinding someone else made under the names a kubernetes-mode pool
    would use: the operator's creates are refused (409), it reads them by name (get), leaves them
    alone and the pool says so."""
    reader, name = LiveReader(api_client), naming.runner_account_name("kf")
    client.CoreV1Api(api_client).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    create_pool(
        api_client, namespace, pool_manifest("kf", repo="octo-org/octo-repo", containerMode="kubernetes")
    )

    def ready_reason() -> str | None:
        pool = reader.get_pool(namespace, "kf") or {}
        found = [c for c in (pool.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
        return found[0]["reason"] if found else None

    wait_for(lambda: ready_reason() == "ChildNotOwned", message="the pool to say its names are taken")
    assert not (reader.get_service_account(namespace, name) or {})["metadata"].get("ownerReferences")
    assert (reader.get_role_binding(namespace, name) or {})["roleRef"]["name"] == "view"


def _scrape(port: int, token: str) -> int:
    """One scrape of --metrics-secure: a TokenReview and a SubjectAccessReview by the operator."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=insecure) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_the_operator_needs_exactly_deploys_rbac(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator_as_service_account: RunningOperator,
    tmp_path: Path,
) -> None:
    running = operator_as_service_account
    _lifecycle(api_client, namespace, running.github)
    _demand(api_client, namespace, running.github)
    _private_ca(api_client, namespace, tmp_path)
    _kubernetes_mode(api_client, namespace)
    assert _scrape(running.metrics_port, running.token) == 403, "the operator itself is no metrics reader"

    requests = [
        e
        for e in control_plane.audit_events()
        if e.get("user", {}).get("username") == OPERATOR_USER and e.get("userAgent") == running.user_agent
    ]
    refused = {
        (e["verb"], e.get("requestURI"))
        for e in requests
        if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
    }
    assert not refused, f"the operator was refused: {sorted(refused)}"
    used = {
        (
            e["objectRef"].get("apiGroup", ""),
            e["objectRef"]["resource"]
            + ("/" + e["objectRef"]["subresource"] if e["objectRef"].get("subresource") else ""),
            e["verb"],
        )
        for e in requests
        if "objectRef" in e
    }
    unused = _granted(_rbac_manifests()) - used - ADMISSION_ONLY - ESCALATION_ONLY - CONFLICT_ONLY
    assert not unused, f"granted but never needed, remove from deploy/rbac: {sorted(unused)}"


def test_a_pool_deleted_while_no_operator_ran_is_drained_by_the_next_one(
    api_client: client.ApiClient, control_plane: ControlPlane, installed: None, namespace: str
) -> None:
    """An upgrade or a crash: the pool is deleted while no operator runs. The next leader drains
    it like any other and deletes its runner's pod itself once the runner is deregistered. It
    watches a namespace's pods only once it has asked whether the namespace is enabled; a drain
    that read "no pod" there let the pool go under its pod (garbage collection took the pod
    after the last listing, and a runner registering meanwhile stayed on GitHub)."""
    reader, scope = LiveReader(api_client), "octo-org/octo-repo"
    pat_secret(api_client, namespace)
    with _fake_github() as github:
        with _operator_as_service_account(api_client, namespace, github):
            create_pool(api_client, namespace, pool_manifest("late", repo=scope))
            [pod] = mark_pods_ready(api_client, namespace, "late", 1)
            secret = reader.get_secret(namespace, naming.token_secret_name("late")) or {}
            token = base64.b64decode(secret["data"][naming.TOKEN_SECRET_KEY]).decode()
            github.register_runner_with_token(scope, token, pod, [f"{namespace}/late", "self-hosted"])
            wait_for(
                lambda: _pool_condition(reader, namespace, "Ready", pool="late") == "True",
                message="the pool to be Ready",
            )
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, "late"
        )
        with _operator_as_service_account(api_client, namespace, github) as running:
            wait_for(lambda: reader.get_pool(namespace, "late") is None, timeout=60, message="the pool to go")
            deleted = {
                e["objectRef"].get("name")
                for e in control_plane.audit_events()
                if e.get("userAgent") == running.user_agent
                and e["verb"] == "delete"
                and e.get("objectRef", {}).get("resource") == "pods"
            }
        assert github.runners(scope) == [], "no runner of the pool is left on GitHub"
        assert pod in deleted, "the new leader deleted the pod itself, after its runner"


def test_owner_references_need_the_finalizers_permission(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Why ADMISSION_ONLY holds: without update on runnerpools/finalizers, blockOwnerDeletion is refused."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "no-finalizers"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "no-finalizers"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "no-finalizers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-finalizers"},
            "subjects": [{"kind": "ServiceAccount", "name": "no-finalizers", "namespace": namespace}],
        },
    )
    pool = create_pool(api_client, namespace, pool_manifest("owner"))
    limited = _bearer_client(api_client, _service_account_token(api_client, namespace, "no-finalizers"))
    owner = {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": "owner",
        "uid": pool["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(limited).create_namespaced_secret(
            namespace, {"metadata": {"name": "child", "ownerReferences": [owner]}}
        )
    assert refused.value.status == 403
    assert "cannot set blockOwnerDeletion" in refused.value.body


# --- namespaces the platform team did not enable --------------------------------------------


def _refused(call: Any) -> int:
    """The status the API server answers ``call()`` with (2xx: 200)."""
    try:
        call()
    except ApiException as err:
        return int(err.status)
    return 200


def test_the_operator_may_touch_no_secret_and_no_pod_where_not_enabled(
    api_client: client.ApiClient, installed: None, disabled_namespace: str
) -> None:
    """What the API server itself answers deploy/'s ServiceAccount: 403 on a Secret (read by
    name, listed), on its pods (listed) and on a new pod in a namespace not enabled, and on
    Secrets and pods listed cluster-wide; 2xx there once the RoleBinding is there."""
    namespace = disabled_namespace
    pat_secret(api_client, namespace)
    operator = client.CoreV1Api(
        _bearer_client(api_client, _service_account_token(api_client, OPERATOR_NAMESPACE, OPERATOR_SA))
    )
    pod = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    calls = {
        "get secret": lambda: operator.read_namespaced_secret(naming.DEFAULT_CREDENTIAL_SECRET, namespace),
        "list secrets": lambda: operator.list_namespaced_secret(namespace),
        "list pods": lambda: operator.list_namespaced_pod(namespace),
        "create pod": lambda: operator.create_namespaced_pod(namespace, pod, dry_run="All"),
    }
    assert {what: _refused(call) for what, call in calls.items()} == dict.fromkeys(calls, 403)
    assert _refused(operator.list_secret_for_all_namespaces) == 403, "no Secret cluster-wide"
    assert _refused(operator.list_pod_for_all_namespaces) == 403, "no pod cluster-wide"
    enable_namespace(api_client, namespace)
    wait_for(
        lambda: all(_refused(call) == 200 for call in calls.values()),
        timeout=30,
        message="the operator to be allowed in the enabled namespace",
    )


def test_a_pool_where_not_enabled_waits_saying_why_until_the_namespace_is_enabled(
    api_client: client.ApiClient, control_plane: ControlPlane, installed: None, disabled_namespace: str
) -> None:
    """No pod, no token Secret, no GitHub request, not one refused request; a condition with the
    line to run and an Event. Then the platform team runs it: Ready, without a restart."""
    namespace, reader = disabled_namespace, LiveReader(api_client)
    core = client.CoreV1Api(api_client)
    pat_secret(api_client, namespace)
    with _operator_as_service_account(api_client, namespace) as running:
        create_pool(api_client, namespace, pool_manifest("ne", repo="octo-org/octo-repo"))

        def refused_condition() -> dict[str, Any] | None:
            conditions = ((reader.get_pool(namespace, "ne") or {}).get("status") or {}).get(
                "conditions"
            ) or []
            return next((c for c in conditions if c["type"] == "NamespaceEnabled"), None)

        condition = wait_for(refused_condition, message="the NamespaceEnabled condition")
        assert (condition["status"], condition["reason"]) == ("False", "NamespaceNotEnabled")
        line = (
            f"kubectl create rolebinding runnerpool-operator -n {namespace} "
            "--clusterrole=runnerpool-operator-namespace "
            f"--serviceaccount={OPERATOR_NAMESPACE}:{OPERATOR_SA}"
        )
        assert line in condition["message"]
        wait_for(
            lambda: any(
                reason == "NamespaceNotEnabled" for _, reason, _ in pool_events(api_client, namespace)
            ),
            message="the NamespaceNotEnabled Event",
        )
        assert core.list_namespaced_pod(namespace).items == [], "no runner pod"
        assert [s.metadata.name for s in core.list_namespaced_secret(namespace).items] == [
            naming.DEFAULT_CREDENTIAL_SECRET
        ], "no token Secret"
        assert running.github.requests == [], "no GitHub request for a pool that may have no runner"
        refused = [
            (e["verb"], e.get("requestURI"))
            for e in control_plane.audit_events()
            if e.get("userAgent") == running.user_agent
            and (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
        ]
        assert refused == [], "the operator asked first: it tried no write it may not make"

        enable_namespace(api_client, namespace)  # what the condition's message says to run
        wait_for(
            lambda: _pool_condition(reader, namespace, "NamespaceEnabled", pool="ne") == "True",
            timeout=RECHECK + 30,
            message="the operator to notice the enabled namespace (it looks again every 30 s)",
        )
        [pod] = mark_pods_ready(api_client, namespace, "ne", 1)
        secret = wait_for(
            lambda: (reader.get_secret(namespace, naming.token_secret_name("ne")) or {}).get("data"),
            message="the token",
        )
        token = base64.b64decode(secret[naming.TOKEN_SECRET_KEY]).decode()
        running.github.register_runner_with_token(
            "octo-org/octo-repo", token, pod, [f"{namespace}/ne", "self-hosted"]
        )
        wait_for(
            lambda: _pool_condition(reader, namespace, "Ready", pool="ne") == "True",
            timeout=30,
            message="the pool to be Ready once its namespace is enabled",
        )
