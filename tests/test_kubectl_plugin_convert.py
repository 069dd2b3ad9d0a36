"""``kubectl runnerpool convert``: ARC and meows runner definitions in, RunnerPools out.

Table tests per source (a realistic manifest in ``tests/data/convert``, the pool it must
become, the lines that say what did not carry over), then the command as a user runs it,
whose pools the real API server must accept.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from runnerpool import api
from runnerpool.plugin.convert.documents import convert_text
from runnerpool.plugin.main import run
from tests.pools import create_pool

DATA = Path(__file__).parent / "data" / "convert"

SUMMERWIND_POOL = """
apiVersion: runnerpool.dev/v1alpha1
kind: RunnerPool
metadata: {name: org-runners, namespace: actions-runner-system}
spec:
  organization: octo-org
  runnerGroup: linux-builders
  labels: [linux, x64]
  containerMode: dind
  workVolume: {emptyDir: {sizeLimit: 20Gi}}
  credentialSecretName: octo-org-app
  env: [{name: ACTIONS_STEP_DEBUG, value: "false"}]
  resources:
    limits: {cpu: "2", memory: 4Gi}
    requests: {cpu: 500m, memory: 1Gi}
  nodeSelector: {node-role/ci: "true"}
  tolerations: [{key: ci, operator: Exists, effect: NoSchedule}]
  autoscaling:
    minReplicas: 1
    maxReplicas: 20
    scaleDownDelay: 300s
    repositories: [hello-world, api]
  template:
    metadata: {labels: {team: platform}}
    spec:
      imagePullSecrets: [{name: registry-cred}]
      priorityClassName: ci-low
"""
SUMMERWIND_NOT_MAPPED = [
    "spec.template.spec.image",
    "spec.template.spec.dockerdWithinRunnerContainer",
    "spec.template.spec.env[RUNNER_FEATURE_FLAG_EPHEMERAL]",
    "spec.template.spec.dockerMTU",
    "spec.template.metadata.annotations[cluster-autoscaler.kubernetes.io/safe-to-evict]",
    "HorizontalRunnerAutoscaler/org-runners-autoscaler.spec.metrics[1]",
]

SCALE_SET_POOL = """
apiVersion: runnerpool.dev/v1alpha1
kind: RunnerPool
metadata: {name: k8s-runners}
spec:
  organization: octo-org
  githubApiUrl: https://ghe.example.com/api/v3
  credentialSecretName: arc-github-app
  runnerGroup: builders
  autoscaling: {minReplicas: 0, maxReplicas: 15}
  containerMode: kubernetes
  kubernetesMode:
    workVolumeClaim: {storageClassName: fast-ssd, accessModes: [ReadWriteOnce], storage: 10Gi}
  scaleSet: {name: k8s-runners}
  labels: [linux]
  githubServerTLS: {certificateFrom: {configMapKeyRef: {name: ghes-ca, key: ca.crt}}}
  proxy:
    https: {url: "http://proxy.example.com:3128", credentialSecretRef: proxy-login}
    noProxy: [.svc]
  nodeSelector: {kubernetes.io/arch: amd64}
  env: [{name: GOFLAGS, value: "-mod=mod"}]
  resources: {requests: {cpu: "1", memory: 2Gi}}
  template:
    metadata: {annotations: {example.com/team: platform}}
"""
SCALE_SET_NOT_MAPPED = [
    "template.spec.containers[runner].image",
    "template.spec.containers[runner].command",
    "template.spec.containers[runner].env[ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER]",
]

MEOWS_POOL = """
apiVersion: runnerpool.dev/v1alpha1
kind: RunnerPool
metadata: {name: repo-runners, namespace: meows-runner}
spec:
  repository: octo-org/hello-world
  credentialSecretName: meows-github-cred
  autoscaling: {minReplicas: 0, maxReplicas: 5, minIdle: 2}
  labels: [gpu]
  workVolume:
    ephemeral:
      volumeClaimTemplate:
        spec:
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 5Gi}}
  recreateDeadline: 12h
  env: [{name: HTTPS_PROXY, value: "http://squid.internal:3128"}]
  resources: {requests: {cpu: 500m}}
  tolerations: [{key: gpu, operator: Exists}]
  template:
    metadata: {labels: {app: ci}}
    spec:
      automountServiceAccountToken: false
      containers: [{name: runner, imagePullPolicy: IfNotPresent}]
