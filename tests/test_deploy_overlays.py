"""deploy/overlays/namespaced, rendered by the real kustomize (``kubectl kustomize``).

The overlay uses what the plain renderer of tests/test_deploy_manifests.py does not
(patches, a ``namespace`` per watched folder), so the pinned kubectl renders it, as
``kubectl apply -k`` will.  Its proof on an API server is tests/e2e/test_namespaced_mode.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_deploy_manifests import (
    CLUSTER_SCOPED_RULES,
    DEPLOY,
    NAMESPACE,
    NAMESPACE_RULES,
    OPERATOR_RULES,
    RECEIVER,
    RECEIVER_RULES,
    SERVICE_ACCOUNT,
    identity,
    one,
    render,
    verbs_by_resource,
)
from testworld.envtest import assets

OVERLAY = DEPLOY / "overlays" / "namespaced"
#: The operator's rules in a watched namespace: a ClusterRole bound there by a RoleBinding of the
#: same name, never cluster-wide.
NAMESPACED_ROLE = "runnerpool-operator-namespaced"

Obj = dict[str, Any]


def kustomize(path: str) -> list[Obj]:
    kubectl = assets.ensure_binaries()["kubectl"]
    done = subprocess.run(
        [str(kubectl), "kustomize", path], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def overlay() -> list[Obj]:
    return kustomize(str(OVERLAY))


@pytest.fixture(scope="module")
def watched(overlay: list[Obj]) -> list[str]:
    """The namespaces where the overlay binds the operator's rules."""
    return sorted(
        o["metadata"]["namespace"]
        for o in overlay
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == NAMESPACED_ROLE
    )


def _args(objects: list[Obj]) -> list[str]:
    deployment = one(objects, "Deployment", "runnerpool-operator")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


#: Plain-HTTP metrics (no --metrics-secure) served to the pod's own loopback only.
LOOPBACK_METRICS = "--metrics-bind-address=127.0.0.1"


def assert_the_base_args_less_metrics_secure(args: list[str], base: list[str], patch: str) -> None:
    """The overlay lists the args by value (``patch``): each of the base's but --metrics-secure
    and the metrics address (loopback instead), and nothing else but the namespaced flags."""
    wanted = {a for a in base if a != "--metrics-secure" and not a.startswith("--metrics-bind-address=")}
    wanted.add(LOOPBACK_METRICS)
    namespaced = ("--namespace=", "--namespace-role=")
    kept = {a for a in args if a != "--namespaced" and not a.startswith(namespaced)}
    assert not wanted - kept, f"{patch} lacks the base's {sorted(wanted - kept)}"
    assert not kept - wanted, f"{patch} has {sorted(kept - wanted)}, which the base has not"


def test_the_real_kustomize_renders_the_default_install_as_the_test_renderer_does() -> None:
    """So the plain renderer's checks of deploy/ hold for what users apply."""
    assert sorted(map(identity, kustomize(str(DEPLOY)))) == sorted(map(identity, render(DEPLOY)))


def test_the_operator_gets_its_rules_bound_in_the_watched_namespaces_only(
    overlay: list[Obj], watched: list[str]
) -> None:
    base = {identity(o) for o in render(DEPLOY)}
    removed = {
        (kind, "", account)
        for account in (SERVICE_ACCOUNT, RECEIVER)
        for kind in ("ClusterRole", "ClusterRoleBinding")
    }
    added = {("ClusterRole", "", NAMESPACED_ROLE)} | {
        binding
        for ns in watched
        for binding in (
            ("RoleBinding", ns, NAMESPACED_ROLE),
            ("Role", ns, RECEIVER),
            ("RoleBinding", ns, RECEIVER),
        )
    }
    assert {identity(o) for o in overlay} == (base - removed) | added
    assert watched == ["ci-runners"]
    assert not [o for o in overlay if o["kind"] == "ClusterRoleBinding"], "nothing cluster-wide is bound"


def test_the_namespaced_role_has_the_cluster_roles_rules_less_the_cluster_scoped_ones_and_the_namespace_roles(
    overlay: list[Obj],
) -> None:
    """Every watched namespace is one the operator works in: its reads and its writes."""
    expected = {key: set(verbs) for key, verbs in OPERATOR_RULES.items() if key not in CLUSTER_SCOPED_RULES}
    for key, verbs in NAMESPACE_RULES.items():
        expected.setdefault(key, set()).update(verbs)
    assert verbs_by_resource(one(overlay, "ClusterRole", NAMESPACED_ROLE)) == expected


