"""A kubeconfig that logs in as deploy/'s ServiceAccount, so the operator under test has exactly
the permissions a real install gives it.

The control plane's own kubeconfig is admin (``system:masters``): an operator started with it
can do anything, and a verb missing from deploy/rbac goes unnoticed until a user's cluster
refuses it (the demand writer's ``get`` on RunnerPools did, once).  Every process-level
caller (the e2e and node tests, the benches, the demo) starts the operator through
:func:`operator_kubeconfig` instead: it applies deploy/rbac as ``kubectl apply -k`` does on a
cluster, asks the TokenRequest API for a token of the ``runnerpool-operator`` ServiceAccount,
and writes a kubeconfig holding that token (no client certificate).

:func:`service_account_kubeconfig` does the same for any ServiceAccount (a tenant, a
Prometheus, the operator in namespace-scoped mode); :func:`refusals` reads the API server's
audit log for what a user was denied, which is how a test proves that the rules suffice.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from testworld.envtest import assets, audit
from testworld.envtest.controlplane import ControlPlane
from testworld.wait import poll_until

__all__ = [
    "NAMESPACE_ROLE",
    "OPERATOR_NAMESPACE",
    "OPERATOR_SERVICE_ACCOUNT",
    "OPERATOR_USER",
    "RECEIVER_SERVICE_ACCOUNT",
    "RECEIVER_USER",
    "TOKEN_SECONDS",
    "apply_manifests",
    "enable_namespace",
    "install_operator_rbac",
    "kubectl",
    "operator_kubeconfig",
    "receiver_kubeconfig",
    "refusals",
    "service_account_kubeconfig",
    "service_account_user",
    "token_of",
    "uses_a_client_certificate",
]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OPERATOR_NAMESPACE = "runnerpool-system"
OPERATOR_SERVICE_ACCOUNT = "runnerpool-operator"
#: Longer than any test, bench or demo session; the control plane's PKI lasts 7 days.
TOKEN_SECONDS = 24 * 3600
_READY_TIMEOUT = 30.0

_lock = threading.Lock()


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's tokens (audit logs, RBAC)."""
    return f"system:serviceaccount:{namespace}:{name}"


OPERATOR_USER = service_account_user(OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT)
#: The webhook receiver's own account (deploy/rbac/webhook_receiver_*.yaml).
RECEIVER_SERVICE_ACCOUNT = "runnerpool-operator-webhook"
RECEIVER_USER = service_account_user(OPERATOR_NAMESPACE, RECEIVER_SERVICE_ACCOUNT)


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The pinned kubectl as admin (what a platform team runs to install deploy/)."""
    binary = assets.ensure_binaries()["kubectl"]
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    return subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def apply_manifests(plane: ControlPlane, *args: str, stdin: str | None = None) -> None:
    """``kubectl apply`` (e.g. ``-k deploy/rbac`` or ``-f -``); raises with kubectl's message."""
    done = kubectl(plane, "apply", *args, stdin=stdin)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl apply {' '.join(args)} failed: {done.stderr.strip()}")


def install_operator_rbac(plane: ControlPlane) -> None:
    """deploy/rbac: the operator's namespace, ServiceAccount, roles and bindings, as ``kubectl
    apply -k`` does.

    Applying is idempotent, so every caller may ask; the lock keeps two threads from racing.
    """
    with _lock:
        apply_manifests(plane, "-k", str(DEPLOY / "rbac"))


#: deploy/rbac's leader-election Role and its binding: the Lease, read and renewed by name only.
LEADER_ELECTION_RBAC = ("leader_election_role.yaml", "leader_election_role_binding.yaml")


def allow_leader_election_in(api_client: client.ApiClient, namespace: str) -> tuple[str, ...]:
    """Make deploy/'s leader-election Role and binding again in ``namespace`` (409: there
    already); returns the operator flags that elect there, under the Lease name deploy/ ships.

    Operators under test elect in a namespace of their own rather than in ``runnerpool-system``:
    the Role lets deploy/'s account read and renew one Lease by name, so tests electing there
    would all share that Lease, and a leader one test left behind would hold off the next.
    """
    rbac = client.RbacAuthorizationV1Api(api_client)
    create = {"Role": rbac.create_namespaced_role, "RoleBinding": rbac.create_namespaced_role_binding}
    lease = ""
    for name in LEADER_ELECTION_RBAC:
        doc = yaml.safe_load((DEPLOY / "rbac" / name).read_text())
        doc["metadata"]["namespace"] = namespace
        lease = next((r["resourceNames"][0] for r in doc.get("rules", ()) if r.get("resourceNames")), lease)
        try:
            create[doc["kind"]](namespace, doc)
        except ApiException as err:
            if err.status != 409:
                raise
    # The authorizer learns of the new binding from its own watch: an operator started at once
    # could be refused its first Lease read, which a least-privilege test counts as missing.
    review = {
        "spec": {
            "user": OPERATOR_USER,
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "update",
                "group": "coordination.k8s.io",
                "resource": "leases",
                "name": lease,
            },
        }
    }
    authorization = client.AuthorizationV1Api(api_client)
    if not poll_until(lambda: bool(authorization.create_subject_access_review(review).status.allowed), 30):
        raise TimeoutError(f"{OPERATOR_USER} was not allowed its Lease {namespace}/{lease} within 30 s")
    return ("--leader-elect", "--leader-election-namespace", namespace)