"""
MEOWS_NOT_MAPPED = ["spec.template.runnerContainer.image", "spec.denyDisruption", "spec.setupCommand"]


def _paths(lines: list[str]) -> list[str]:
    """The field of each ``# not mapped: FIELD: advice`` line."""
    assert all(line.startswith("# not mapped: ") for line in lines), lines
    return [line.removeprefix("# not mapped: ").split(": ", 1)[0] for line in lines]


@pytest.mark.parametrize(
    ("source", "expected", "not_mapped"),
    [
        ("summerwind.yaml", SUMMERWIND_POOL, SUMMERWIND_NOT_MAPPED),
        ("scale-set-values.yaml", SCALE_SET_POOL, SCALE_SET_NOT_MAPPED),
        ("meows.yaml", MEOWS_POOL, MEOWS_NOT_MAPPED),
    ],
)
def test_each_source_becomes_the_pool_it_means_and_says_what_did_not_carry_over(
    source: str, expected: str, not_mapped: list[str]
) -> None:
    pools, skipped = convert_text((DATA / source).read_text())
    assert [p.manifest for p in pools] == [yaml.safe_load(expected)]
    assert skipped == []
    assert _paths([u.line() for u in pools[0].unmapped]) == not_mapped
    assert all(u.advice for u in pools[0].unmapped)


def _convert(*args: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["convert", *args], out=out, err=err, stdin=io.StringIO(stdin))
    return code, out.getvalue(), err.getvalue()


AUTOSCALING_RUNNER_SET = """
apiVersion: actions.github.com/v1alpha1
kind: AutoscalingRunnerSet
metadata: {name: repo-set, namespace: arc-runners}
spec:
  githubConfigUrl: https://github.com/octo-org/hello-world
  githubConfigSecret: repo-pat
  minRunners: 1
  maxRunners: 4
"""


def test_a_rendered_autoscaling_runner_set_maps_fully_and_exits_0() -> None:
    code, out, err = _convert("-f", "-", stdin=AUTOSCALING_RUNNER_SET)
    assert (code, err) == (0, "")
    assert yaml.safe_load(out)["spec"] == {
        "repository": "octo-org/hello-world",
        "credentialSecretName": "repo-pat",
        "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
        "scaleSet": {"name": "repo-set"},
    }


def test_kubectl_gets_list_of_a_runner_deployment_and_its_autoscaler_converts_as_one_pool() -> None:
    """``kubectl get runnerdeployment,hra -o yaml | kubectl runnerpool convert -f -``."""
    deployment, autoscaler = yaml.safe_load_all((DATA / "summerwind.yaml").read_text())
    listed = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [autoscaler, deployment]})
    code, out, _ = _convert("-f", "-", stdin=listed)
    assert code == 3
    assert yaml.safe_load(out) == yaml.safe_load(SUMMERWIND_POOL)


LONG_NAMED_DEPLOYMENT_WITH_ITS_OWN_DOCKER_SIDECAR = """
apiVersion: actions.summerwind.dev/v1alpha1
kind: RunnerDeployment
metadata: {name: example-org-linux-x64-large-runner-deployment}
spec:
  replicas: 3
  template:
    spec:
      repository: octo-org/hello-world
      containers:
        - name: docker
          resources: {limits: {memory: 8Gi}}
"""


def test_a_long_name_is_cut_and_arcs_docker_sidecar_is_named_not_copied() -> None:
    code, out, err = _convert("-f", "-", stdin=LONG_NAMED_DEPLOYMENT_WITH_ITS_OWN_DOCKER_SIDECAR)
    assert code == 3
    pool = yaml.safe_load(out)
    assert pool["metadata"] == {"name": "example-org-linux-x64-large-runner"}
    assert pool["spec"] == {"repository": "octo-org/hello-world", "containerMode": "dind", "replicas": 3}
    assert _paths(err.splitlines()) == ["metadata.name", "spec.template.spec.containers[docker]"]


KUBERNETES_MODE_WITH_ITS_OWN_SERVICE_ACCOUNT = """
githubConfigUrl: https://github.com/enterprises/octo-corp
githubConfigSecret: enterprise-pat
runnerScaleSetName: jobs-in-pods
maxRunners: 8
containerMode: {type: kubernetes-novolume}
template:
  spec:
    serviceAccountName: arc-runner
    volumes:
      - {name: work, emptyDir: {}}
"""