def test_each_watched_namespace_binds_the_role_with_a_binding_the_operator_holds(
    overlay: list[Obj], watched: list[str]
) -> None:
    """A RoleBinding to a ClusterRole, never a Role: deleting the namespace deletes a Role there at
    once, and the operator then cannot finalize its pools there (the namespace hangs in
    Terminating); a binding to a ClusterRole it holds with its finalizer until they are gone
    (runnerpool.binding_protection, which holds only those). Proven on an API server by
    tests/e2e/test_namespaced_mode.py."""
    bindings = [o for o in overlay if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == NAMESPACED_ROLE]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == watched
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": NAMESPACED_ROLE,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
        ]


def test_the_receiver_gets_a_role_in_each_watched_namespace(overlay: list[Obj], watched: list[str]) -> None:
    expected = {key: verbs for key, verbs in RECEIVER_RULES.items() if key not in CLUSTER_SCOPED_RULES}
    for namespace in watched:
        role = next(o for o in overlay if identity(o) == ("Role", namespace, RECEIVER))
        assert verbs_by_resource(role) == expected
        binding = next(o for o in overlay if identity(o) == ("RoleBinding", namespace, RECEIVER))
        assert binding["roleRef"]["name"] == RECEIVER
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RECEIVER, "namespace": NAMESPACE}]
    receiver = one(overlay, "Deployment", RECEIVER)
    args = receiver["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-secure" not in args
    assert sorted(a.split("=", 1)[1] for a in args if a.startswith("--namespace=")) == watched
    base = one(render(DEPLOY), "Deployment", RECEIVER)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert_the_base_args_less_metrics_secure(args, base, "receiver_args.yaml")


def test_the_operator_runs_namespaced_in_exactly_the_watched_namespaces(
    overlay: list[Obj], watched: list[str]
) -> None:
    args = _args(overlay)
    assert "--namespaced" in args
    # A pool's NamespaceNotEnabled line binds the role this mode binds.
    assert f"--namespace-role={NAMESPACED_ROLE}" in args
    assert sorted(a.split("=", 1)[1] for a in args if a.startswith("--namespace=")) == watched
    # Reviews of metrics tokens are cluster-scoped: this mode serves metrics without them.
    assert "--metrics-secure" not in args
    assert_the_base_args_less_metrics_secure(args, _args(render(DEPLOY)), "operator_args.yaml")


@pytest.mark.parametrize("name", [SERVICE_ACCOUNT, RECEIVER])
def test_metrics_without_their_reviews_listen_on_loopback_only(overlay: list[Obj], name: str) -> None:
    """Without --metrics-secure (its reviews are cluster-scoped) metrics are plain HTTP: on
    0.0.0.0 any pod in the cluster, a tenant's CI job in a runner pod included, would read every
    pool, namespace, repository and workflow name in them."""
    args = one(overlay, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-secure" not in args
    addresses = [a for a in args if a.startswith("--metrics-bind-address=")]
    assert addresses == [LOOPBACK_METRICS], addresses


def test_every_watched_folder_names_its_namespace() -> None:
    for folder in sorted((OVERLAY / "watched").iterdir()):
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        assert kustomization["namespace"] == folder.name
        assert kustomization["resources"] == ["../../role"]


@pytest.mark.parametrize("manifest", ["manager/deployment.yaml", "manager/webhook_receiver_deployment.yaml"])
def test_metrics_secure_is_removed_by_value_wherever_it_sits(tmp_path: Path, manifest: str) -> None:
    """Reordering the base's args (here: reversing them) must not make the overlay remove
    another flag, nor fail to build: the overlay names the flag, not its index."""
    copy = tmp_path / "repo"
    shutil.copytree(DEPLOY, copy / "deploy", symlinks=True)
    shutil.copytree(DEPLOY.parent / "crds", copy / "crds")
    path = copy / "deploy" / manifest
    base = yaml.safe_load(path.read_text())
    container = base["spec"]["template"]["spec"]["containers"][0]
    container["args"].reverse()
    path.write_text(yaml.safe_dump(base))
    name = base["metadata"]["name"]
    original = one(kustomize(str(OVERLAY)), "Deployment", name)
    rendered = one(kustomize(str(copy / "deploy" / "overlays" / "namespaced")), "Deployment", name)
    args = rendered["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metrics-secure" not in args
    assert sorted(args) == sorted(original["spec"]["template"]["spec"]["containers"][0]["args"])
