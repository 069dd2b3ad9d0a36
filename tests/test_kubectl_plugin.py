"""``kubectl runnerpool`` against the real API server and the fake GitHub, as a user runs it.

The cluster side is set up by hand the way the operator leaves it (a pool's status, its token
Secret's expiry annotation, runner pods reported Running by a played kubelet), so each test
controls exactly what the plugin must show; ``tests/e2e/test_kubectl_plugin_why.py`` asks
``why`` about pools the real operator is stuck on. GitHub is the in-process fake, reached
over loopback through the operator's own client.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client

from runnerpool import api, naming
from runnerpool.domain import rfc3339
from runnerpool.plugin.cluster import Login, connect
from tests.helpers import wait_for
from tests.kubectl_plugin import Plugin
from tests.pools import create_pool, pat_secret, play_kubelet, pool_manifest
from testworld.envtest import assets
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import install_operator_rbac, service_account_kubeconfig
from testworld.fakegithub import FakeGitHub

REPO = "octo-org/hello-world"
PAT = "ghp_pluginGoodToken0123456789abcdefghij"
WRONG_PAT = "ghp_pluginWrongToken0123456789abcdefgh"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[REPO], tokens=[PAT]) as github:
        yield github


@pytest.fixture
def plugin(
    control_plane: ControlPlane, runnerpool_crd: dict[str, Any], namespace: str, fake: FakeGitHub
) -> Plugin:
    """The plugin as the cluster's admin, with the fake as the operator's default GitHub API."""
    return Plugin(control_plane.kubeconfig, namespace, fake.url)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _set_status(api_client: client.ApiClient, namespace: str, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name, {"status": status}
    )


def _condition(type_: str, status: str, reason: str, message: str, age: timedelta) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(_now() - age),
    }


def _token_secret(api_client: client.ApiClient, namespace: str, pool: str, expires: datetime) -> None:
    """The token Secret as the reconciler creates it and the secret updater fills it."""
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        {
            "metadata": {
                "name": naming.token_secret_name(pool),
                "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool},
                "annotations": {naming.TOKEN_EXPIRY_ANNOTATION: rfc3339(expires)},
            },
            "stringData": {naming.TOKEN_SECRET_KEY: "AREGISTRATIONTOKEN"},
        },
    )


def _runner_pod(
    api_client: client.ApiClient, namespace: str, pool: str, name: str, phase: str | None
) -> None:
    """A runner pod with the labels the operator selects by; ``phase`` as a kubelet reports it."""
    client.CoreV1Api(api_client).create_namespaced_pod(
        namespace,
        {
            "metadata": {
                "name": name,
                "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool},
            },
            "spec": {"containers": [{"name": naming.RUNNER_CONTAINER, "image": api.DEFAULT_RUNNER_IMAGE}]},
        },
    )
    if phase is not None:
        play_kubelet(api_client, namespace, name, phase=phase)


def _logged(github: FakeGitHub, count: int) -> None:
    """Until the fake's request log holds ``count`` requests: it logs an exchange after answering."""
    assert github.wait_for(lambda: len(github.requests) >= count), github.requests


def _ready(desired: int, ready: int) -> list[dict[str, Any]]:
    reason = "RunnersReady" if ready >= desired else "RunnersStarting"
    return [
        _condition(
            "Ready",
            "True" if ready >= desired else "False",
            reason,
            f"{ready}/{desired} runner pods ready",
            timedelta(minutes=5),
        ),
        _condition("TokenReady", "True", "TokenIssued", "registration token valid", timedelta(minutes=6)),
    ]


# -- list -----------------------------------------------------------------------------------------


