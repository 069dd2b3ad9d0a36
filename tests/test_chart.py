"""The Helm chart (charts/runnerpool-operator): lint, parity with deploy/, and what its values do.

Helm is the pinned build (testworld/tools). The parity test is the chart's contract: with its
default values it installs what ``kubectl apply -k deploy/`` installs (as ``kubectl kustomize``
renders it), object for object and field for field, and names each object and field that
differ. Three differences are by design and the only ones tolerated: the chart does not create
its own Namespace (``helm install -n NS --create-namespace`` does; a chart that renders its
release namespace cannot be installed into it), it adds Helm's bookkeeping labels (and keeps
the shared hooks' ClusterRole on uninstall: ``HELM_ANNOTATIONS``), and it
renders the operator's leader-election Lease (``CHART_ONLY``): else ``helm uninstall`` would leave
it, as the operator creates it at run time; deploy/ needs no such object, since deleting deploy/
deletes its Namespace and every Lease in it.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from generators import receiver_policy
from runnerpool.cli import parser, settings_from
from runnerpool.domain import Scope
from runnerpool.hook_access import RUNNER_HOOKS_CLUSTER_ROLE
from runnerpool.namespace_access import NamespaceAccess
from runnerpool.naming import DEFAULT_CREDENTIAL_SECRET
from runnerpool.settings import LeaderElectionSettings
from tests.helpers import operator_help
from tests.pools import pool_manifest
from tests.test_deploy_manifests import identity
from testworld.envtest import assets as envtest_assets
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import install_operator_rbac
from testworld.install import helm as helm_install
from testworld.install.helm import HelmInstall
from testworld.install.kustomize import run_time_overlay
from testworld.install.target import InstallError, Target
from testworld.tools import assets as tool_assets

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "runnerpool-operator"
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "monitoring" / "dashboard.json"
NAMESPACE = "runnerpool-system"
RELEASE = "runnerpool-operator"
#: Labels Helm charts carry and kustomize bases do not; nothing else may differ.
HELM_LABELS = frozenset(
    {
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/version",
        "helm.sh/chart",
    }
)
#: Annotations only Helm reads: the hooks' ClusterRole outlives the release that made it.
HELM_ANNOTATIONS = frozenset({"helm.sh/resource-policy"})
#: Objects only the chart renders (the module's docstring says why).
CHART_ONLY = frozenset({("Lease", NAMESPACE, LeaderElectionSettings().lease_name)})
#: Operator flags the chart renders for features another branch adds to the operator (namespaced
#: mode, HTTPS metrics). Empty this set when that branch is merged: then every rendered flag must
#: be one `runnerpool-operator --help` lists.
AWAITED_FLAGS: frozenset[str] = frozenset()

Obj = dict[str, Any]


# --- running Helm ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def helm() -> Path:
    return tool_assets.ensure_tool(tool_assets.HELM)


def run_helm(
    helm: Path, *args: str, values: Obj | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm), *args]
    if values is not None:
        cmd += ["--values", "-"]
    return subprocess.run(
        cmd,
        input=yaml.safe_dump(values) if values is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def template(helm: Path, values: Obj | None = None, *, namespace: str = NAMESPACE) -> list[Obj]:
    """``helm template`` as ``helm install RELEASE -n NAMESPACE`` would install it, CRD included."""
    done = run_helm(
        helm, "template", RELEASE, str(CHART), "--namespace", namespace, "--include-crds", values=values
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def refusal(helm: Path, values: Obj) -> str:
    """What Helm says when it refuses ``values``."""
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, values=values)
    assert done.returncode != 0, f"Helm accepted {values}"
    return done.stderr


def one(objects: list[Obj], kind: str, name: str | None = None, namespace: str | None = None) -> Obj:
    found = [
        o
        for o in objects
        if o["kind"] == kind
        and name in (None, o["metadata"]["name"])
        and namespace in (None, o["metadata"].get("namespace"))
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[identity(o) for o in found]}"
    return found[0]


def deployment(objects: list[Obj], component: str = "operator") -> Obj:
    """The operator's Deployment, or the webhook receiver's (``component="webhook-receiver"``)."""
    (found,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


def container(objects: list[Obj], component: str = "operator") -> Obj:
    (operator,) = deployment(objects, component)["spec"]["template"]["spec"]["containers"]
    return operator  # type: ignore[no-any-return]


def kustomize(folder: Path) -> list[Obj]:
    """``kubectl kustomize folder``: what ``kubectl apply -k`` would send."""
    kubectl = envtest_assets.ensure_binaries(("kubectl",))["kubectl"]
    done = subprocess.run(
        [str(kubectl), "kustomize", str(folder)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def rules_of(path: Path) -> list[Obj]:
    return yaml.safe_load(path.read_text())["rules"]  # type: ignore[no-any-return]


# --- parity with deploy/ --------------------------------------------------------------------


def is_label_map(node: Any) -> bool:
    """Labels, a label selector's matchLabels, or a Service's selector: strings only."""
    return isinstance(node, dict) and all(isinstance(v, str) for v in node.values())


def without_helm_labels(node: Any) -> Any:
    """``node`` with HELM_LABELS removed from every label map and selector in it, and
    HELM_ANNOTATIONS from its annotations (dropped when nothing else is left)."""
    if isinstance(node, dict):
        cleaned = {
            key: (
                {k: v for k, v in value.items() if k not in HELM_LABELS}
                if key in {"labels", "matchLabels", "selector"} and is_label_map(value)
                else {k: v for k, v in value.items() if k not in HELM_ANNOTATIONS}
                if key == "annotations" and is_label_map(value)
                else without_helm_labels(value)
            )
            for key, value in node.items()
        }
        if cleaned.get("annotations") == {} and node["annotations"]:
            del cleaned["annotations"]  # only Helm's were there
        return cleaned
    if isinstance(node, list):
        return [without_helm_labels(item) for item in node]
    return node


def differences(deploy: Any, chart: Any, path: str) -> Iterator[str]:
    """Each field where the two differ, as ``path: what deploy/ has, what the chart has``."""
    if isinstance(deploy, dict) and isinstance(chart, dict):
        for key in sorted(set(deploy) | set(chart)):
            where = f"{path}.{key}"
            if key not in chart:
                yield f"{where}: only in deploy/: {deploy[key]!r}"
            elif key not in deploy:
                yield f"{where}: only in the chart: {chart[key]!r}"
            else:
                yield from differences(deploy[key], chart[key], where)
    elif isinstance(deploy, list) and isinstance(chart, list) and len(deploy) == len(chart):
        for index, (left, right) in enumerate(zip(deploy, chart, strict=True)):
            yield from differences(left, right, f"{path}[{index}]")
    elif deploy != chart:
        yield f"{path}: deploy/ has {deploy!r}, the chart {chart!r}"


def parity_report(deploy: list[Obj], chart: list[Obj]) -> list[str]:
    by_id = {identity(o): o for o in deploy}
    chart_by_id = {identity(o): o for o in chart}
    report = [f"{kind} {ns}/{name}: only in deploy/" for kind, ns, name in sorted(by_id.keys() - chart_by_id)]
    report += [
        f"{kind} {ns}/{name}: only in the chart" for kind, ns, name in sorted(chart_by_id.keys() - by_id)
    ]
    for key in sorted(by_id.keys() & chart_by_id.keys()):
        left, right = (without_helm_labels(side[key]) for side in (by_id, chart_by_id))
        report += [f"{key[0]} {key[1]}/{key[2]}: {d}" for d in differences(left, right, "")]
    return report


def test_default_values_render_what_deploy_installs(helm: Path) -> None:
    deploy = [o for o in kustomize(DEPLOY) if o["kind"] != "Namespace"]
    chart = template(helm)
    assert {identity(o) for o in chart} >= CHART_ONLY
    report = parity_report(deploy, [o for o in chart if identity(o) not in CHART_ONLY])
    assert not report, "the chart's defaults and deploy/ differ:\n  " + "\n  ".join(report)


def test_parity_report_names_object_and_field() -> None:
    """The report a lead reads after deploy/ changed: which object, which field, both values."""
    deploy = [{"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"verbs": ["get", "list"]}]}]
    chart = [
        {"kind": "ClusterRole", "metadata": {"name": "r", "labels": {"helm.sh/chart": "c"}}, "rules": [{}]},
        {"kind": "Service", "metadata": {"name": "s", "namespace": "n"}},
    ]
    assert parity_report(deploy, chart) == [
        "Service n/s: only in the chart",
        "ClusterRole /r: .metadata.labels: only in the chart: {}",
        "ClusterRole /r: .rules[0].verbs: only in deploy/: ['get', 'list']",
    ]


def test_rbac_rules_are_deploys_own_files() -> None:
    """The chart reads its rules from deploy/rbac/ (links), so the two never grant different things."""
    for name in (
        "cluster_role.yaml",
        "namespace_cluster_role.yaml",
        "leader_election_role.yaml",
        "webhook_receiver_cluster_role.yaml",
    ):
        linked = CHART / "files" / name
        assert linked.resolve() == (DEPLOY / "rbac" / name).resolve(), f"{linked} must link to deploy/rbac/"


# --- lint, CRDs and packaging ---------------------------------------------------------------


LINTED_VALUES: dict[str, Obj] = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "cert-manager": {
        "metrics": {
            "certManager": {"enabled": True, "issuerRef": {"kind": "Issuer", "name": "ca"}},
            "serviceMonitor": {"enabled": True, "credentialsSecret": "prom-token"},
        }
    },
    "everything": {
        "metrics": {
            "secure": True,
            "certSecret": "metrics-tls",
            "serviceMonitor": {"enabled": True},
            "readers": [{"namespace": "monitoring", "name": "prometheus"}],
        },
        "webhook": {
            "secret": {"create": True, "value": "0123456789abcdef"},
            "ingress": {"enabled": True, "host": "runners.example.com", "className": "nginx"},
        },
        "rbac": {"aggregateToDefaultRoles": True},
        "networkPolicy": {"enabled": True, "apiServer": {"ports": [443], "cidrs": ["10.96.0.1/32"]}},
        "allow": ["team-*=org:acme,repo:acme-labs/tools", "platform=enterprise:big-corp"],
        "dashboard": {"enabled": True, "annotations": {"grafana_folder": "CI"}},
        "prometheusRule": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "runbookBaseUrl": "https://github.com/example/runnerpool-operator/blob/v0.1.0",
        },
    },
}


@pytest.mark.parametrize("values", LINTED_VALUES.values(), ids=LINTED_VALUES.keys())
def test_helm_lint_is_clean(helm: Path, values: Obj) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), values=values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_crd_is_in_the_crds_folder_so_uninstall_keeps_it(helm: Path) -> None:
    """Helm installs crds/ once and never upgrades or deletes it; templates would delete it."""
    crd_files = sorted((CHART / "crds").iterdir())
    assert [p.name for p in crd_files] == ["runnerpool.yaml"]
    assert yaml.safe_load(crd_files[0].read_text()) == yaml.safe_load(
        (REPO / "crds" / "runnerpool.yaml").read_text()
    )
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr
    templated = [d["kind"] for d in yaml.safe_load_all(done.stdout) if d]
    assert "CustomResourceDefinition" not in templated


def test_packaged_chart_carries_the_linked_files(helm: Path, tmp_path: Path) -> None:
    """What the release workflow pushes: real files in place of the links, CRD and rules included."""
    done = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (archive,) = tmp_path.glob("runnerpool-operator-*.tgz")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for inside, source in (
            ("crds/runnerpool.yaml", REPO / "crds" / "runnerpool.yaml"),
            ("files/cluster_role.yaml", DEPLOY / "rbac" / "cluster_role.yaml"),
            ("files/dashboard.json", DASHBOARD),
            ("files/alerts.yaml", DEPLOY / "monitoring" / "alerts" / "alerts.yaml"),
            ("files/webhook_receiver_policy.yaml", DEPLOY / "rbac" / "webhook_receiver_policy.yaml"),
        ):
            member = members[f"runnerpool-operator/{inside}"]
            assert member.isfile(), f"{inside} is packaged as a link"
            extracted = tar.extractfile(member)
            assert extracted is not None
            assert extracted.read().decode() == source.read_text()


def test_chart_follows_the_operator_version(helm: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    assert chart["appVersion"] == version.group(1)
    operator = container(template(helm))
    assert operator["image"] == f"runnerpool-operator:{chart['appVersion']}"
    assert f"--runner-image=runnerpool-runner:{chart['appVersion']}" in operator["args"]


# --- values ---------------------------------------------------------------------------------


def unmatched(values: Obj, schema: Obj, path: str = "") -> Iterator[str]:
    """Keys with a default but no schema, or the reverse, down every closed schema object."""
    properties: Obj = schema["properties"]
    for key in sorted(set(values) ^ (set(properties) - {"global"})):
        yield f"{path}{key}: " + ("no schema" if key in values else "no default in values.yaml")
    for key, sub in properties.items():
        if sub.get("additionalProperties") is False and key in values:
            yield from unmatched(values[key], sub, f"{path}{key}.")


def test_every_value_has_a_schema_and_every_schema_entry_a_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert list(unmatched(values, schema)) == []


REFUSED: dict[str, tuple[Obj, str]] = {
    "typo": ({"replicas": 3}, "additional properties 'replicas' not allowed"),
    "nested typo": ({"metrics": {"secured": True}}, "additional properties 'secured' not allowed"),
    "no replicas": ({"replicaCount": 0}, "/replicaCount"),
    "string replicas": ({"replicaCount": "two"}, "/replicaCount"),
    "bad namespace": ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    "allow rule of another kind": ({"allow": ["team-a=user:octocat"]}, "/allow/0"),
    "bad pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "bad digest": ({"image": {"digest": "latest"}}, "/image/digest"),
    "bad log format": ({"logFormat": "xml"}, "/logFormat"),
    "flag without dashes": ({"extraArgs": ["log-level=DEBUG"]}, "/extraArgs/0"),
    "secret without value": ({"webhook": {"secret": {"create": True}}}, "/webhook/secret"),
    "ingress without host": ({"webhook": {"ingress": {"enabled": True}}}, "/webhook/ingress"),
    "budget blocks drains": (
        {"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 3}},
        "podDisruptionBudget.minAvailable (3) must be below",
    ),
    "log level of another name": ({"logLevel": "verbose"}, "/logLevel"),
    "two leaders": ({"leaderElection": {"enabled": False}}, "needs leaderElection.enabled"),
    "no account": ({"serviceAccount": {"create": False}}, "serviceAccount.name is required"),
    "no receiver account": (
        {"serviceAccount": {"create": False, "name": "ops"}},
        "serviceAccount.webhookName is required when serviceAccount.create is false: create a "
        "ServiceAccount of its own for the webhook receiver",
    ),
    "receiver as the operator": (
        {"serviceAccount": {"create": False, "name": "ops", "webhookName": "ops"}},
        "serviceAccount.webhookName must differ from the operator's account",
    ),
    "dashboard typo": ({"dashboard": {"enable": True}}, "additional properties 'enable' not allowed"),
    "cert-manager without issuer": (
        {"metrics": {"certManager": {"enabled": True}}},
        "/metrics/certManager/issuerRef/name",
    ),
    "reader without namespace": ({"metrics": {"readers": [{"name": "prometheus"}]}}, "/metrics/readers/0"),
    "bad dashboard namespace": ({"dashboard": {"namespace": "Monitoring"}}, "/dashboard/namespace"),
    "job metrics by a label of another name": ({"jobMetrics": {"labels": "workflow"}}, "/jobMetrics/labels"),
}


@pytest.mark.parametrize(("values", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_bad_values_are_refused_with_a_message(helm: Path, values: Obj, message: str) -> None:
    assert message in refusal(helm, values)


def test_one_replica_installs_with_the_defaults_and_no_budget(helm: Path) -> None:
    """A budget one replica could satisfy (minAvailable 0) protects nothing, and minAvailable 1
    would block every drain: one replica renders none, as the receiver's does."""
    objects = template(helm, {"replicaCount": 1})
    assert deployment(objects)["spec"]["replicas"] == 1
    assert not [o for o in objects if identity(o) == ("PodDisruptionBudget", NAMESPACE, RELEASE)]
    two = template(helm, {"replicaCount": 2})
    assert one(two, "PodDisruptionBudget", RELEASE)["spec"]["minAvailable"] == 1


