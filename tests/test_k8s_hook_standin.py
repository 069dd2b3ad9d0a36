"""The container hooks' stand-in (testworld/runner_image/k8s-hook.sh) as local processes.

The node test runs it in a runner pod; here the stand-in worker and hooks run on this machine
against the real API server, as the runner ServiceAccount the operator makes, with a thread
playing the kubelet (nothing runs pods here). So the contract is checked where a failure is
cheap to read: the input the worker sends, the response file and state prepare_job answers,
the job pod on the runner's node, the step's environment through a Secret, the cleanup, and the
refusal to run without the hooks' permissions.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, naming
from runnerpool.runtime.kube import Kube
from tests.pools import create_pool, play_kubelet, pool_manifest
from tests.test_hook_access import make_runner_access
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import install_operator_rbac, token_of
from testworld.node.images import RUNNER_HOST_COMMANDS

STANDINS = Path(__file__).resolve().parent.parent / "testworld" / "runner_image"
RUNNER_POD = "km-abcde"
NODE = "node-a"
IMAGE = "localhost/job-image:1"
TIMEOUT = 60


@dataclass(eq=False)
class Kubelet(threading.Thread):
    """Reports the hooks' pods as a kubelet would: the job pod running, a step pod done."""

    api_client: client.ApiClient
    namespace: str
    step_exit: int = 0
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(name="kubelet", daemon=True)

    def run(self) -> None:
        core = client.CoreV1Api(self.api_client)
        while not self.stop.wait(0.1):
            for pod in core.list_namespaced_pod(
                self.namespace, label_selector=f"runner-pod={RUNNER_POD}"
            ).items:
                name = pod.metadata.name
                if name in self.seen or pod.metadata.deletion_timestamp:
                    continue
                self.seen[name] = self.api_client.sanitize_for_serialization(pod)
                if "-step-" in name:
                    secret = pod.spec.containers[0].env_from[0].secret_ref.name
                    data = core.read_namespaced_secret(secret, self.namespace).data or {}
                    self.seen[name]["env"] = {k: base64.b64decode(v).decode() for k, v in data.items()}
                    self._terminate(core, name)
                else:
                    play_kubelet(self.api_client, self.namespace, name)

    def _terminate(self, core: client.CoreV1Api, name: str) -> None:
        phase = "Succeeded" if self.step_exit == 0 else "Failed"
        terminated = {"exitCode": self.step_exit, "reason": "Completed"}
        status = {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "step",
                    "image": IMAGE,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        core.patch_namespaced_pod_status(name, self.namespace, {"status": status})


@dataclass(frozen=True)
class Runner:
    env: dict[str, str]
    workdir: Path


@pytest.fixture
def runner(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    tmp_path: Path,
) -> Runner:
    """The runner pod's side: the pool's account made by the operator's step, the runner pod on
    its node, and the pod's in-cluster credentials as the kubelet mounts them."""
    pool = api.RunnerPool.model_validate(
        create_pool(api_client, namespace, pool_manifest("km", containerMode=api.KUBERNETES_MODE))
    )
    install_operator_rbac(control_plane)  # the shipped hooks ClusterRole the binding names
    make_runner_access(Kube(api_client), pool)
    account = naming.runner_account_name("km")
    client.CoreV1Api(api_client).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": RUNNER_POD},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": account,
                "containers": [{"name": "runner", "image": IMAGE}],
            },
        },
    )
    credentials = tmp_path / "serviceaccount"
    credentials.mkdir()
    (credentials / "token").write_text(token_of(api_client, namespace, account))
    shutil.copy(control_plane.workdir / "pki" / "serving-ca.crt", credentials / "ca.crt")
    (credentials / "namespace").write_text(namespace)
    home = tmp_path / "home"
    shutil.copytree(STANDINS, home)
    env = {
        "PATH": str(_image_commands(tmp_path / "bin")),
        "RUNNER_DIR": str(home),
        "RUNNER_WORKDIR": str(tmp_path / "work"),
        "STANDIN_ACCOUNT_DIR": str(credentials),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.port),
        "ACTIONS_RUNNER_POD_NAME": RUNNER_POD,
        "ACTIONS_RUNNER_CONTAINER_HOOKS": str(home / "k8s-hook.sh"),
        "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER": "true",
        "STANDIN_JOB_CONTAINER": IMAGE,
    }
    return Runner(env, home)