def test_list_shows_desired_ready_busy_queued_and_token_expiry(
    plugin: Plugin, api_client: client.ApiClient, namespace: str
) -> None:
    now = _now()
    create_pool(api_client, namespace, pool_manifest("fixed", repo=REPO, replicas=2))
    # The status copy lags behind the Secret (the operator had not caught up): the Secret wins.
    _set_status(
        api_client,
        namespace,
        "fixed",
        {
            "desiredReplicas": 2,
            "readyReplicas": 1,
            "runners": {"online": 0, "busy": 1, "offline": 0},
            "tokenExpiresAt": rfc3339(now + timedelta(minutes=10)),
            "conditions": _ready(2, 1),
        },
    )
    _token_secret(api_client, namespace, "fixed", now + timedelta(minutes=55, seconds=30))
    create_pool(
        api_client,
        namespace,
        pool_manifest("auto", org="octo-org", autoscaling={"minReplicas": 0, "maxReplicas": 5}),
    )
    _set_status(
        api_client,
        namespace,
        "auto",
        {
            "desiredReplicas": 4,
            "readyReplicas": 4,
            "runners": {"online": 3, "busy": 1, "offline": 0},
            "demand": {"queued": 3, "busy": 1},
            "tokenExpiresAt": rfc3339(now - timedelta(minutes=30, seconds=30)),
            "conditions": _ready(4, 4),
        },
    )
    create_pool(api_client, namespace, pool_manifest("new", repo=REPO, replicas=1))
    create_pool(
        api_client,
        namespace,
        pool_manifest("scaled", repo=REPO, autoscaling={"minReplicas": 0, "maxReplicas": 2}),
    )

    shown = plugin("list")
    assert shown.code == 0, shown.err
    assert shown.rows() == [
        ["NAME", "SCOPE", "DESIRED", "READY", "BUSY", "QUEUED", "TOKEN EXPIRES", "STATUS"],
        [
            "auto",
            "org:octo-org",
            "4",
            "4",
            "1",
            "3",
            "expired 30m ago",
            "Ready (RunnersReady)",
        ],
        ["fixed", f"repo:{REPO}", "2", "1", "1", "<none>", "in 55m", "NotReady (RunnersStarting)"],
        ["new", f"repo:{REPO}", "1", "0", "<none>", "<none>", "<none>", "<none>"],
        # Follows demand, none recorded yet: nothing queued (a fixed pool counts no queue).
        ["scaled", f"repo:{REPO}", "<none>", "0", "<none>", "0", "<none>", "<none>"],
    ]

    listed = json.loads(plugin("list", "-o", "json").out)
    assert [(p["name"], p["tokenExpiresAt"], p["tokenExpiryFrom"]) for p in listed] == [
        ("auto", rfc3339(now - timedelta(minutes=30, seconds=30)), "status"),
        ("fixed", rfc3339(now + timedelta(minutes=55, seconds=30)), "secret"),
        ("new", None, None),
        ("scaled", None, None),
    ]
    # The expiry is read from the Secrets' metadata alone: the registration token never leaves the server.
    cluster = connect(Login(str(plugin.kubeconfig)))
    try:
        [token_secret] = cluster.token_secrets(namespace) or []
    finally:
        cluster.close()
    assert token_secret["metadata"]["name"] == naming.token_secret_name("fixed")
    assert "data" not in token_secret and "stringData" not in token_secret

    everywhere = plugin("list", "-A")
    assert everywhere.rows()[0][0] == "NAMESPACE"
    assert [namespace, "fixed"] in [row[:2] for row in everywhere.rows()]


# -- runners --------------------------------------------------------------------------------------