def test_job_metrics_labels_reach_both_components_that_observe_jobs(helm: Path) -> None:
    """The poller (operator) and the receivers both observe job transitions: one setting for both."""
    objects = template(helm, {"jobMetrics": {"labels": "none", "maxLabelSetsPerPool": 7}})
    for component in ("operator", "webhook-receiver"):
        args = [a for a in container(objects, component)["args"] if a.startswith("--job-metrics")]
        demand = settings_from(parser().parse_args(args)).demand
        assert (demand.job_metrics_labels, demand.job_metrics_max_label_sets) == ("none", 7), component


@pytest.mark.parametrize("level", ["debug", "Debug", "DEBUG"])
def test_log_level_in_any_case_reaches_both_components_in_upper_case(helm: Path, level: str) -> None:
    objects = template(helm, {"logLevel": level})
    for component in ("operator", "webhook-receiver"):
        assert "--log-level=DEBUG" in container(objects, component)["args"]


def notes(helm: Path, control_plane: ControlPlane, values: Obj | None = None) -> str:
    """What ``helm install`` prints after installing (Helm asks the API server its version).

    A release and namespace of its own: Helm checks the objects it would make against the
    cluster, and other tests of the session leave an install of deploy/ (its ServiceAccount in
    runnerpool-system) behind; a server dry run makes ``lookup`` see the shared hooks ClusterRole,
    which the chart then leaves alone, as a real install would.
    """
    release = f"notes-{uuid.uuid4().hex[:8]}"
    done = run_helm(
        helm,
        "install",
        release,
        str(CHART),
        "--namespace",
        release,
        "--dry-run=server",
        values=values,
        env={"KUBECONFIG": str(control_plane.kubeconfig)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_create_the_secret_a_pool_reads_by_default(helm: Path, control_plane: ControlPlane) -> None:
    """A pool without spec.credentialSecretName reads the CRD's default Secret: the one NOTES makes."""
    crd = yaml.safe_load((CHART / "crds" / "runnerpool.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    default = spec["properties"]["credentialSecretName"]["default"]
    assert default == DEFAULT_CREDENTIAL_SECRET
    created = re.findall(r"kubectl create secret generic (\S+)", notes(helm, control_plane))
    assert created == [DEFAULT_CREDENTIAL_SECRET]


def test_notes_say_how_to_enable_a_runner_namespace_when_none_is(
    helm: Path, control_plane: ControlPlane
) -> None:
    """With the defaults (cluster-wide, no runnerNamespaces) every first pool said
    NamespaceEnabled=False: NOTES went straight to "create a pool"."""
    told = notes(helm, control_plane)
    (line,) = re.findall(r"kubectl create rolebinding .*", told)
    assert "--clusterrole=notes-" in line and "-runnerpool-operator-namespace" in line, line
    assert "runnerNamespaces" in told
    assert "rolebinding" not in notes(helm, control_plane, {"runnerNamespaces": ["team-a"]})


KUBE_FLOOR = "1.30.0"


def test_kube_version_floor_is_stated_and_enforced(helm: Path) -> None:
    """Native sidecars (dind) are on by default from 1.29 and ValidatingAdmissionPolicy is
    admissionregistration.k8s.io/v1 from 1.30 (Chart.yaml says why)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={KUBE_FLOOR}-0"
    for version, accepted in (
        ("1.29.9", False),
        (KUBE_FLOOR, True),
        ("1.36.3", True),
        ("1.31.0-eks-1", True),
    ):
        done = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", version)
        assert (done.returncode == 0) is accepted, f"{version}: {done.stderr}"
        if not accepted:
            assert "kubeVersion" in done.stderr, done.stderr


def test_single_replica_without_budget_or_leader(helm: Path) -> None:
    objects = template(
        helm,
        {"replicaCount": 1, "podDisruptionBudget": {"enabled": False}, "leaderElection": {"enabled": False}},
    )
    assert not {"PodDisruptionBudget", "Lease"} & {o["kind"] for o in objects}
    assert not [o for o in objects if o["metadata"]["name"].endswith("-leader-election")]
    assert not [a for a in container(objects)["args"] if a.startswith("--leader-elect")]


LEASES: dict[str, tuple[str, Obj, str, str | None]] = {
    # release, values, the Lease's name, the --leader-election-id rendered (None: the default's)
    "deploy's": (RELEASE, {}, LeaderElectionSettings().lease_name, None),
    "other release": ("ci", {}, "ci-runnerpool-operator", "ci-runnerpool-operator"),
    "named": (RELEASE, {"leaderElection": {"leaseName": "pools"}}, "pools", "pools"),
}


@pytest.mark.parametrize(("release", "values", "lease", "flag"), LEASES.values(), ids=LEASES.keys())
def test_the_chart_renders_the_lease_the_operator_elects_on(
    helm: Path, release: str, values: Obj, lease: str, flag: str | None
) -> None:
    """Two releases in one namespace get two Leases; the operator is told the one rendered, and
    its Role lets it read and renew that one only (``create`` cannot name an object)."""
    done = run_helm(helm, "template", release, str(CHART), "--namespace", "ci-ops", values=values)
    assert done.returncode == 0, done.stderr
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    rendered = one(objects, "Lease")
    assert (rendered["metadata"]["name"], rendered["metadata"]["namespace"]) == (lease, "ci-ops")
    assert "spec" not in rendered, "the operator's replicas own the spec"
    ids = [a.split("=", 1)[1] for a in container(objects)["args"] if a.startswith("--leader-election-id=")]
    assert ids == ([flag] if flag else [])
    [role] = [
        o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-leader-election")
    ]
    assert {(tuple(r["verbs"]), tuple(r.get("resourceNames", ()))) for r in role["rules"]} == {
        (("create",), ()),
        (("get", "update"), (lease,)),
    }


NAMESPACED_ROLE = f"{RELEASE}-namespaced"


def test_watch_namespaces_bind_the_operators_rules_in_each_namespace_only(helm: Path) -> None:
    objects = template(helm, {"watchNamespaces": ["team-a", "team-b"]})
    deploy_rules = rules_of(DEPLOY / "rbac" / "cluster_role.yaml")
    cluster_rules = one(objects, "ClusterRole", RELEASE)["rules"]
    role_rules = one(objects, "ClusterRole", NAMESPACED_ROLE)["rules"]
    for ns in ("team-a", "team-b"):
        binding = one(objects, "RoleBinding", NAMESPACED_ROLE, ns)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": NAMESPACED_ROLE,
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]
    assert not [
        o for o in objects if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == NAMESPACED_ROLE
    ]
    assert not [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == RELEASE]
    # Nothing lost, nothing added but the Namespace watch, which --namespaced turns off; what
    # stays cluster-wide is only the metrics reviews, which a RoleBinding cannot grant. Every
    # watched namespace is enabled: the namespace role's rules are bound there too.
    namespace_rules = rules_of(DEPLOY / "rbac" / "namespace_cluster_role.yaml")
    wanted = [r for r in deploy_rules + namespace_rules if "namespaces" not in r.get("resources", [])]
    canonical = functools.partial(json.dumps, sort_keys=True)
    assert sorted(map(canonical, cluster_rules + role_rules)) == sorted(map(canonical, wanted))
    cluster_resources = {r for rule in cluster_rules for r in rule.get("resources", [])}
    assert cluster_resources == {"tokenreviews", "subjectaccessreviews"}
    only_roles = template(helm, {"watchNamespaces": ["team-a"], "metrics": {"secure": False}})
    assert not [
        o
        for o in only_roles
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding") and o["metadata"]["name"] == RELEASE
    ], "without metrics.secure: nothing bound cluster-wide"
    assert {"secrets", "pods"} <= {r for rule in role_rules for r in rule["resources"]}
    args = container(objects)["args"]
    assert args[-3:] == ["--namespaced", "--namespace=team-a", "--namespace=team-b"]


def test_watch_namespaces_bind_like_deploys_namespaced_overlay(helm: Path) -> None:
    """The same role, binding and flag as deploy/overlays/namespaced: a RoleBinding to a
    ClusterRole, which the operator holds while a namespace being deleted still has pools
    (runnerpool.binding_protection holds no binding to a Role)."""
    overlay = kustomize(DEPLOY / "overlays" / "namespaced")
    chart = template(helm, {"watchNamespaces": ["ci-runners"], "metrics": {"secure": False}})
    for kind, namespace in (("ClusterRole", None), ("RoleBinding", "ci-runners")):
        report = parity_report(
            [one(overlay, kind, NAMESPACED_ROLE, namespace)], [one(chart, kind, NAMESPACED_ROLE, namespace)]
        )
        assert not report, "\n".join(report)
    flag = f"--namespace-role={NAMESPACED_ROLE}"
    assert flag in container(chart)["args"]
    assert flag in one(overlay, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"][0]["args"]


def test_runner_namespaces_bind_the_namespace_role_in_each_and_nowhere_else(helm: Path) -> None:
    objects = template(helm, {"runnerNamespaces": ["team-a", "team-b"]})
    role = one(objects, "ClusterRole", f"{RELEASE}-namespace")
    assert role["rules"] == rules_of(DEPLOY / "rbac" / "namespace_cluster_role.yaml")
    bindings = [
        o for o in objects if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == f"{RELEASE}-namespace"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]
    assert not [
        o
        for o in template(helm)
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == f"{RELEASE}-namespace"
    ], "default: no namespace is enabled"


class _SelfReviews:
    """The API server's answer to the operator's SelfSubjectReview, as ``account``."""

    def __init__(self, account: str) -> None:
        self._account = account

    def create(self, *_: Any, **__: Any) -> Obj:
        return {"status": {"userInfo": {"username": f"system:serviceaccount:{self._account}"}}}


def _enable_line(objects: list[Obj], account: str) -> str:
    """The NamespaceNotEnabled line of the operator that runs with the rendered flags."""
    settings = settings_from(parser().parse_args(container(objects)["args"]))
    access = NamespaceAccess(_SelfReviews(account), role=settings.namespace_role)  # type: ignore[arg-type]
    return access.enable_line("team-a")


@pytest.mark.parametrize("release", [RELEASE, "ci"])
def test_the_enable_line_binds_the_namespace_role_the_release_made(helm: Path, release: str) -> None:
    """With any release name, following the line a pool's NamespaceNotEnabled condition gives
    binds the ClusterRole the chart made (<release>-namespace), not deploy/'s, which is not there."""
    done = run_helm(helm, "template", release, str(CHART), "--namespace", NAMESPACE)
    assert done.returncode == 0, done.stderr
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    [role] = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-namespace")
    ]
    fullname = deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"]
    line = _enable_line(objects, f"{NAMESPACE}:{fullname}")
    assert f"--clusterrole={role} --serviceaccount={NAMESPACE}:{fullname}" in line, line
    namespaced = template(helm, {"watchNamespaces": ["team-a"], "fullnameOverride": "ci"})
    one(namespaced, "ClusterRole", "ci-namespaced")
    line = _enable_line(namespaced, f"{NAMESPACE}:ci")
    assert f"--clusterrole=ci-namespaced --serviceaccount={NAMESPACE}:ci" in line, line


def test_allow_rules_become_one_flag_each_that_the_operator_accepts(helm: Path) -> None:
    rules = ["team-a=org:acme,repo:acme-labs/tools", "team-*=enterprise:big-corp"]
    args = container(template(helm, {"allow": rules}))["args"]
    allow = [a for a in args if a.startswith("--allow=")]
    assert allow == [f"--allow={rule}" for rule in rules]
    parsed = settings_from(parser().parse_args(allow)).tenants.allow_list
    assert parsed.allows("team-b", Scope(enterprise="big-corp"))
    assert not parsed.allows("team-b", Scope(organization="acme"))
    assert not [a for a in container(template(helm, {}))["args"] if a.startswith("--allow")], "default: none"


def test_github_api_hosts_become_one_flag_each_that_the_operator_accepts(helm: Path) -> None:
    hosts = ["ghe.example.com", "ghe2.example.com:8443"]
    args = container(template(helm, {"githubApiHosts": hosts}))["args"]
    flags = [a for a in args if a.startswith("--github-api-host=")]
    assert flags == [f"--github-api-host={host}" for host in hosts]
    ghes = ["--github-api-url=https://ghe.example.com/api/v3"]
    allowed = settings_from(parser().parse_args([*flags, *ghes])).github.hosts
    assert allowed.allows("https://ghe2.example.com:8443/api/v3")
    assert not allowed.allows("https://api.github.com"), "the value replaces the default"
    default = [a for a in container(template(helm, {}))["args"] if a.startswith("--github-api-host")]
    assert not default, "default: none, and the operator then allows api.github.com"


BROUGHT_ACCOUNTS = {"create": False, "name": "ops", "webhookName": "ops-webhook"}


def test_rbac_can_be_left_to_the_cluster_admin(helm: Path) -> None:
    objects = template(helm, {"rbac": {"create": False}, "serviceAccount": BROUGHT_ACCOUNTS})
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"}
    assert deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    assert deployment(objects, "webhook-receiver")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "ops-webhook"
    )


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["cluster", "namespaced"])
def test_brought_accounts_run_both_components_and_get_their_bindings(helm: Path, values: Obj) -> None:
    """serviceAccount.create=false: each Deployment runs as an account that was brought (a pod
    naming one nobody made is refused, and a receiver that never starts takes no delivery), and
    the chart's roles are bound to those accounts: the receiver's to its own, never the operator's."""
    objects = template(helm, {**values, "serviceAccount": BROUGHT_ACCOUNTS})
    assert not [o for o in objects if o["kind"] == "ServiceAccount"]
    runs_as = {
        component: deployment(objects, component)["spec"]["template"]["spec"]["serviceAccountName"]
        for component in ("operator", "webhook-receiver")
    }
    assert runs_as == {"operator": "ops", "webhook-receiver": "ops-webhook"}
    bound: dict[str, set[str]] = {}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for subject in binding["subjects"]:
            assert subject["namespace"] == NAMESPACE
            bound.setdefault(subject["name"], set()).add(binding["roleRef"]["name"])
    assert set(bound) == {"ops", "ops-webhook"}, bound
    assert all("webhook" in role and "mirror" not in role for role in bound["ops-webhook"]), bound
    assert not [role for role in bound["ops"] if role.startswith(f"{RELEASE}-webhook")], bound


def test_the_shared_hooks_role_outlives_the_release_that_made_it(helm: Path) -> None:
    """One hooks' ClusterRole per cluster, made by whichever release came first and bound by
    every release's pools: ``helm uninstall`` of that release must not delete it from under the
    others' runners."""
    hooks = one(template(helm), "ClusterRole", RUNNER_HOOKS_CLUSTER_ROLE)
    assert hooks["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    others = [o for o in template(helm) if o["metadata"]["name"] != RUNNER_HOOKS_CLUSTER_ROLE]
    assert not [o for o in others if "helm.sh/resource-policy" in o["metadata"].get("annotations", {})]


def test_release_name_prefixes_every_object(helm: Path) -> None:
    done = run_helm(helm, "template", "ci", str(CHART), "--namespace", "ci-ops")
    assert done.returncode == 0, done.stderr
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    # The hooks' ClusterRole keeps its name: containerMode: kubernetes pools bind it by that name.
    named = [o for o in objects if o["metadata"]["name"] != RUNNER_HOOKS_CLUSTER_ROLE]
    assert len(named) == len(objects) - 1
    assert all(o["metadata"]["name"].startswith("ci-runnerpool-operator") for o in named)
    assert (
        one(objects, "ClusterRoleBinding", "ci-runnerpool-operator")["subjects"][0]["namespace"] == "ci-ops"
    )
    assert (
        "--webhook-secret-mirror=$(POD_NAMESPACE)/ci-runnerpool-operator-webhook-pool-secrets"
        in (container(objects, "webhook-receiver")["args"])
    )


def test_images_digests_and_scheduling(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objects = template(
        helm,
        {
            "image": {"repository": "ghcr.io/acme/runnerpool-operator", "digest": digest},
            "runnerImage": {"repository": "ghcr.io/acme/runnerpool-runner", "tag": "2.0.0"},
            "imagePullSecrets": [{"name": "ghcr"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"x": 1}},
            "priorityClassName": "system-cluster-critical",
            "resources": {"requests": {"cpu": "50m"}},
        },
    )
    pod = deployment(objects)["spec"]["template"]["spec"]
    operator = container(objects)
    assert operator["image"] == f"ghcr.io/acme/runnerpool-operator@{digest}"
    assert "--runner-image=ghcr.io/acme/runnerpool-runner:2.0.0" in operator["args"]
    assert operator["resources"]["requests"]["cpu"] == "50m"
    assert pod["imagePullSecrets"] == [{"name": "ghcr"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "ops"
    assert pod["affinity"] == {"nodeAffinity": {"x": 1}}, "an explicit affinity replaces the default"
    assert pod["priorityClassName"] == "system-cluster-critical"


def test_proxy_and_ca_bundle_reach_the_operator(helm: Path) -> None:
    """The example in values.yaml, as a user behind a proxy with a private CA would set it."""
    objects = template(
        helm,
        {
            "extraEnv": [
                {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
                {"name": "REQUESTS_CA_BUNDLE", "value": "/etc/runnerpool/ca/ca.crt"},
            ],
            "extraEnvFrom": [{"configMapRef": {"name": "proxy-env"}}],
            "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
            "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/runnerpool/ca", "readOnly": True}],
        },
    )
    operator = container(objects)
    env = {e["name"]: e for e in operator["env"]}
    assert env["HTTPS_PROXY"]["value"] == "http://proxy.example.com:3128"
    assert {"POD_NAME", "POD_NAMESPACE"} <= env.keys(), "the chart's own env stays"
    assert operator["envFrom"] == [{"configMapRef": {"name": "proxy-env"}}]
    mounts = {m["name"]: m["mountPath"] for m in operator["volumeMounts"]}
    assert mounts["ca"] == "/etc/runnerpool/ca" and mounts["tmp"] == "/tmp"
    volumes = {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ca"]["configMap"] == {"name": "corporate-ca"}


def test_webhook_secret_from_values_and_ingress(helm: Path) -> None:
    objects = template(helm, LINTED_VALUES["everything"])
    secret = one(objects, "Secret", "runnerpool-webhook-secret")
    assert base64.b64decode(secret["data"]["secret"]).decode() == "0123456789abcdef"
    receiver = deployment(objects, "webhook-receiver")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in receiver["volumes"]}
    assert volumes["webhook-secret"]["secret"]["secretName"] == "runnerpool-webhook-secret"
    operator = {v["name"] for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert "webhook-secret" not in operator, "the operator serves no webhook"
    ingress = one(objects, "Ingress")
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "runners.example.com"
    (path,) = rule["http"]["paths"]
    assert path["path"] == "/webhook"
    service = one(objects, "Service", path["backend"]["service"]["name"])
    assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert ingress["spec"]["ingressClassName"] == "nginx"


def test_servicemonitor_matches_deploys_optional_one(helm: Path) -> None:
    """deploy/ has no certificate to verify (the operator's is made in memory): its ServiceMonitor
    is the chart's with insecureSkipVerify chosen, with the same scraper account and binding."""
    values = {"serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}}}
    objects = template(helm, {"metrics": values})
    deploy_objects = kustomize(DEPLOY / "optional" / "servicemonitor")
    chart_objects = [o for o in objects if identity(o) in {identity(d) for d in deploy_objects}]
    assert {o["kind"] for o in chart_objects} == {
        "ServiceMonitor",
        "ServiceAccount",
        "Secret",
        "ClusterRoleBinding",
    }
    report = parity_report(deploy_objects, chart_objects)
    assert not report, "\n".join(report)
    service = one(objects, "Service", f"{RELEASE}-metrics")
    selector = one(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()


def test_dashboard_configmap_matches_deploys_kustomization(helm: Path) -> None:
    """``dashboard.enabled`` renders what ``kubectl apply -k deploy/monitoring`` applies: the file
    itself (a link to it), under the Grafana sidecar's default label; off by default."""
    assert not [o for o in template(helm) if o["kind"] == "ConfigMap"]
    assert (CHART / "files" / "dashboard.json").resolve() == DASHBOARD.resolve()
    rendered = one(template(helm, {"dashboard": {"enabled": True}}), "ConfigMap")
    (deploy_map,) = kustomize(DEPLOY / "monitoring")
    report = parity_report([deploy_map], [rendered])
    assert not report, "\n".join(report)
    assert rendered["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(rendered["data"]["runnerpool-operator.json"]) == json.loads(DASHBOARD.read_text())


def test_dashboard_labels_annotations_and_namespace(helm: Path) -> None:
    """A sidecar set up with its own label, a folder, and a namespace it searches; Helm merges
    label maps, so the default label goes only when set to null."""
    values = {
        "enabled": True,
        "labels": {"grafana_dashboard": None, "team-dashboards": "ci"},
        "annotations": {"grafana_folder": "CI runners"},
        "namespace": "monitoring",
    }
    rendered = one(template(helm, {"dashboard": values}), "ConfigMap")
    meta = rendered["metadata"]
    assert (meta["name"], meta["namespace"]) == (f"{RELEASE}-dashboard", "monitoring")
    assert meta["labels"]["team-dashboards"] == "ci" and "grafana_dashboard" not in meta["labels"]
    assert meta["annotations"] == {"grafana_folder": "CI runners"}


def test_prometheusrule_carries_deploys_alerts(helm: Path) -> None:
    """The rules are deploy/monitoring/alerts/alerts.yaml's, off by default, with deploy/'s names."""
    assert not [o for o in template(helm) if o["kind"] == "PrometheusRule"]
    objects = template(helm, {"prometheusRule": {"enabled": True}})
    (deploy_rule,) = kustomize(DEPLOY / "optional" / "prometheusrule")
    report = parity_report([deploy_rule], [one(objects, "PrometheusRule")])
    assert not report, "\n".join(report)


def test_prometheusrule_follows_the_release(helm: Path) -> None:
    """Another release name: the rules read its own metrics job (the ServiceMonitor's, i.e. the
    metrics Service's name), carry the extra labels, and link absolute runbooks."""
    values = {**LINTED_VALUES["everything"], "fullnameOverride": "pools"}
    objects = template(helm, values)
    rule = one(objects, "PrometheusRule", "pools")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(objects, "ServiceMonitor", "pools")
    one(objects, "Service", "pools-metrics")  # the scrape job's name
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    absent = next(r for r in rules if r["alert"] == "RunnerPoolOperatorAbsent")
    assert absent["expr"] == 'absent(up{job="pools-metrics"} == 1)'
    assert "runnerpool-operator-metrics" not in yaml.safe_dump(rule)
    base = "https://github.com/example/runnerpool-operator/blob/v0.1.0/docs/troubleshooting.md#"
    assert {r["annotations"]["runbook_url"] for r in rules} == {base + r["alert"].lower() for r in rules}


def _metrics_flags(objects: list[Obj], component: str) -> list[str]:
    return [a for a in container(objects, component)["args"] if a.startswith("--metrics-")]


@pytest.mark.parametrize("component", ["operator", "webhook-receiver"])
def test_metrics_without_their_reviews_listen_on_loopback_only(helm: Path, component: str) -> None:
    """metrics.secure=false serves plain HTTP, no token checked: on a pod address any pod in the
    cluster, a tenant's CI job in a runner pod included, would read every pool, namespace,
    repository and workflow name in the metrics. So the address is 127.0.0.1 then, as
    deploy/overlays/namespaced has it, unless chosen; with secure it stays 0.0.0.0 (deploy/'s)."""
    overlay = kustomize(DEPLOY / "overlays" / "namespaced")
    name = RELEASE if component == "operator" else f"{RELEASE}-webhook"
    overlay_args = one(overlay, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]
    plain = template(helm, {"watchNamespaces": ["ci-runners"], "metrics": {"secure": False}})
    assert _metrics_flags(plain, component) == [a for a in overlay_args if a.startswith("--metrics-")]
    assert "--metrics-bind-address=127.0.0.1" in _metrics_flags(plain, component)
    assert "--metrics-bind-address=127.0.0.1" in _metrics_flags(
        template(helm, {"metrics": {"secure": False}}), component
    ), "cluster mode too"
    assert "--metrics-bind-address=0.0.0.0" in _metrics_flags(template(helm), component)
    chosen = template(helm, {"metrics": {"secure": False, "bindAddress": "0.0.0.0"}})
    assert "--metrics-bind-address=0.0.0.0" in _metrics_flags(chosen, component)


def test_a_servicemonitor_of_loopback_metrics_is_refused(helm: Path) -> None:
    """No scraper reaches 127.0.0.1: a ServiceMonitor there would scrape nothing, silently."""
    message = refusal(helm, {"metrics": {"secure": False, "serviceMonitor": {"enabled": True}}})
    assert "metrics.serviceMonitor with metrics.secure=false cannot scrape" in message
    chosen = {"secure": False, "bindAddress": "0.0.0.0", "serviceMonitor": {"enabled": True}}
    (endpoint,) = endpoints(template(helm, {"metrics": chosen}))
    assert endpoint["scheme"] == "http"


def test_secure_metrics(helm: Path) -> None:
    objects = template(helm, LINTED_VALUES["everything"])
    args = container(objects)["args"]
    assert "--metrics-secure" in args
    assert "--metrics-cert-dir=/etc/runnerpool/metrics-cert" in args
    volumes = {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["metrics-cert"]["secret"]["secretName"] == "metrics-tls"
    reader = one(objects, "ClusterRole", f"{RELEASE}-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    (endpoint,) = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"


# --- the ServiceMonitor, out of the box --------------------------------------------------------

SCRAPER = f"{RELEASE}-metrics-scraper"
METRICS_HOST = f"{RELEASE}-metrics.{NAMESPACE}.svc"


def endpoints(objects: list[Obj]) -> list[Obj]:
    return one(objects, "ServiceMonitor")["spec"]["endpoints"]  # type: ignore[no-any-return]


def test_servicemonitor_sends_a_token_the_operator_accepts(helm: Path) -> None:
    """`authorization` with a Secret (bearerTokenFile is deprecated, and Prometheus's own token is
    not bound to the metrics-reader role): the chart makes a scraper ServiceAccount, its token
    Secret, and binds metrics-reader to it."""
    objects = template(helm, {"metrics": {"certSecret": "metrics-tls", "serviceMonitor": {"enabled": True}}})
    for endpoint in endpoints(objects):
        assert "bearerTokenFile" not in endpoint and "bearerTokenSecret" not in endpoint
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": SCRAPER, "key": "token"},
        }
    account = one(objects, "ServiceAccount", SCRAPER, NAMESPACE)
    assert account["automountServiceAccountToken"] is False
    token = one(objects, "Secret", SCRAPER, NAMESPACE)
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": SCRAPER}
    binding = one(objects, "ClusterRoleBinding", SCRAPER)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one(objects, "ClusterRole", f"{RELEASE}-metrics-reader")["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": NAMESPACE}]


def test_servicemonitor_with_a_token_secret_of_ones_own(helm: Path) -> None:
    values = {
        "certSecret": "metrics-tls",
        "serviceMonitor": {"enabled": True, "credentialsSecret": "prom-token"},
    }
    objects = template(helm, {"metrics": values})
    for endpoint in endpoints(objects):
        assert endpoint["authorization"]["credentials"] == {"name": "prom-token", "key": "token"}
    assert not [o for o in objects if o["metadata"]["name"] == SCRAPER]


def test_prometheus_own_account_is_bound_only_when_named(helm: Path) -> None:
    """For a Prometheus that scrapes with its own token (no ServiceMonitor): an opt-in binding."""
    assert not [
        o for o in template(helm) if o["kind"] == "ClusterRoleBinding" and "metrics" in o["metadata"]["name"]
    ]
    readers = [{"namespace": "monitoring", "name": "kube-prometheus-stack-prometheus"}]
    objects = template(helm, {"metrics": {"readers": readers}})
    binding = one(objects, "ClusterRoleBinding", f"{RELEASE}-metrics-reader")
    assert binding["roleRef"]["name"] == f"{RELEASE}-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", **r} for r in readers]


def test_servicemonitor_verifies_the_operators_certificate(helm: Path) -> None:
    """Against ca.crt of metrics.certSecret, for the metrics Service's name."""
    objects = template(helm, {"metrics": {"certSecret": "metrics-tls", "serviceMonitor": {"enabled": True}}})
    for endpoint in endpoints(objects):
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"] == {
            "ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}},
            "serverName": METRICS_HOST,
        }


def test_cert_manager_issues_the_certificate_the_servicemonitor_verifies(helm: Path) -> None:
    issuer = {"kind": "ClusterIssuer", "name": "cluster-ca"}
    values = {"certManager": {"enabled": True, "issuerRef": issuer}, "serviceMonitor": {"enabled": True}}
    objects = template(helm, {"metrics": values})
    certificate = one(objects, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    secret = certificate["spec"]["secretName"]
    assert certificate["spec"]["issuerRef"] == {**issuer, "group": "cert-manager.io"}
    assert set(certificate["spec"]["dnsNames"]) == {
        METRICS_HOST,
        f"{RELEASE}-webhook-metrics.{NAMESPACE}.svc",
    }
    for component in ("operator", "webhook-receiver"):
        volumes = deployment(objects, component)["spec"]["template"]["spec"]["volumes"]
        assert {"name": "metrics-cert", "secret": {"secretName": secret}} in volumes
    for endpoint in endpoints(objects):
        assert endpoint["tlsConfig"] == {
            "ca": {"secret": {"name": secret, "key": "ca.crt"}},
            "serverName": METRICS_HOST,
        }


def test_unverified_tls_is_an_explicit_choice(helm: Path) -> None:
    """The operator's in-memory certificate cannot be verified: the chart says what to set."""
    message = refusal(helm, {"metrics": {"serviceMonitor": {"enabled": True}}})
    assert "metrics.certSecret" in message and "metrics.certManager.enabled" in message
    assert "insecureSkipVerify" in message
    values = {"serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}}}
    for endpoint in endpoints(template(helm, {"metrics": values})):
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert "insecureSkipVerify" not in yaml.safe_dump(yaml.safe_load((CHART / "values.yaml").read_text()))


@pytest.fixture(scope="session")
def promtool() -> Path:
    return tool_assets.ensure_tool(tool_assets.PROMTOOL)


def scrape_config(monitor: Obj, index: int, files: Path) -> Obj:
    """The scrape config the Prometheus Operator generates for one endpoint, field for field
    (its Secret references become files, as Prometheus reads them); no CRD schema of the
    monitoring.coreos.com group is in the test world, so Prometheus's own config rules
    (``promtool check config``) judge what the ServiceMonitor asks for."""
    endpoint = monitor["spec"]["endpoints"][index]
    meta = monitor["metadata"]
    config: Obj = {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
        "scheme": endpoint["scheme"],
        "metrics_path": endpoint["path"],
        "honor_labels": endpoint["honorLabels"],
        "scrape_interval": endpoint["interval"],
        "static_configs": [{"targets": ["127.0.0.1:8080"]}],
    }
    if "bearerTokenFile" in endpoint:
        config["bearer_token_file"] = endpoint["bearerTokenFile"]
    if "authorization" in endpoint:
        token = files / "token"
        token.write_text("a-token")
        config["authorization"] = {"type": endpoint["authorization"]["type"], "credentials_file": str(token)}
    tls = endpoint.get("tlsConfig", {})
    if tls:
        config["tls_config"] = {"insecure_skip_verify": tls.get("insecureSkipVerify", False)}
        if "ca" in tls:
            ca = files / "ca.crt"
            ca.write_text("")
            config["tls_config"]["ca_file"] = str(ca)
        if "serverName" in tls:
            config["tls_config"]["server_name"] = tls["serverName"]
    return config


def test_prometheus_accepts_the_scrape_and_verifies_the_certificate(
    helm: Path, promtool: Path, tmp_path: Path
) -> None:
    values = {"metrics": {"certSecret": "metrics-tls", "serviceMonitor": {"enabled": True}}}
    monitor = one(template(helm, values), "ServiceMonitor")
    configs = [scrape_config(monitor, i, tmp_path) for i in range(len(monitor["spec"]["endpoints"]))]
    for config in configs:
        assert config["tls_config"]["insecure_skip_verify"] is False
        assert config["authorization"]["type"] == "Bearer"
    prometheus = tmp_path / "prometheus.yml"
    prometheus.write_text(yaml.safe_dump({"scrape_configs": configs}))
    done = subprocess.run(
        [str(promtool), "check", "config", str(prometheus)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_scraper_objects_pass_server_side_validation(
    helm: Path, control_plane: ControlPlane, runnerpool_crd: Obj, namespace: str
) -> None:
    values = {
        "fullnameOverride": namespace,
        "metrics": {
            "certSecret": "metrics-tls",
            "serviceMonitor": {"enabled": True},
            "readers": [{"namespace": "monitoring", "name": "prometheus"}],
        },
    }
    rendered = template(helm, values, namespace=namespace)
    _server_side_dry_run(control_plane, [o for o in rendered if o["kind"] != "ServiceMonitor"])


def test_tenant_roles_aggregate_into_view_edit_admin(helm: Path) -> None:
    objects = template(helm, {"rbac": {"aggregateToDefaultRoles": True}})
    aggregated: dict[str, set[str]] = {}
    for role in (o for o in objects if o["kind"] == "ClusterRole"):
        for label, value in role["metadata"]["labels"].items():
            if label.startswith("rbac.authorization.k8s.io/aggregate-to-") and value == "true":
                verbs = {v for rule in role["rules"] for v in rule["verbs"]}
                aggregated.setdefault(label.rsplit("-", 1)[1], set()).update(verbs)
    assert aggregated["view"] == {"get", "list", "watch"}
    assert {"create", "update", "patch", "delete"} <= aggregated["edit"]
    assert aggregated["admin"] == aggregated["edit"]


def test_every_rendered_flag_is_an_operator_flag(helm: Path) -> None:
    values = {
        **LINTED_VALUES["everything"],
        "watchNamespaces": ["team-a"],
        "logLevel": "DEBUG",
        "githubApiUrl": "https://ghe.example.com/api/v3",
        "leaderElection": {"enabled": True, "leaseName": "pools"},
    }
    values["metrics"] = {**values["metrics"], "bindAddress": "127.0.0.1"}
    flags = {arg.split("=")[0] for arg in container(template(helm, values))["args"]}
    known = operator_help()
    unknown = {f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", known)}
    assert unknown <= AWAITED_FLAGS, f"{sorted(unknown - AWAITED_FLAGS)} are not runnerpool-operator flags"


# --- on the API server ----------------------------------------------------------------------


def test_everything_the_chart_renders_passes_server_side_validation(
    helm: Path, control_plane: ControlPlane, runnerpool_crd: Obj, namespace: str
) -> None:
    """All optional objects (but the ServiceMonitor and PrometheusRule, whose CRDs are not here),
    strictly validated."""
    values = {**LINTED_VALUES["everything"], "watchNamespaces": [namespace], "fullnameOverride": namespace}
    values["metrics"] = {**values["metrics"], "serviceMonitor": {"enabled": False}}
    values["prometheusRule"] = {"enabled": False}
    _server_side_dry_run(control_plane, template(helm, values, namespace=namespace))


def test_runner_namespaces_pass_server_side_validation(
    helm: Path, control_plane: ControlPlane, runnerpool_crd: Obj, namespace: str
) -> None:
    """Cluster mode with a runner namespace: the namespace role and its RoleBinding there."""
    values = {"runnerNamespaces": [namespace], "fullnameOverride": namespace}
    _server_side_dry_run(control_plane, template(helm, values, namespace=namespace))


def _server_side_dry_run(control_plane: ControlPlane, rendered: list[Obj]) -> None:
    objects = [o for o in rendered if o["kind"] != "CustomResourceDefinition"]
    kubectl = envtest_assets.ensure_binaries(("kubectl",))["kubectl"]
    done = subprocess.run(
        [str(kubectl), "apply", "--dry-run=server", "--validate=strict", "-f", "-"],
        input=yaml.safe_dump_all(objects),
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(objects), done.stdout


#: Everything the chart can create (but the CRD), for ``kubectl get KINDS -l``.
CHART_KINDS = (
    "clusterroles,clusterrolebindings,roles,rolebindings,serviceaccounts,deployments,services,"
    "poddisruptionbudgets,secrets,ingresses,leases,validatingadmissionpolicies,"
    "validatingadmissionpolicybindings"
)


def test_install_upgrade_uninstall_leaves_the_crd_and_the_pools(
    helm: Path,
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    runnerpool_crd: Obj,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The release lifecycle against the API server (no operator runs: no node here): install
    creates what ``helm template`` shows, upgrade changes it but keeps the Lease's holder (the
    operator's), uninstall removes all of it, Lease included, but the CRD and the RunnerPools,
    which a CRD in templates/ would have deleted with it."""
    kubectl = envtest_assets.ensure_binaries(("kubectl",))["kubectl"]
    env = {"KUBECONFIG": str(control_plane.kubeconfig)}
    env |= {f"HELM_{d}_HOME": str(tmp_path / d.lower()) for d in ("CACHE", "CONFIG", "DATA")}
    release = namespace  # unique per test; cluster-scoped names cannot collide with deploy/'s
    values = {"webhook": {"secret": {"create": True, "value": "0123456789abcdef"}}}

    def installed() -> set[tuple[str, str, str]]:
        done = subprocess.run(
            [
                str(kubectl),
                "get",
                CHART_KINDS,
                "-A",
                "-l",
                f"app.kubernetes.io/instance={release}",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return {identity(o) for o in json.loads(done.stdout)["items"]}

    # The hooks' ClusterRole has one fixed name per cluster: kubectl apply -k deploy/ made it
    # here first, and the release leaves that one alone instead of failing to take it over.
    install_operator_rbac(control_plane)
    hooks = ("ClusterRole", "", RUNNER_HOOKS_CLUSTER_ROLE)
    rbac_api = client.RbacAuthorizationV1Api(api_client)
    before = rbac_api.read_cluster_role(RUNNER_HOOKS_CLUSTER_ROLE).metadata.resource_version
    done = run_helm(helm, "install", release, str(CHART), "-n", namespace, values=values, env=env)
    assert done.returncode == 0, done.stderr
    rendered = run_helm(helm, "template", release, str(CHART), "-n", namespace, values=values)
    expected = {identity(o) for o in yaml.safe_load_all(rendered.stdout) if o} - {hooks}
    assert installed() == expected
    assert rbac_api.read_cluster_role(RUNNER_HOOKS_CLUSTER_ROLE).metadata.resource_version == before
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(
        "runnerpool.dev", "v1alpha1", namespace, "runnerpools", pool_manifest("kept", replicas=1)
    )

    # What an operator replica writes into the chart's empty Lease.
    leases = client.CoordinationV1Api(api_client)
    lease_name = f"{release}-runnerpool-operator"
    lease = leases.read_namespaced_lease(lease_name, namespace)
    lease.spec = client.V1LeaseSpec(holder_identity="operator-0_abc", lease_duration_seconds=15)
    leases.replace_namespaced_lease(lease_name, namespace, lease)

    done = run_helm(
        helm, "upgrade", release, str(CHART), "-n", namespace, values={**values, "replicaCount": 3}, env=env
    )
    assert done.returncode == 0, done.stderr
    apps = client.AppsV1Api(api_client)
    assert apps.read_namespaced_deployment(f"{release}-runnerpool-operator", namespace).spec.replicas == 3
    held = leases.read_namespaced_lease(lease_name, namespace).spec
    assert (held.holder_identity, held.lease_duration_seconds) == ("operator-0_abc", 15), "upgrade kept it"

    done = run_helm(helm, "uninstall", release, "-n", namespace, env=env)
    assert done.returncode == 0, done.stderr
    assert installed() == set()
    assert rbac_api.read_cluster_role(RUNNER_HOOKS_CLUSTER_ROLE).metadata.resource_version == before
    release_records = client.CoreV1Api(api_client).list_namespaced_secret(
        namespace, label_selector="owner=helm"
    )
    assert release_records.items == []
    extensions = client.ApiextensionsV1Api(api_client)
    assert (
        extensions.read_custom_resource_definition("runnerpools.runnerpool.dev").metadata.deletion_timestamp
        is None
    )
    assert custom.get_namespaced_custom_object("runnerpool.dev", "v1alpha1", namespace, "runnerpools", "kept")


# --- the test world's Helm install (tests/node/test_install.py) -----------------------------


def effective_flags(args: list[str]) -> dict[str, str]:
    """What the operator runs with: its flags take the last value given."""
    return {name: value for name, _, value in (arg.partition("=") for arg in args)}


def _node_target(tmp_path: Path) -> Target:
    """What the node suite installs into, with made-up addresses (nothing here connects)."""
    return Target(
        kubectl=envtest_assets.ensure_binaries(("kubectl",))["kubectl"],
        kubeconfig=tmp_path / "kubeconfig",
        operator_image="runnerpool-operator:test-abc",
        runner_image="runnerpool-runner:test-def",
        github_api_url="http://10.88.0.1:40000/api/v3",
        api_host="10.88.0.1",
        api_port=6443,
        toleration={"key": "node", "operator": "Exists", "effect": "NoSchedule"},
    )


def test_the_test_worlds_helm_values_run_the_operator_as_its_kustomize_overlay_does(tmp_path: Path) -> None:
    """Both installs of the node suite run the same operator: the same flags (last value wins),
    environment, images, pull policy and toleration, so the suite's Helm part tests the chart only."""
    target = _node_target(tmp_path)
    overlay = kustomize(run_time_overlay(target, tmp_path / "overlay"))
    chart = HelmInstall(target, tmp_path / "helm").render()
    for component in ("operator", "webhook-receiver"):
        sides = []
        for objects in (overlay, chart):
            pod = deployment(objects, component)["spec"]["template"]["spec"]
            operator = container(objects, component)
            sides.append(
                {
                    "flags": effective_flags(operator["args"]),
                    "env": operator["env"],
                    "image": (operator["image"], operator["imagePullPolicy"]),
                    "tolerations": pod["tolerations"],
                }
            )
        if component == "operator":
            assert sides[0]["flags"]["--demand-poll-interval"] == "3600", (
                "the overlay's own choices are compared too"
            )
        else:
            assert sides[0]["image"] == ("runnerpool-operator:test-abc", "Never")
        assert sides[1] == sides[0], component


# --- the webhook receiver apart (issue 30) ---------------------------------------------------


def test_network_policies_match_deploys_optional_ones(helm: Path) -> None:
    assert not [o for o in template(helm) if o["kind"] == "NetworkPolicy"], "off by default"
    objects = template(helm, {"networkPolicy": {"enabled": True}})
    report = parity_report(
        kustomize(DEPLOY / "optional" / "network-policies"),
        [o for o in objects if o["kind"] == "NetworkPolicy"],
    )
    assert not report, "\n".join(report)


def test_the_receivers_egress_is_the_api_server_and_metrics_whom_the_values_name(helm: Path) -> None:
    """The receiver (internet-facing) sends only to the API server's ports, narrowed to its
    addresses when given; metrics are open to the monitoring namespace, or the peers given."""
    scraper = [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}]
    values = {
        "networkPolicy": {
            "enabled": True,
            "metricsFrom": scraper,
            "apiServer": {"ports": [8443], "cidrs": ["10.96.0.1/32", "192.168.1.10/32"]},
        }
    }
    objects = template(helm, values)
    receiver = one(objects, "NetworkPolicy", f"{RELEASE}-webhook")
    assert receiver["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert receiver["spec"]["egress"] == [
        {
            "ports": [{"port": 8443, "protocol": "TCP"}],
            "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}, {"ipBlock": {"cidr": "192.168.1.10/32"}}],
        }
    ]
    for policy in (receiver, one(objects, "NetworkPolicy", RELEASE)):
        [metrics] = [
            r for r in policy["spec"]["ingress"] if {"port": "metrics", "protocol": "TCP"} in r["ports"]
        ]
        assert metrics["from"] == scraper
    assert refusal(helm, {"networkPolicy": {"apiServer": {"ports": []}}}), "no egress at all is no install"


def test_watch_namespaces_give_the_receiver_roles_there_only(helm: Path) -> None:
    """With watchNamespaces the receiver, like the operator, reads pools only where it may."""
    name = f"{RELEASE}-webhook"
    objects = template(helm, {"watchNamespaces": ["team-a", "team-b"], "metrics": {"secure": False}})
    assert not [o for o in objects if o["kind"].startswith("Cluster") and o["metadata"]["name"] == name]
    for ns in ("team-a", "team-b"):
        role = one(objects, "Role", name, ns)
        assert {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in role["rules"]} == {
            ("runnerpool.dev", "runnerpools"): ["get", "list", "watch"],
            ("runnerpool.dev", "runnerpools/status"): ["patch"],
        }
        assert one(objects, "RoleBinding", name, ns)["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}
        ]
    args = container(objects, "webhook-receiver")["args"]
    assert args[-3:] == ["--namespaced", "--namespace=team-a", "--namespace=team-b"]


def test_the_receiver_scales_by_replicas_and_keeps_one_through_drains(helm: Path) -> None:
    objects = template(helm, {"webhook": {"replicaCount": 4}})
    receiver = deployment(objects, "webhook-receiver")
    assert receiver["spec"]["replicas"] == 4
    assert one(objects, "PodDisruptionBudget", f"{RELEASE}-webhook")["spec"]["minAvailable"] == 1
    single = template(helm, {"webhook": {"replicaCount": 1}})
    assert not [o for o in single if identity(o) == ("PodDisruptionBudget", NAMESPACE, f"{RELEASE}-webhook")]


def test_a_helm_install_that_fails_is_still_uninstalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``helm install --wait`` that times out leaves a release whose operators run: the node
    suite's teardown must remove it. Once it did not, and those operators reconciled the next
    tests' pools beside the tests' own operator, each deleting the other's pods as outdated."""
    installer = HelmInstall(_node_target(tmp_path), tmp_path / "helm")
    helm_calls: list[str] = []

    def run(*args: str, with_values: bool = False) -> str:
        helm_calls.append(args[0])
        if args[0] == "install":
            raise InstallError("helm install failed: context deadline exceeded")
        return ""

    monkeypatch.setattr(installer, "run", run)
    monkeypatch.setattr(helm_install, "kubectl", lambda *args, **kwargs: "")
    with pytest.raises(InstallError):
        installer.install()
    installer.uninstall()
    assert helm_calls == ["install", "uninstall"]


def test_the_operators_binding_policy_names_the_releases_operator_account(helm: Path) -> None:
    """deploy/'s policy (the operator binds the hooks' role to its runner accounts only) names
    deploy/'s account; a release's operator has its own, in the release's namespace."""
    objects = template(helm, {"serviceAccount": {"name": "pools-operator"}}, namespace="ci-ops")
    policy = one(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-bindings")
    (condition,) = policy["spec"]["matchConditions"]
    assert (
        condition["expression"]
        == "request.userInfo.username == 'system:serviceaccount:ci-ops:pools-operator'"
    )
    deploys = yaml.safe_load((DEPLOY / "rbac" / "operator_binding_policy.yaml").read_text())["spec"]
    assert {**policy["spec"], "matchConditions": deploys["matchConditions"]} == deploys
    binding = one(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-bindings")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    accounts = {"create": False, "name": "pools-operator", "webhookName": "pools-hooks"}
    own_rbac = template(helm, {"rbac": {"create": False}, "serviceAccount": accounts})
    assert one(own_rbac, "ValidatingAdmissionPolicy", f"{RELEASE}-bindings"), "kept with your own RBAC"
    turned_off = template(helm, {"rbac": {"bindingPolicy": False}})
    assert not [o for o in turned_off if o["metadata"]["name"].endswith("-bindings")]


@pytest.mark.parametrize(
    ("values", "rendered"),
    [({"rbac": {"create": False}}, True), ({"webhook": {"statusPolicy": False}}, False)],
    ids=["own RBAC", "turned off"],
)
def test_the_receivers_demand_only_policy_stays_with_a_release_that_brings_its_own_rbac(
    helm: Path, values: dict[str, Any], rendered: bool
) -> None:
    """rbac.create=false dropped the policy with the roles: the internet-facing receiver's
    account could then rewrite any status field (conditions, counts, a scale set's jobs)."""
    names = {
        obj["metadata"]["name"] for obj in template(helm, values) if obj["kind"].startswith("Validating")
    }
    assert (f"{RELEASE}-webhook-demand-only" in names) is rendered


def test_the_receivers_demand_only_policy_names_the_releases_receiver_account(helm: Path) -> None:
    """deploy/'s policy names deploy/'s account; a release's receiver has an account of its own."""
    objects = template(helm, {"serviceAccount": {"webhookName": "hooks-receiver"}})
    policy = one(objects, "ValidatingAdmissionPolicy", f"{RELEASE}-webhook-demand-only")
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == receiver_policy.receiver_condition("hooks-receiver")
    binding = one(objects, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-webhook-demand-only")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert len(policy["spec"]["validations"]) >= 10, "every status field but demand"
