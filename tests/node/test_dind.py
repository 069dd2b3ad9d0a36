"""``spec.containerMode: dind`` on the real node: a job's steps run ``docker`` against the pod's daemon.

The daemon is the dind test image (Debian's docker.io 20.10, testworld/node/dind_images.py),
the runner the runner test image plus Debian's docker CLI; the job's steps
(``RUNNER_STANDIN_STEPS``, run by the run.sh stand-in in the job's workspace, as uid 1001)
load an image from a local archive (no registry), run it with the workspace bind-mounted and
build an image from the workspace.  The daemon has no network (the sealed node has no route
out), so every container runs with ``--network none``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client, watch

from runnerpool import naming
from runnerpool.pods import dind
from tests.e2e.runners import REPO
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, registered_pods
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.node import dind_images
from testworld.node.images import Image
from testworld.node.node import Node
from testworld.simulator import OperatorProcess

LOAD = f"docker load -i {dind_images.BUSYBOX_ARCHIVE}"
RUN = "docker run --rm --network none"
#: What a user's job does with Docker: the daemon's storage driver (reported), an image from an
#: archive, a container that reads and writes the workspace, an image built from it.
DOCKER_STEPS = f"""
docker info --format 'storage driver: {{{{.Driver}}}}'
{LOAD}
echo "written by the runner" > from-runner.txt
{RUN} -v "$PWD:/workspace" {dind_images.BUSYBOX_IMAGE} \\
    sh -c 'cat /workspace/from-runner.txt && echo "written in a container" > /workspace/from-container.txt'
cat from-container.txt
printf 'FROM %s\\nCOPY from-runner.txt /baked.txt\\nRUN echo "made by RUN" > /run.txt\\n' \\
    {dind_images.BUSYBOX_IMAGE} > Dockerfile
DOCKER_BUILDKIT=0 docker build --network none -t testworld/built:1 .
{RUN} testworld/built:1 cat /baked.txt /run.txt
"""
JOB_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def dind_test_images(node: Node) -> tuple[Image, Image]:
    """(daemon, runner) images, on the node."""
    daemon, runner = dind_images.dind_image(), dind_images.runner_dind_image()
    for image in (daemon, runner):
        node.import_image(image)
    return daemon, runner


def dind_pool(name: str, images: tuple[Image, Image], steps: str, **spec: Any) -> dict[str, Any]:
    daemon, runner = images
    return node_pool(
        name,
        containerMode="dind",
        dindImage=daemon.reference,
        runnerImage=runner.reference,
        env=[{"name": "RUNNER_STANDIN_STEPS", "value": steps}],
        **spec,
    )


def runner_log(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    text: str = core.read_namespaced_pod_log(pod, namespace, container=naming.RUNNER_CONTAINER)
    return text


def finished(statuses: list[client.V1ContainerStatus] | None, name: str) -> datetime | None:
    for status in statuses or []:
        if status.name == name and status.state.terminated is not None:
            stamp: datetime = status.state.terminated.finished_at
            return stamp
    return None


def watch_pod(
    core: client.CoreV1Api, namespace: str, name: str, since: str, timeout: int
) -> Iterator[client.V1Pod]:
    """Pod ``name`` as it changes after resource version ``since``, until it is gone."""
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod,
        namespace,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=timeout,
    ):
        yield event["object"]
        if event["type"] == "DELETED":
            stream.stop()
            return


def test_a_job_runs_and_builds_containers_on_the_pods_docker_daemon(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    dind_test_images: tuple[Image, Image],
) -> None:
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, dind_pool("dind", dind_test_images, DOCKER_STEPS))
    [pod] = registered_pods(core, fake_github, namespace, "dind", 1)
    before = runner_log(core, namespace, pod)
    assert f"waiting for the Docker daemon at {dind.DOCKER_HOST}" in before
    assert before.index("the Docker daemon answers") < before.index("registering runner")

    job_id = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "dind")], 0)
    # The pod as it ends, read at once: the operator soon replaces it.
    seen: dict[str, Any] = {}

    def ended() -> bool:
        status = core.read_namespaced_pod(pod, namespace).status
        if status.phase != "Succeeded":
            return False
        seen.update(
            log=runner_log(core, namespace, pod),
            runner=finished(status.container_statuses, naming.RUNNER_CONTAINER),
            daemon=finished(status.init_container_statuses, dind.DIND_CONTAINER),
        )
        return True

    wait_for(ended, JOB_TIMEOUT, 0.2, f"pod {pod} to end after its job")
    job = fake_github.job(job_id)
    log = seen["log"]
    assert (job["status"], job["conclusion"]) == ("completed", "success"), log
    for line in (
        "written by the runner",
        "written in a container",
        "made by RUN",
        f"Loaded image: {dind_images.BUSYBOX_IMAGE}",
        "Successfully tagged testworld/built:1",
    ):
        assert line in log, log
    assert "storage driver: overlay2" in log, log
    # The native sidecar stopped only after the runner had ended.
    assert seen["runner"] is not None and seen["daemon"] is not None, seen
    assert seen["daemon"] >= seen["runner"], seen


#: A job still running when its pod is deleted: its last step needs the daemon after SIGTERM.
LAST_STEP_AFTER_SIGTERM = f"""
{LOAD}
echo "first step done"
sleep 6
{RUN} {dind_images.BUSYBOX_IMAGE} echo "last step ran"
"""


def test_a_busy_runners_last_step_still_has_the_daemon_when_its_pod_is_deleted(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    dind_test_images: tuple[Image, Image],
) -> None:
    core = client.CoreV1Api(api_client)
    pool = dind_pool("busy", dind_test_images, LAST_STEP_AFTER_SIGTERM, busyGracePeriod="2m")
    create_pool(api_client, namespace, pool)
    [pod] = registered_pods(core, fake_github, namespace, "busy", 1)
    job_id = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "busy")], 0)
    wait_for(
        lambda: "first step done" in runner_log(core, namespace, pod),
        JOB_TIMEOUT,
        0.5,
        "the job's first step",
    )

    since = core.list_namespaced_pod(
        namespace, field_selector=f"metadata.name={pod}"
    ).metadata.resource_version
    core.delete_namespaced_pod(pod, namespace)
    runner_end = daemon_end = None
    for state in watch_pod(core, namespace, pod, since, int(JOB_TIMEOUT)):
        runner_end = finished(state.status.container_statuses, naming.RUNNER_CONTAINER) or runner_end
        daemon_end = finished(state.status.init_container_statuses, dind.DIND_CONTAINER) or daemon_end

    job = fake_github.job(job_id)
    assert (job["status"], job["conclusion"]) == ("completed", "success"), job
    assert runner_end is not None and daemon_end is not None
    assert daemon_end >= runner_end
    wait_for(
        lambda: registered_pods(core, fake_github, namespace, "busy", 1) != [pod],
        START_TIMEOUT,
        message="a fresh pod to replace the deleted one",
    )