def _image_commands(folder: Path) -> Path:
    """Only the commands the runner test image has (no grep, no jq...): what works here works there."""
    folder.mkdir()
    for command in RUNNER_HOST_COMMANDS:
        found = shutil.which(command)
        assert found is not None, command
        (folder / command).symlink_to(found)
    return folder


@pytest.fixture
def kubelet(api_client: client.ApiClient, namespace: str) -> Iterator[Kubelet]:
    playing = Kubelet(api_client, namespace)
    playing.start()
    yield playing
    playing.stop.set()
    playing.join(5)


def _work(runner: Runner, job_id: int = 7, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(runner.workdir / "worker.sh"), str(job_id), "0"],
        env={**runner.env, **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _left(api_client: client.ApiClient, namespace: str) -> list[str]:
    core, selector = client.CoreV1Api(api_client), f"runner-pod={RUNNER_POD}"
    pods = [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=selector).items]
    secrets = [s.metadata.name for s in core.list_namespaced_secret(namespace, label_selector=selector).items]
    return pods + secrets


def test_a_job_runs_through_the_hooks_as_the_runner_account(
    api_client: client.ApiClient, namespace: str, runner: Runner, kubelet: Kubelet
) -> None:
    done = _work(runner)

    assert done.returncode == 0, done.stderr
    job = kubelet.seen[f"{RUNNER_POD}-workflow"]
    assert job["spec"]["nodeName"] == NODE
    assert [(c["name"], c["image"]) for c in job["spec"]["containers"]] == [("job", IMAGE)]
    [step] = [pod for name, pod in kubelet.seen.items() if name.startswith(f"{RUNNER_POD}-step-")]
    assert step["env"] == {"STANDIN_JOB": "7"}  # the step's environment, through a Secret
    assert step["spec"]["containers"][0]["command"] == ["bash"]
    assert 'test "$STANDIN_JOB" = 7' in step["spec"]["containers"][0]["args"][1]
    assert f'job container ready (state {{"jobPod":"{RUNNER_POD}-workflow"}})' in done.stderr
    assert _left(api_client, namespace) == []  # cleanup_job


def test_a_failing_step_fails_the_job_and_still_cleans_up(
    api_client: client.ApiClient, namespace: str, runner: Runner, kubelet: Kubelet
) -> None:
    kubelet.step_exit = 3

    done = _work(runner)

    assert done.returncode == 3, done.stderr
    assert _left(api_client, namespace) == []


def test_without_a_job_container_the_job_fails(runner: Runner) -> None:
    done = _work(runner, STANDIN_JOB_CONTAINER="")

    assert done.returncode == 1
    assert "Jobs without a job container are forbidden on this runner" in done.stderr


def test_the_hooks_refuse_to_run_without_their_permissions(
    api_client: client.ApiClient, namespace: str, runner: Runner
) -> None:
    # The pool's binding to the hooks' ClusterRole replaced by one to a Role with less.
    account, rbac = naming.runner_account_name("km"), client.RbacAuthorizationV1Api(api_client)
    rbac.delete_namespaced_role_binding(account, namespace)
    pods_only = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "less"}, "rules": pods_only})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "less"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "less"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )

    done = _work(runner)

    assert done.returncode == 1
    assert "The Service account needs the following permissions" in done.stderr
    assert "missing: pods:exec:get" in done.stderr
    assert _left(api_client, namespace) == []