def test_kubernetes_mode_leaves_the_service_account_and_work_volume_to_the_operator() -> None:
    code, out, err = _convert("-f", "-", stdin=KUBERNETES_MODE_WITH_ITS_OWN_SERVICE_ACCOUNT)
    assert code == 3
    assert yaml.safe_load(out)["spec"] == {
        "enterprise": "octo-corp",
        "credentialSecretName": "enterprise-pat",
        "autoscaling": {"minReplicas": 0, "maxReplicas": 8},
        "containerMode": "kubernetes",
        "scaleSet": {"name": "jobs-in-pods"},
    }
    assert _paths(err.splitlines()) == ["template.spec.serviceAccountName", "template.spec.volumes[work]"]


HRA_WITHOUT_TARGET = """
apiVersion: actions.summerwind.dev/v1alpha1
kind: HorizontalRunnerAutoscaler
metadata: {name: lonely}
spec: {scaleTargetRef: {name: elsewhere}, maxReplicas: 3}
"""


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("spec: [unclosed", "the input is not YAML"),
        ("", "the input is empty"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no RunnerDeployment"),
        (HRA_WITHOUT_TARGET, "no RunnerDeployment"),
        ("githubConfigUrl: https://github.com/\n", "names no enterprise, organization or repository"),
        ("githubConfigSecret: arc-pat\nmaxRunners: 3\n", "no githubConfigUrl"),
        (
            "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerDeployment\n"
            "metadata: {name: odd}\nspec: {template: {spec: [organization]}}\n",
            "RunnerDeployment/odd: a field has an unexpected shape",
        ),
    ],
)
def test_input_that_makes_no_pool_exits_2_with_what_is_wrong(stdin: str, message: str) -> None:
    code, out, err = _convert("-f", "-", stdin=stdin)
    assert (code, out) == (2, "")
    assert err.startswith("error: ") and message in err


def test_a_missing_file_exits_2_naming_it(tmp_path: Path) -> None:
    code, _, err = _convert("-f", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert f"cannot read {tmp_path / 'nope.yaml'}" in err


def test_convert_as_users_run_it_prints_pools_the_api_server_accepts(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    """Every source at once, with a RunnerSet and a Secret beside them: pools on stdout (applied
    here to the real API server), the fields and objects left out on stderr, exit 3."""
    both = tmp_path / "arc-and-meows.yaml"
    runner_set = (
        "apiVersion: actions.summerwind.dev/v1alpha1\nkind: RunnerSet\nmetadata: {name: sts-runners}\n"
    )
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: controller-manager}\n"
    names = ("summerwind.yaml", "scale-set-values.yaml", "meows.yaml")
    sources = [(DATA / name).read_text() for name in names]
    both.write_text("\n---\n".join([*sources, runner_set, secret]))
    code, out, err = _convert("-f", str(both), "-n", namespace)
    assert code == 3
    pools = list(yaml.safe_load_all(out))
    assert [p["metadata"] for p in pools] == [
        {"name": name, "namespace": namespace} for name in ("org-runners", "k8s-runners", "repo-runners")
    ]
    for pool in pools:
        created = create_pool(api_client, namespace, pool)
        assert api.RunnerPool.model_validate(created).spec == api.RunnerPool.model_validate(pool).spec
    lines = err.splitlines()
    assert "# RunnerDeployment/org-runners:" in lines
    dockerd = "# not mapped: spec.template.spec.dockerdWithinRunnerContainer: "
    assert any(line.startswith(dockerd) for line in lines)
    assert lines[-2:] == [
        "# not mapped: RunnerSet/sts-runners: not converted (RunnerDeployments are): move its "
        "runner fields into a RunnerPool by hand, as docs/migrating.md maps a RunnerDeployment's",
        "# not mapped: Secret/controller-manager: not a runner definition; left out",
    ]


def test_a_scale_set_name_github_would_refuse_stays_a_label_of_a_label_pool() -> None:
    values = "githubConfigUrl: https://github.com/octo-org\ngithubConfigSecret: pat\n"
    code, out, err = _convert("-f", "-", stdin=values + "runnerScaleSetName: _private\nmaxRunners: 2\n")
    assert code == 3
    spec = yaml.safe_load(out)["spec"]
    assert "scaleSet" not in spec and spec["labels"] == ["_private"]
    assert _paths(err.splitlines()) == ["runnerScaleSetName"]