def test_runners_lists_githubs_runners_beside_their_pods(
    plugin: Plugin, api_client: client.ApiClient, namespace: str, fake: FakeGitHub
) -> None:
    pat_secret(api_client, namespace, PAT)
    create_pool(api_client, namespace, pool_manifest("pool", repo=REPO, replicas=3))
    label = naming.pool_runner_label(namespace, "pool")
    _runner_pod(api_client, namespace, "pool", "pool-aaaaa", "Running")
    _runner_pod(api_client, namespace, "pool", "pool-bbbbb", None)
    _runner_pod(api_client, namespace, "other", "other-zzzzz", "Running")
    busy = fake.register_runner(REPO, "pool-aaaaa", [label], busy=True)
    gone = fake.register_runner(REPO, "pool-ccccc", [label.upper()], status="offline")
    fake.register_runner(REPO, "other-zzzzz", [naming.pool_runner_label(namespace, "other")])
    fake.register_runner(REPO, "laptop", ["gpu"])
    before = len(fake.requests)

    shown = plugin("runners", "pool")
    assert shown.code == 0, shown.err
    assert shown.rows() == [
        ["RUNNER", "ID", "STATUS", "BUSY", "POD", "POD PHASE", "NOTE"],
        ["pool-aaaaa", str(busy), "online", "true", "pool-aaaaa", "Running"],
        ["<none>", "<none>", "<none>", "<none>", "pool-bbbbb", "Pending", "not registered"],
        ["pool-ccccc", str(gone), "offline", "false", "<none>", "<none>", "no pod"],
    ]
    _logged(fake, before + 1)
    assert len(fake.requests) - before == 1, "one runner listing per command"
    as_json = json.loads(plugin("runners", "pool", "-o", "json").out)
    assert [(r["runner"], r["pod"], r["podPhase"], r["note"]) for r in as_json] == [
        ("pool-aaaaa", "pool-aaaaa", "Running", None),
        (None, "pool-bbbbb", "Pending", "not registered"),
        ("pool-ccccc", None, None, "no pod"),
    ]


def test_runners_with_github_app_credentials_on_an_enterprise_server_path(
    control_plane: ControlPlane, runnerpool_crd: dict[str, Any], api_client: client.ApiClient, namespace: str
) -> None:
    """A GitHub App Secret, as the operator reads it: one installation token, then one listing."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    with FakeGitHub(api_prefix="/api/v3", scopes=[REPO], installations=[42], app_keys={"7": pem}) as ghes:
        client.CoreV1Api(api_client).create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": "github-app"},
                "stringData": {"app-id": "7", "app-installation-id": "42", "app-private-key": pem},
            },
        )
        create_pool(
            api_client,
            namespace,
            pool_manifest("app", repo=REPO, replicas=1, credentialSecretName="github-app"),
        )
        _runner_pod(api_client, namespace, "app", "app-aaaaa", "Running")
        runner = ghes.register_runner(REPO, "app-aaaaa", [naming.pool_runner_label(namespace, "app")])

        shown = Plugin(control_plane.kubeconfig, namespace, ghes.url)("runners", "app")
        assert shown.code == 0, shown.err
        assert shown.rows()[1] == ["app-aaaaa", str(runner), "online", "false", "app-aaaaa", "Running"]
        _logged(ghes, 2)
        assert [(r.method, r.credential) for r in ghes.requests] == [
            ("POST", "app:7"),
            ("GET", "installation:42"),
        ]
        assert "PRIVATE KEY" not in shown.both
        assert not any(t.token in shown.both for t in ghes.installation_tokens(42))


# -- remove-offline -------------------------------------------------------------------------------


def test_remove_offline_asks_first_and_removes_only_offline_idle_runners(
    plugin: Plugin, api_client: client.ApiClient, namespace: str, fake: FakeGitHub
) -> None:
    pat_secret(api_client, namespace, PAT)
    create_pool(api_client, namespace, pool_manifest("pool", repo=REPO, replicas=3))
    label = naming.pool_runner_label(namespace, "pool")
    _runner_pod(api_client, namespace, "pool", "pool-lost1", "Running")
    fake.register_runner(REPO, "pool-idle1", [label])
    fake.register_runner(REPO, "pool-busy1", [label], busy=True)
    fake.register_runner(REPO, "pool-lost1", [label], status="offline")
    fake.register_runner(REPO, "pool-lost2", [label], status="offline")
    # GitHub can list a runner offline and busy while its job's connection drops: it stays.
    fake.register_runner(REPO, "pool-busy2", [label], status="offline", busy=True)
    fake.register_runner(REPO, "other-lost", [naming.pool_runner_label(namespace, "other")], status="offline")
    everyone = {r["name"] for r in fake.runners(REPO)}

    declined = plugin("remove-offline", "pool", stdin="n\n")
    assert declined.code == 1
    assert "Remove these 2 runner(s) from GitHub? [y/N]" in declined.out
    assert "pool-lost1" in declined.out and "pool-lost2" in declined.out and "pool-busy2" not in declined.out
    assert "offline while its pod runs" in declined.out, "pool-lost1's pod is Running"
    assert "Nothing removed." in declined.out
    assert {r["name"] for r in fake.runners(REPO)} == everyone
    assert plugin("remove-offline", "pool", stdin="").code == 1, "no answer is no"
    assert {r["name"] for r in fake.runners(REPO)} == everyone

    before = len(fake.requests)
    removed = plugin("remove-offline", "pool", stdin="y\n")
    assert removed.code == 0, removed.err
    assert "removed runner pool-lost1" in removed.out and "removed runner pool-lost2" in removed.out
    assert {r["name"] for r in fake.runners(REPO)} == everyone - {"pool-lost1", "pool-lost2"}
    _logged(fake, before + 3)
    assert [(r.method, r.status) for r in fake.requests[before:]] == [
        ("GET", 200),
        ("DELETE", 204),
        ("DELETE", 204),
    ]

    again = plugin("remove-offline", "pool", "--yes")
    assert again.code == 0
    assert "No offline idle runners of pool" in again.out


# -- what goes wrong ------------------------------------------------------------------------------


def test_credential_problems_and_an_unreachable_github_say_what_to_fix(
    plugin: Plugin, api_client: client.ApiClient, namespace: str, fake: FakeGitHub
) -> None:
    create_pool(api_client, namespace, pool_manifest("pool", repo=REPO, replicas=1))
    missing = plugin("runners", "pool")
    assert missing.code == 1
    assert (
        f"error: the pool's credential Secret (spec.credentialSecretName) is not usable: Secret "
        f"{namespace}/{naming.DEFAULT_CREDENTIAL_SECRET} not found; create it with key 'token'"
    ) in missing.err

    pat_secret(api_client, namespace, WRONG_PAT)
    refused = plugin("runners", "pool")
    assert refused.code == 1
    assert (
        f"GitHub refused the credential in Secret {namespace}/{naming.DEFAULT_CREDENTIAL_SECRET}"
        in refused.err
    )
    assert "HTTP 401" in refused.err
    assert WRONG_PAT not in refused.both

    nowhere = _closed_port_url()
    unreachable = plugin("remove-offline", "pool", "--yes", github_api_url=nowhere)
    assert unreachable.code == 1
    assert f"error: cannot reach GitHub at {nowhere}" in unreachable.err
    assert WRONG_PAT not in unreachable.both

    nopool = plugin("why", "nope")
    assert nopool.code == 1
    assert f'runnerpool "nope" not found in namespace "{namespace}"' in nopool.err


def _closed_port_url() -> str:
    """A loopback address nothing listens on: connections are refused at once."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{closed.getsockname()[1]}"


