"""``spec.template`` and the default runner pod on a real API server.

The CRD's rules refuse a template that sets the operator's own fields, naming the field; a
template of every field users ask for is stored as given and makes a pod the API server
accepts; ``kubectl explain`` describes it; and the default runner pod passes the API server's
own Pod Security admission in a namespace that enforces ``restricted``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runnerpool import api, naming
from runnerpool.pods import template
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from tests.test_pod_template import FULL_TEMPLATE
from testworld.envtest import assets
from testworld.envtest.controlplane import ControlPlane

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

API_URL = "https://api.github.com"
ENFORCE = "pod-security.kubernetes.io/enforce"


def _runner(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": naming.RUNNER_CONTAINER, **fields}]}}


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("pod-name", {"metadata": {"name": "x"}}, "spec.template.metadata.name is the operator's"),
    ("generate-name", {"metadata": {"generateName": "x-"}}, "spec.template.metadata.generateName is the"),
    ("namespace", {"metadata": {"namespace": "x"}}, "spec.template.metadata.namespace is the operator's"),
    (
        "owner",
        {"metadata": {"ownerReferences": [{"kind": "Deployment", "name": "x"}]}},
        "spec.template.metadata.ownerReferences is the operator's: the pool owns its pods",
    ),
    (
        "pool-label",
        {"metadata": {"labels": {naming.POOL_LABEL: "other"}}},
        "spec.template.metadata.labels must not set app.kubernetes.io/managed-by or runnerpool.dev/*",
    ),
    (
        "managed-by-label",
        {"metadata": {"labels": {naming.MANAGED_BY_LABEL: "helm"}}},
        "the operator selects and tracks its pods by them",
    ),
    (
        "hash-label",
        {"metadata": {"labels": {naming.TEMPLATE_HASH_LABEL: "abc"}}},
        "spec.template.metadata.labels must not set",
    ),
    (
        "busy-annotation",
        {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}},
        "spec.template.metadata.annotations must not set runnerpool.dev/* keys or "
        "cluster-autoscaler.kubernetes.io/safe-to-evict or karpenter.sh/do-not-disrupt",
    ),
    (
        "restart-policy",
        {"spec": {"restartPolicy": "Always"}},
        "spec.template.spec.restartPolicy is the operator's",
    ),
    (
        "grace",
        {"spec": {"terminationGracePeriodSeconds": 30}},
        "set spec.terminationGracePeriodSeconds instead, which must be longer than spec.busyGracePeriod",
    ),
    (
        "token-volume",
        {"spec": {"volumes": [{"name": naming.TOKEN_VOLUME, "emptyDir": {}}]}},
        "spec.template.spec.volumes must not be named runner-token or runner-jitconfig or runner-config "
        "or work",
    ),
    (
        "config-volume",
        {"spec": {"volumes": [{"name": naming.CONFIG_VOLUME, "emptyDir": {}}]}},
        "runner-token or runner-jitconfig or runner-config or work",
    ),
    (
        "register-init-container",
        {"spec": {"initContainers": [{"name": naming.REGISTER_CONTAINER, "image": "x"}]}},
        "spec.template.spec.initContainers[register] is the operator's",
    ),
    (
        "work-volume",
        {"spec": {"volumes": [{"name": naming.WORK_VOLUME, "emptyDir": {}}]}},
        "spec.workVolume changes the work volume",
    ),
    (
        "runner-labels-env",
        _runner(env=[{"name": "RUNNER_LABELS", "value": "gpu"}]),
        "spec.template.spec.containers[runner].env must not set RUNNER_* variables (but "
        "RUNNER_DOCKER_WAIT_SECONDS, RUNNER_ALLOW_RUNASROOT, RUNNER_TOOL_CACHE) or POD_NAME, POD_NAMESPACE, "
        "GITHUB_URL",
    ),
    ("pod-name-env", _runner(env=[{"name": "POD_NAME", "value": "x"}]), "containers[runner].env must not"),
    (
        "github-url-env",
        _runner(env=[{"name": "GITHUB_URL", "value": "x"}]),
        "containers[runner].env must not",
    ),
    (
        "work-mount",
        _runner(volumeMounts=[{"name": "scratch", "mountPath": naming.WORK_DIR}]),
        "spec.template.spec.containers[runner].volumeMounts must not use mountPath /runner-token or "
        "/runner-jitconfig or /runner-config or /runner/_work",
    ),
    (
        "too-many-containers",
        {"spec": {"containers": [{"name": f"c{i}"} for i in range(api.MAX_TEMPLATE_CONTAINERS + 1)]}},
        f"must have at most {api.MAX_TEMPLATE_CONTAINERS} items",
    ),
    ("same-container-twice", {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, "Duplicate value"),
    ("container-without-name", {"spec": {"containers": [{"image": "x"}]}}, "name: Required value"),
]


@pytest.mark.parametrize(
    ("over", "fragment"), [pytest.param(over, fragment, id=case) for case, over, fragment in REFUSED]
)
def test_a_template_that_sets_the_operators_own_fields_is_refused_saying_which(
    api_client: client.ApiClient, namespace: str, over: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ApiException) as caught:
        create_pool(api_client, namespace, pool_manifest("bad", template=over))
    assert caught.value.status == 422, caught.value.body
    assert fragment in json.loads(caught.value.body or "{}")["message"]
    # The models refuse it too, so Python never builds a pool the API server would refuse.
    with pytest.raises(ValueError, match=r".+"):
        api.RunnerPoolSpec.model_validate({"organization": "octo-org", "template": over})


def test_a_full_template_is_stored_as_given_and_makes_a_valid_pod(
    api_client: client.ApiClient, namespace: str
) -> None:
    sidecar_env = {"name": "RUNNER_X", "value": "a sidecar's env is its own"}
    given = copy.deepcopy(FULL_TEMPLATE)
    given["spec"]["containers"][1]["env"] = [sidecar_env]
    created = create_pool(api_client, namespace, pool_manifest("full", org="octo-org", template=given))
    assert created["spec"]["template"] == given, "nothing pruned"
    pool = api.RunnerPool.model_validate(created)

    body = template.runner_pod(pool, api.DEFAULT_RUNNER_IMAGE, API_URL)
    # Cluster objects the names point at (a PriorityClass, a RuntimeClass) are the cluster's.
    body["spec"].pop("priorityClassName")
    body["spec"].pop("runtimeClassName")
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "ci-runner"}})
    made = core.create_namespaced_pod(namespace, body, dry_run="All", field_validation="Strict")
    assert [c.name for c in made.spec.containers] == [naming.RUNNER_CONTAINER, "proxy"]
    assert made.spec.image_pull_secrets[0].name == "registry"


# -- kubectl explain ----------------------------------------------------------------------------------


def _explain(control_plane: ControlPlane, field: str) -> str:
    kubectl = assets.ensure_binaries()["kubectl"]
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    done = subprocess.run(
        [str(kubectl), "explain", field], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    return done.stdout if done.returncode == 0 else ""


def test_kubectl_explain_describes_the_template(control_plane: ControlPlane) -> None:
    """What a user reads before writing one (the API server publishes the CRD's schema a moment late)."""
    top = wait_for(
        lambda: _explain(control_plane, "runnerpools.spec.template"),
        30,
        0.5,
        "kubectl explain runnerpools.spec.template",
    )
    assert "A pod template (labels, annotations and any pod spec field) merged onto" in " ".join(top.split())
    spec = " ".join(_explain(control_plane, "runnerpools.spec.template.spec").split())
    assert "A core/v1 PodSpec merged onto the operator's runner pod" in spec
    assert "restartPolicy" in spec and "containers" in spec
    runner = " ".join(_explain(control_plane, "runnerpools.spec.template.spec.containers.name").split())
    assert "'runner' merges into the operator's runner container" in runner


# -- Pod Security restricted ----------------------------------------------------------------------------


@pytest.fixture
def restricted(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """The test namespace, enforcing Pod Security ``restricted`` (checked with a pod it refuses)."""
    core = client.CoreV1Api(api_client)
    core.patch_namespace(namespace, {"metadata": {"labels": {ENFORCE: "restricted"}}})
    root = {"metadata": {"name": "root"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}
    wait_for(lambda: _refusal(core, namespace, root), message="the namespace to enforce restricted")
    yield namespace


def _refusal(core: client.CoreV1Api, namespace: str, body: dict[str, Any]) -> str:
    """The API server's refusal of ``body`` (a dry run), or "" when it admits it."""
    try:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as err:
        assert err.status == 403, err.body
        return cast(str, json.loads(err.body or "{}")["message"])
    return ""


def _pool(api_client: client.ApiClient, namespace: str, **spec: Any) -> api.RunnerPool:
    created = create_pool(api_client, namespace, pool_manifest("secure", org="octo-org", **spec))
    return api.RunnerPool.model_validate(created)


def test_the_default_runner_pod_passes_pod_security_restricted(
    api_client: client.ApiClient, restricted: str
) -> None:
    core = client.CoreV1Api(api_client)
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    pool = _pool(api_client, restricted, workVolume={"ephemeral": {"volumeClaimTemplate": {"spec": claim}}})
    assert _refusal(core, restricted, template.runner_pod(pool, api.DEFAULT_RUNNER_IMAGE, API_URL)) == ""


def test_a_template_that_asks_for_more_is_refused_by_pod_security_restricted(
    api_client: client.ApiClient, restricted: str
) -> None:
    """The check is real: a privileged sidecar (a Docker daemon, say) needs another namespace."""
    docker = {"name": "docker", "image": "docker:dind", "securityContext": {"privileged": True}}
    pool = _pool(api_client, restricted, template={"spec": {"containers": [docker]}})
    refused = _refusal(
        core := client.CoreV1Api(api_client), restricted, template.runner_pod(pool, "x:1", API_URL)
    )
    assert (
        'violates PodSecurity "restricted:latest"' in refused and 'privileged (container "docker"' in refused
    )
    assert core.list_namespaced_pod(restricted).items == []