def token_of(api_client: client.ApiClient, namespace: str, name: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bound token of ServiceAccount ``namespace/name`` from the TokenRequest API."""
    answer = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": seconds}}
    )
    return str(answer.status.token)


def _admin(plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(plane.kubeconfig))


def _write_kubeconfig(plane: ControlPlane, path: Path, user: str, token: str) -> None:
    admin = yaml.safe_load(plane.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)


def authenticated_user(path: Path) -> str | None:
    """Who the API server takes the kubeconfig's token for now (one request); ``None``: 401."""
    api = config.new_client_from_config(config_file=str(path))
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review({})
        return str(review.status.user_info.username)
    except ApiException as err:
        if err.status != 401:
            raise
        return None
    finally:
        api.close()


def _wait_until_authenticated(path: Path, user: str) -> None:
    """Until the API server accepts the token as ``user`` (its ServiceAccount cache may lag)."""
    deadline = time.monotonic() + _READY_TIMEOUT
    while authenticated_user(path) != user:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API server did not take {path}'s token as {user} in {_READY_TIMEOUT}s")
        threading.Event().wait(0.05)


def service_account_kubeconfig(
    plane: ControlPlane, namespace: str, name: str, path: Path, *, create: bool = False
) -> Path:
    """Write ``path``: a kubeconfig with a token of ServiceAccount ``namespace/name``.

    With ``create`` the ServiceAccount is made first (409: it exists).  Returns once the API
    server accepts the token.
    """
    api = _admin(plane)
    try:
        if create:
            try:
                client.CoreV1Api(api).create_namespaced_service_account(
                    namespace, {"metadata": {"name": name}}
                )
            except ApiException as err:
                if err.status != 409:
                    raise
        token = token_of(api, namespace, name)
    finally:
        api.close()
    user = service_account_user(namespace, name)
    _write_kubeconfig(plane, path, user, token)
    _wait_until_authenticated(path, user)
    return path


def operator_kubeconfig(plane: ControlPlane) -> Path:
    """The kubeconfig every operator process under test gets: deploy/'s ServiceAccount.

    Made once per control plane (beside its admin kubeconfig) and shared: tokens last a day.
    Checked on every call, since a suite that installs and uninstalls the operator (the
    install tests on the node) deletes the ServiceAccount, and with it every token it had:
    then deploy/rbac is applied again and a new token written.
    """
    return _deploy_account_kubeconfig(plane, OPERATOR_SERVICE_ACCOUNT, "operator.kubeconfig")


def receiver_kubeconfig(plane: ControlPlane) -> Path:
    """As :func:`operator_kubeconfig`, for the webhook receiver's own account."""
    return _deploy_account_kubeconfig(plane, RECEIVER_SERVICE_ACCOUNT, "webhook-receiver.kubeconfig")


def _deploy_account_kubeconfig(plane: ControlPlane, account: str, filename: str) -> Path:
    path = plane.workdir / filename
    user = service_account_user(OPERATOR_NAMESPACE, account)
    with _lock:
        if path.exists() and authenticated_user(path) == user:
            return path
    install_operator_rbac(plane)
    with _lock:
        if not (path.exists() and authenticated_user(path) == user):
            service_account_kubeconfig(plane, OPERATOR_NAMESPACE, account, path)
    return path


def uses_a_client_certificate(kubeconfig: Path) -> bool:
    """Whether a kubeconfig logs in with a client certificate (the test world's admin does)."""
    users: Iterable[dict[str, Any]] = (yaml.safe_load(kubeconfig.read_text()) or {}).get("users") or []
    return any({"client-certificate", "client-certificate-data"} & set(u.get("user") or {}) for u in users)


def refusals(plane: ControlPlane, user: str, since: int = 0) -> list[str]:
    """Requests of ``user`` that RBAC refused, from audit-log offset ``since`` on.

    Only authorization refusals count: a 403 from admission (a namespace being deleted, a
    quota) is the API's answer to a permitted request, not a missing permission.
    """
    return [
        f"{event['verb']} {event.get('requestURI')}"
        for event in audit.complete_events(plane.audit_log, since)
        if (event.get("user") or {}).get("username") == user
        and (event.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
    ]


#: deploy/rbac's ClusterRole of everything the operator writes in a runner namespace.
NAMESPACE_ROLE = "runnerpool-operator-namespace"


def enable_namespace(api_client: client.ApiClient, namespace: str) -> None:
    """What a platform team does for each runner namespace (docs/rbac.md): a RoleBinding there
    of deploy/rbac's ``runnerpool-operator-namespace`` to the operator's ServiceAccount, as
    ``kubectl create rolebinding runnerpool-operator -n NS --clusterrole=... --serviceaccount=...``
    makes it. Without it the operator, on deploy/'s RBAC, makes nothing there. Idempotent."""
    body = {
        "metadata": {"name": OPERATOR_SERVICE_ACCOUNT, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE_ROLE},
        "subjects": [
            {"kind": "ServiceAccount", "name": OPERATOR_SERVICE_ACCOUNT, "namespace": OPERATOR_NAMESPACE}
        ],
    }
    try:
        client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(namespace, body)
    except ApiException as err:
        if err.status != 409:
            raise


#: deploy/rbac's ClusterRole that may get /metrics (--metrics-secure).
METRICS_READER = "runnerpool-operator-metrics-reader"


@contextlib.contextmanager
def metrics_reader_binding(api_client: client.ApiClient, namespace: str, account: str) -> Iterator[str]:
    """Bind ServiceAccount ``namespace/account`` to the metrics reader role, as a user binds
    Prometheus's; the binding's name, removed on exit."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = f"metrics-reader-{namespace}-{account}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )
    try:
        yield binding
    finally:
        rbac.delete_cluster_role_binding(binding)
