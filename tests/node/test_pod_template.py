"""Runner pods under Pod Security ``restricted``, and a pool's own pod template, on the real node.

A namespace labelled ``pod-security.kubernetes.io/enforce: restricted`` admits the operator's
default runner pod (non-root uid 1001, seccomp RuntimeDefault with the node's runc, no
capabilities, no privilege escalation) and its runner runs a job to ``success``; so does a pool
whose ``spec.template`` adds labels, an annotation, env and a sidecar that keeps within
``restricted`` itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from runnerpool import naming
from tests.e2e.runners import REPO
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import registered_pods, wait_done
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.node.images import RUNNER_UID
from testworld.node.node import Node
from testworld.simulator import OperatorProcess

ENFORCE = "pod-security.kubernetes.io/enforce"
JOB_SECONDS = 2.0


def _enforce_restricted(core: client.CoreV1Api, namespace: str, image: str) -> None:
    """Label the namespace, and wait until the API server refuses a pod that runs as root there."""
    core.patch_namespace(namespace, {"metadata": {"labels": {ENFORCE: "restricted"}}})
    root = {"metadata": {"name": "root"}, "spec": {"containers": [{"name": "c", "image": image}]}}

    def refused() -> bool:
        try:
            core.create_namespaced_pod(namespace, root, dry_run="All")
        except ApiException as err:
            assert err.status == 403, err.body
            return 'violates PodSecurity "restricted' in json.loads(err.body or "{}")["message"]
        return False

    wait_for(refused, message=f"namespace {namespace} to enforce restricted")


def _run_one_job(core: client.CoreV1Api, fake: FakeGitHub, namespace: str, pool: str) -> tuple[Any, Any]:
    """The pool's one pod registers and runs a queued job: the pod (as it ran) and the job's end."""
    [name] = registered_pods(core, fake, namespace, pool, 1)
    pod = core.read_namespaced_pod(name, namespace)  # before the job: then the pod is replaced
    job = fake.queue_job(REPO, [naming.pool_runner_label(namespace, pool)], JOB_SECONDS)
    return pod, wait_done(fake, [job])[job]


@pytest.fixture
def restricted(api_client: client.ApiClient, namespace: str, operator: OperatorProcess, node: Node) -> str:
    _enforce_restricted(client.CoreV1Api(api_client), namespace, node.runner_image.reference)
    return namespace


def test_a_pool_in_a_namespace_that_enforces_restricted_runs_a_job(
    api_client: client.ApiClient, restricted: str, fake_github: FakeGitHub
) -> None:
    core = client.CoreV1Api(api_client)
    create_pool(api_client, restricted, node_pool("secure"))

    pod, job = _run_one_job(core, fake_github, restricted, "secure")

    assert (job["conclusion"], job["runner_name"]) == ("success", pod.metadata.name)
    context = pod.spec.security_context
    assert (context.run_as_user, context.run_as_non_root, context.seccomp_profile.type) == (
        RUNNER_UID,
        True,
        "RuntimeDefault",
    )


def test_a_pool_with_a_template_and_a_sidecar_runs_a_job_under_restricted(
    api_client: client.ApiClient, restricted: str, fake_github: FakeGitHub, node: Node
) -> None:
    image = node.runner_image.reference
    # A native sidecar (an init container that keeps running): the pod still ends with its runner.
    sidecar = {
        "name": "helper",
        "image": image,
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "command": [
            "bash",
            "-c",
            "touch /runner/_work/.helper; trap 'exit 0' TERM; while :; do sleep 1; done",
        ],
        "volumeMounts": [{"name": naming.WORK_VOLUME, "mountPath": naming.WORK_DIR}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    template = {
        "metadata": {"labels": {"team": "ci"}, "annotations": {"example.com/owner": "platform"}},
        "spec": {
            "initContainers": [sidecar],
            "containers": [
                {"name": naming.RUNNER_CONTAINER, "env": [{"name": "FROM_TEMPLATE", "value": "1"}]}
            ],
        },
    }
    core = client.CoreV1Api(api_client)
    create_pool(api_client, restricted, node_pool("shaped", template=template))

    pod, job = _run_one_job(core, fake_github, restricted, "shaped")

    assert (job["conclusion"], job["runner_name"]) == ("success", pod.metadata.name)
    assert pod.metadata.labels["team"] == "ci" and pod.metadata.annotations["example.com/owner"] == "platform"
    [helper] = pod.status.init_container_statuses
    assert helper.name == "helper" and helper.started
    runner = next(c for c in pod.spec.containers if c.name == naming.RUNNER_CONTAINER)
    assert {"name": "FROM_TEMPLATE", "value": "1"} in [{"name": e.name, "value": e.value} for e in runner.env]