def _allowed(api_client: client.ApiClient, user: str, namespace: str, resource: str, verb: str) -> bool:
    group = api.GROUP if resource == api.PLURAL else ""
    review = client.AuthorizationV1Api(api_client).create_subject_access_review(
        {
            "spec": {
                "user": user,
                "resourceAttributes": {
                    "group": group,
                    "resource": resource,
                    "verb": verb,
                    "namespace": namespace,
                },
            }
        }
    )
    return bool(review.status.allowed)


def test_without_rbac_the_error_names_the_permission_and_the_role_that_grants_it(
    plugin: Plugin,
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A user with no role gets refused by name; the built-in view role (with the aggregated
    runnerpool-operator-tenant-view) is enough for list and why, not for runners."""
    install_operator_rbac(control_plane)
    pat_secret(api_client, namespace, PAT)
    create_pool(api_client, namespace, pool_manifest("pool", repo=REPO, replicas=1))
    _set_status(
        api_client,
        namespace,
        "pool",
        {"observedGeneration": 1, "desiredReplicas": 1, "conditions": _ready(1, 1)},
    )
    nobody = service_account_kubeconfig(control_plane, namespace, "nobody", tmp_path / "nobody", create=True)

    refused = plugin("list", kubeconfig=nobody)
    assert refused.code == 1
    assert refused.err.startswith(f'error: not allowed to list runnerpools in namespace "{namespace}"')
    assert f"system:serviceaccount:{namespace}:nobody" in refused.err, (
        "the API server's message names the user"
    )
    assert (
        f"kubectl create rolebinding runnerpool-view --clusterrole=view --serviceaccount={namespace}:nobody "
        f"-n {namespace}"
    ) in refused.err
    assert "runnerpool-operator-tenant-view" in refused.err
    assert "deploy/rbac/tenant_roles.yaml" in refused.err

    viewer = service_account_kubeconfig(control_plane, namespace, "viewer", tmp_path / "viewer", create=True)
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "viewer-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
        },
    )
    user = f"system:serviceaccount:{namespace}:viewer"
    wait_for(
        lambda: _allowed(api_client, user, namespace, api.PLURAL, "list"), message="view to cover RunnerPools"
    )

    listed = plugin("list", kubeconfig=viewer)
    assert listed.code == 0, listed.err
    assert [row[0] for row in listed.rows()] == ["NAME", "pool"]
    everywhere = plugin("list", "-A", kubeconfig=viewer)
    assert everywhere.code == 1
    assert everywhere.err.startswith("error: not allowed to list runnerpools in all namespaces")
    assert (
        "kubectl create clusterrolebinding runnerpool-view --clusterrole=view "
        f"--serviceaccount={namespace}:viewer (or pass -n)"
    ) in everywhere.err
    explained = plugin("why", "pool", kubeconfig=viewer)
    assert explained.code == 0, explained.err
    assert "Nothing: the pool is ready" in explained.out

    secretless = plugin("runners", "pool", kubeconfig=viewer)
    assert secretless.code == 1
    assert secretless.err.startswith(f'error: not allowed to get secrets in namespace "{namespace}"')
    assert f"--clusterrole=edit --serviceaccount={namespace}:viewer -n {namespace}" in secretless.err
    assert PAT not in secretless.both


# -- as a user runs it ----------------------------------------------------------------------------


def test_kubectl_finds_the_installed_plugin_on_path(
    control_plane: ControlPlane, runnerpool_crd: dict[str, Any], api_client: client.ApiClient, namespace: str
) -> None:
    """``kubectl runnerpool list``: the pinned kubectl runs the console script pip installed."""
    create_pool(api_client, namespace, pool_manifest("pool", repo=REPO, replicas=2))
    _set_status(
        api_client, namespace, "pool", {"desiredReplicas": 2, "readyReplicas": 2, "conditions": _ready(2, 2)}
    )
    scripts = Path(sys.executable).parent
    assert (scripts / "kubectl-runnerpool").exists(), "pip install . installs the kubectl-runnerpool script"
    kubectl = assets.ensure_binaries()["kubectl"]
    env = {
        **os.environ,
        "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(control_plane.kubeconfig),
    }
    listed = subprocess.run(
        [str(kubectl), "plugin", "list"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert str(scripts / "kubectl-runnerpool") in listed.stdout, listed.stderr
    done = subprocess.run(
        [str(kubectl), "runnerpool", "list", "-n", namespace],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    header = "NAME   SCOPE                       DESIRED   READY   BUSY     QUEUED   TOKEN EXPIRES   STATUS"
    row = "pool   repo:octo-org/hello-world   2         2       <none>   <none>   <none>          "
    assert done.stdout.splitlines() == [header, row + "Ready (RunnersReady)"]

    # A failure is one line on stderr: what failed and what to fix, no library log or traceback.
    pat_secret(api_client, namespace, PAT)
    nowhere = _closed_port_url()
    failed = subprocess.run(
        [str(kubectl), "runnerpool", "runners", "pool", "-n", namespace, "--github-api-url", nowhere],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1
    assert failed.stdout == ""
    [line] = failed.stderr.splitlines()
    assert line.startswith(f"error: cannot reach GitHub at {nowhere} (GET /repos/{REPO}/actions/runners: ")
    assert PAT not in failed.stderr
