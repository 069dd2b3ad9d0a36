"""A job cannot steal its pool's registration: what it can reach registers no runner.

The job's steps are the steal probe (testworld/runner_image/jobs/steal-probe.sh): from the
runner container, as the runner user, it reads every file under /, every process's environment
and command line it may read, and the Secrets the Kubernetes API lets the pod's ServiceAccount
token list, and tries every credential-like string against the fake GitHub as a registration
token, as an API credential and as a JIT runner config.  The pool's pods run with the
namespace's ``default`` ServiceAccount, so the probe has a token to try the API with.

The control test gives the probe the old pod shape (the token mounted where jobs run) and
expects it to say STOLEN: a probe that cannot find a token that is there proves nothing.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from kubernetes import client

from runnerpool import naming
from runnerpool.pods import registration
from tests.e2e.runners import REPO, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, registered_pods
from tests.pools import create_pool
from testworld.envtest.controlplane import ControlPlane
from testworld.fakegithub import FakeGitHub
from testworld.node.images import JOBS_DIR
from testworld.simulator import OperatorProcess

#: Reading the whole image and trying each string takes a while on a shared 2-core machine.
PROBE_TIMEOUT = 240.0


def probe_command(fake: FakeGitHub, control_plane: ControlPlane) -> str:
    web = fake.url.removesuffix(fake.api_prefix)
    kube_api = f"https://{control_plane.pod_address}:{control_plane.port}"
    return f"bash {JOBS_DIR}/steal-probe.sh {web}/{REPO} {kube_api}"


def default_service_account(api_client: client.ApiClient, namespace: str) -> None:
    """The controller manager makes it shortly after the namespace; pods naming it wait for it."""
    core = client.CoreV1Api(api_client)
    wait_for(
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(namespace).items
        ),
        START_TIMEOUT,
        message=f"the default ServiceAccount of {namespace}",
    )


@pytest.mark.parametrize("registration", ["token", "jit"])
def test_a_job_reading_everything_it_can_reach_registers_no_runner(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    control_plane: ControlPlane,
    registration: str,
) -> None:
    default_service_account(api_client, namespace)
    create_pool(
        api_client,
        namespace,
        node_pool("steal", replicas=1, serviceAccountName="default", registration=registration),
    )
    core = client.CoreV1Api(api_client)
    [pod] = registered_pods(core, fake_github, namespace, "steal", 1)

    label = naming.pool_runner_label(namespace, "steal")
    job_id = fake_github.queue_job(REPO, [label], 0.0, script=probe_command(fake_github, control_plane))

    done = wait_for(
        lambda: (j := fake_github.job(job_id))["status"] == "completed" and j,
        PROBE_TIMEOUT,
        message=f"the probe job {job_id} to complete",
    )
    summary = fake_github.summary(job_id)
    assert (done["conclusion"], done["runner_name"]) == ("success", pod), summary
    assert "; 0 registered a runner" in summary
    tried = int(summary.split("tried ", 1)[1].split(" ", 1)[0])
    assert tried > 0, summary
    # It had a token for the API and tried it: the namespace's Secrets are not the job's.
    assert f"GET /api/v1/namespaces/{namespace}/secrets: HTTP 403" in summary
    # No runner of the pool's beyond its pods' (the probe's pod went with its job).
    names = {r["name"] for r in pool_runners(fake_github, REPO, namespace, "steal")}
    assert names <= {p.metadata.name for p in core.list_namespaced_pod(namespace).items}


def test_the_probe_steals_a_token_mounted_where_jobs_run(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    control_plane: ControlPlane,
) -> None:
    """The control: the operator's pod as it was before the register init container."""
    create_pool(api_client, namespace, node_pool("control", replicas=1))
    core = client.CoreV1Api(api_client)
    [pod] = registered_pods(core, fake_github, namespace, "control", 1)

    spec: dict[str, Any] = copy.deepcopy(
        api_client.sanitize_for_serialization(core.read_namespaced_pod(pod, namespace).spec)
    )
    spec["restartPolicy"] = "Never"
    [register] = spec.pop("initContainers")
    [runner] = spec["containers"]
    token_mount = next(m for m in register["volumeMounts"] if m["name"] == registration.TOKEN_VOLUME)
    runner["volumeMounts"].append(token_mount)
    runner["command"] = ["bash", "-c", probe_command(fake_github, control_plane)]
    runner.pop("args", None)
    name = f"old-shape-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})

    def finished() -> str | None:
        phase = core.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, PROBE_TIMEOUT, message=f"probe pod {name} to finish")
    log = core.read_namespaced_pod_log(name, namespace, container=naming.RUNNER_CONTAINER)
    assert phase == "Failed", log
    # From the mount (the kubelet's Secret volume keeps the file in a timestamped folder).
    assert f"probe: STOLEN: a registration token, from {token_mount['mountPath']}/" in log
