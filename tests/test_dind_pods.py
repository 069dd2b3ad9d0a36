"""``spec.containerMode: dind``: the runner pod a user gets, as the kubelet will read it.

The pod the operator would create (``runnerpool.pods.template.runner_pod``), and that the
API server takes it. That the daemon then runs, shares the workspace and outlives the runner
is tests/node/test_dind.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from runnerpool import api, naming
from runnerpool.pods import dind, security, template

API = "https://api.github.com"


def pool(**spec: Any) -> api.RunnerPool:
    return api.RunnerPool.model_validate(
        {"metadata": {"name": "ci", "namespace": "team", "uid": "u"}, "spec": {"organization": "o", **spec}}
    )


def pod_of(**spec: Any) -> dict[str, Any]:
    return template.runner_pod(pool(**spec), "runner:1", API)["spec"]


def runner_of(pod: dict[str, Any]) -> dict[str, Any]:
    [runner] = [c for c in pod["containers"] if c["name"] == naming.RUNNER_CONTAINER]
    return runner


def env_of(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container["env"]}


def mounts_of(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}


def daemon_of(pod: dict[str, Any]) -> dict[str, Any]:
    [daemon] = [c for c in pod["initContainers"] if c["name"] == dind.DIND_CONTAINER]
    return daemon


def init_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["initContainers"]]


def test_without_a_container_mode_the_pod_has_no_daemon() -> None:
    pod = pod_of()
    assert init_names(pod) == [naming.REGISTER_CONTAINER]
    assert "DOCKER_HOST" not in env_of(runner_of(pod))
    assert [c["name"] for c in pod["containers"]] == [naming.RUNNER_CONTAINER]


def test_dind_runs_a_privileged_native_sidecar_that_starts_first_and_stops_last() -> None:
    pod = pod_of(containerMode="dind")
    # First, before the register container: dockerd warms up while config.sh registers.
    assert init_names(pod) == [dind.DIND_CONTAINER, naming.REGISTER_CONTAINER]
    daemon = daemon_of(pod)
    assert daemon["image"] == api.DEFAULT_DIND_IMAGE
    # A native sidecar: started before the runner, stopped after it, no part of the pod's phase.
    assert daemon["restartPolicy"] == "Always"
    assert daemon["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsNonRoot": False}
    # The pod's defaults (runAsNonRoot, uid 1001) stay for every other container.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert runner_of(pod)["securityContext"]["allowPrivilegeEscalation"] is False
    # The runner's one-job life is unchanged: it exits after its job and the pod ends.
    assert pod["restartPolicy"] == "OnFailure"
    assert [c["name"] for c in pod["containers"]] == [naming.RUNNER_CONTAINER]


def test_the_runner_reaches_the_daemon_on_a_socket_its_group_may_use() -> None:
    pod = pod_of(containerMode="dind")
    daemon = daemon_of(pod)
    runner = runner_of(pod)
    assert env_of(runner)["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    assert env_of(runner)["RUNNER_DOCKER_WAIT_SECONDS"] == str(dind.DOCKER_WAIT_SECONDS)
    assert daemon["args"] == [
        "dockerd",
        "--host=unix:///var/run/docker.sock",
        f"--group={pod['securityContext']['fsGroup']}",
    ]
    # The kubelet gives every container the pod's fsGroup: the runner user is in the socket's group.
    assert pod["securityContext"]["fsGroup"] == security.RUNNER_GID
    assert mounts_of(runner)["/var/run"] == mounts_of(daemon)["/var/run"]


def test_the_daemon_sees_the_workspace_at_the_runners_path_and_keeps_its_data_apart() -> None:
    pod = pod_of(containerMode="dind", workVolume={"ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    daemon = daemon_of(pod)
    runner = runner_of(pod)
    work = mounts_of(runner)[template.WORK_DIR]
    assert mounts_of(daemon)[template.WORK_DIR] == work
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "ephemeral" in volumes[work], "the pool's work volume is the one both mount"
    data = mounts_of(daemon)["/var/lib/docker"]
    assert volumes[data] == {"name": data, "emptyDir": {}}
    assert data not in mounts_of(runner).values()


def test_a_pool_may_choose_the_daemon_image_and_its_own_docker_host() -> None:
    pod = pod_of(
        containerMode="dind",
        dindImage="registry.example.com/docker:28-dind",
        env=[{"name": "DOCKER_HOST", "value": "tcp://127.0.0.1:2375"}],
    )
    assert daemon_of(pod)["image"] == "registry.example.com/docker:28-dind"
    hosts = [e["value"] for e in runner_of(pod)["env"] if e["name"] == "DOCKER_HOST"]
    assert hosts == ["tcp://127.0.0.1:2375"]


def test_a_template_merges_into_the_daemon_but_cannot_unmake_it() -> None:
    """By name, as into the runner: its resources and args win; restartPolicy and mounts stay ours."""
    resources = {"requests": {"cpu": "2"}}
    template_spec = {
        "initContainers": [
            {"name": "warm-cache", "image": "busybox:1"},
            {
                "name": dind.DIND_CONTAINER,
                "restartPolicy": "OnFailure",
                "resources": resources,
                "volumeMounts": [
                    {"name": "elsewhere", "mountPath": "/var/run"},
                    {"name": "certs", "mountPath": "/etc/docker/certs.d"},
                ],
            },
        ],
        "volumes": [{"name": "elsewhere", "emptyDir": {}}, {"name": "certs", "emptyDir": {}}],
    }
    pod = pod_of(containerMode="dind", template={"spec": template_spec})
    assert init_names(pod) == [dind.DIND_CONTAINER, naming.REGISTER_CONTAINER, "warm-cache"]
    daemon = daemon_of(pod)
    assert daemon["resources"] == resources
    assert daemon["restartPolicy"] == "Always"
    assert mounts_of(daemon)["/var/run"] == mounts_of(runner_of(pod))["/var/run"] != "elsewhere"
    assert mounts_of(daemon)["/etc/docker/certs.d"] == "certs"
    assert daemon["securityContext"]["privileged"] is True


def test_turning_dind_on_or_changing_its_image_rolls_the_pods() -> None:
    hashes = {
        template.wanted_hash(pool(**spec), "runner:1", API)
        for spec in ({}, {"containerMode": "dind"}, {"containerMode": "dind", "dindImage": "docker:27-dind"})
    }
    assert len(hashes) == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containerMode": "docker"}, "Input should be 'dind' or 'kubernetes'"),
        ({"dindImage": "docker:28-dind"}, "set containerMode: dind or remove dindImage"),
    ],
)
def test_the_models_refuse_what_the_crd_refuses(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        pool(**spec)


def test_the_api_server_takes_the_dind_pod(api_client: client.ApiClient, namespace: str) -> None:
    """A native sidecar (restartPolicy on an init container) and its security context validate."""
    body = template.runner_pod(pool(containerMode="dind"), "runner:1", API)
    body["metadata"].update(namespace=namespace, ownerReferences=[])
    created = client.CoreV1Api(api_client).create_namespaced_pod(namespace, body, dry_run="All")
    daemon, register = created.spec.init_containers
    assert (daemon.name, daemon.restart_policy) == (dind.DIND_CONTAINER, "Always")
    assert register.name == naming.REGISTER_CONTAINER
    assert daemon.security_context.privileged is True
