"""``spec.containerMode: dind`` on the real node: a job's steps run ``docker`` against the pod's daemon.

The daemon is the dind test image (Debian's docker.io 20.10, testworld/node/dind_images.py),
the runner the runner test image plus Debian's docker CLI; the job's steps (a job script,
testworld/runner_image/jobs/docker-*.sh, that the run.sh stand-in runs as uid 1001 and that
works in a directory under the work volume, which the daemon mounts too) load an image from a
local archive (no registry), run it with the workspace bind-mounted and build an image from
the workspace.  The daemon has no network (the sealed node has no route
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
from testworld.node.images import JOBS_DIR, Image
from testworld.node.node import Node
from testworld.simulator import OperatorProcess

#: The job scripts (testworld/runner_image/jobs/, in the runner test image at JOBS_DIR) take the
#: image archive to load and the image in it.
_IMAGE_ARGS = f"{dind_images.BUSYBOX_ARCHIVE} {dind_images.BUSYBOX_IMAGE}"
#: What a user's job does with Docker: the daemon's storage driver (reported), an image from an
#: archive, a container that reads and writes the workspace, an image built from it.
DOCKER_BUILD = f"bash {JOBS_DIR}/docker-build.sh {_IMAGE_ARGS}"
#: A job still running when its pod is deleted: its last step needs the daemon after SIGTERM.
LAST_STEP_AFTER_SIGTERM = f"bash {JOBS_DIR}/docker-after-sigterm.sh {_IMAGE_ARGS}"
JOB_TIMEOUT = 180.0
#: A finalizer of the test's own: holds an ended pod for its logs (the operator deletes it).
KEEP = "test.runnerpool.dev/keep-for-logs"


@pytest.fixture(scope="module")
def dind_test_images(node: Node) -> tuple[Image, Image]:
    """(daemon, runner) images, on the node."""
    daemon, runner = dind_images.dind_image(), dind_images.runner_dind_image()
    for image in (daemon, runner):
        node.import_image(image)
    return daemon, runner


def dind_pool(name: str, images: tuple[Image, Image], **spec: Any) -> dict[str, Any]:
    daemon, runner = images
    return node_pool(
        name, containerMode="dind", dindImage=daemon.reference, runnerImage=runner.reference, **spec
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
    create_pool(api_client, namespace, dind_pool("dind", dind_test_images))
    [pod] = registered_pods(core, fake_github, namespace, "dind", 1)
    # The daemon is the first init container: it warms up while the register container runs.
    spec = core.read_namespaced_pod(pod, namespace).spec
    assert [c.name for c in spec.init_containers] == [dind.DIND_CONTAINER, naming.REGISTER_CONTAINER]
    before = runner_log(core, namespace, pod)
    assert f"waiting for the Docker daemon at {dind.DOCKER_HOST}" in before
    assert before.index("the Docker daemon answers") < before.index("starting the runner listener")

    label = naming.pool_runner_label(namespace, "dind")
    # The operator deletes the pod as soon as it has ended; the test's finalizer keeps it (and
    # its logs) readable until the test has read them, however fast the operator is.
    core.patch_namespaced_pod(
        pod, namespace, [{"op": "add", "path": "/metadata/finalizers", "value": [KEEP]}]
    )
    job_id = fake_github.queue_job(REPO, [label], 0, script=DOCKER_BUILD)
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

    try:
        wait_for(ended, JOB_TIMEOUT, 0.2, f"pod {pod} to end after its job")
    finally:
        core.patch_namespaced_pod(pod, namespace, [{"op": "remove", "path": "/metadata/finalizers"}])
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


def test_a_busy_runners_last_step_still_has_the_daemon_when_its_pod_is_deleted(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    dind_test_images: tuple[Image, Image],
) -> None:
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, dind_pool("busy", dind_test_images, busyGracePeriod="2m"))
    [pod] = registered_pods(core, fake_github, namespace, "busy", 1)
    label = naming.pool_runner_label(namespace, "busy")
    job_id = fake_github.queue_job(REPO, [label], 0, script=LAST_STEP_AFTER_SIGTERM)
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
