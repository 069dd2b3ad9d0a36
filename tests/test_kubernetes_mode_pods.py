"""The runner pod of ``containerMode: kubernetes``: what the runner container hooks find in it.

Pure: the pod spec a pool gets (runnerpool/pods/template.py with pods/kubernetes_mode.py), as
the hooks read it: their env, the ServiceAccount with its token, and the work volume their job
pods mount.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runnerpool import api, naming
from runnerpool.pods import kubernetes_mode, template

API_URL = "https://api.github.com"


def _pool(**spec: Any) -> api.RunnerPool:
    return api.RunnerPool.model_validate(
        {
            "metadata": {"name": "k8s", "namespace": "ci", "uid": "u-1"},
            "spec": {"repository": "octo-org/hello-world", **spec},
        }
    )


def _spec(pool: api.RunnerPool) -> dict[str, Any]:
    return template.pod_spec(pool, "runner:1", API_URL)


def _env(spec: dict[str, Any]) -> dict[str, Any]:
    [runner] = [c for c in spec["containers"] if c["name"] == naming.RUNNER_CONTAINER]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in runner["env"]}


def _work(spec: dict[str, Any]) -> dict[str, Any]:
    [volume] = [v for v in spec["volumes"] if v["name"] == naming.WORK_VOLUME]
    return volume


def test_with_a_work_volume_claim_the_pod_has_the_k8s_hooks_and_their_claim() -> None:
    claim = {"storageClassName": "fast-ssd", "storage": "20Gi"}
    spec = _spec(_pool(containerMode="kubernetes", kubernetesMode={"workVolumeClaim": claim}))

    env = _env(spec)
    assert env["ACTIONS_RUNNER_CONTAINER_HOOKS"] == api.KUBERNETES_HOOK
    assert env["ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER"] == "true"
    assert env["ACTIONS_RUNNER_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The ephemeral volume's claim is "<pod>-work": the one the job pods mount.
    assert env["ACTIONS_RUNNER_CLAIM_NAME"] == "$(ACTIONS_RUNNER_POD_NAME)-work"
    template_spec = _work(spec)["ephemeral"]["volumeClaimTemplate"]
    assert template_spec["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "fast-ssd",
    }
    assert template_spec["metadata"]["labels"][naming.POOL_LABEL] == "k8s"
    assert spec["serviceAccountName"] == naming.runner_account_name("k8s")
    assert spec["automountServiceAccountToken"] is True


def test_without_a_claim_the_pod_has_an_empty_dir_and_the_novolume_hooks() -> None:
    spec = _spec(_pool(containerMode="kubernetes"))

    env = _env(spec)
    assert env["ACTIONS_RUNNER_CONTAINER_HOOKS"] == api.KUBERNETES_NOVOLUME_HOOK
    assert "ACTIONS_RUNNER_CLAIM_NAME" not in env
    assert _work(spec) == {"name": naming.WORK_VOLUME, "emptyDir": {}}
    assert spec["serviceAccountName"] == naming.runner_account_name("k8s")


def test_the_pools_own_hook_path_and_env_win() -> None:
    spec = _spec(
        _pool(
            containerMode="kubernetes",
            kubernetesMode={"hookPath": "/opt/hooks/index.js"},
            env=[{"name": "ACTIONS_RUNNER_CONTAINER_HOOKS", "value": "/opt/own/index.js"}],
        )
    )
    [runner] = spec["containers"]
    names = [e["name"] for e in runner["env"]]
    assert len(names) == len(set(names)), "no env var twice"
    assert _env(spec)["ACTIONS_RUNNER_CONTAINER_HOOKS"] == "/opt/own/index.js"
    assert _env(spec)["ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER"] == "true"


@pytest.mark.parametrize(
    "where",
    [
        {"env": [{"name": "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "value": "false"}]},
        {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "runner",
                            "env": [{"name": "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "value": "0"}],
                        }
                    ]
                }
            }
        },
    ],
    ids=["spec-env", "template"],
)
def test_no_pool_lets_jobs_run_next_to_the_runner_accounts_token(where: dict[str, Any]) -> None:
    """A job without ``container:`` would run in the runner container, which holds the runner
    account's token (it reads the namespace's Secrets, the pool's credential among them)."""
    spec = template.pod_template(_pool(containerMode="kubernetes", **where), "runner:1", API_URL)["spec"]
    [runner] = [c for c in spec["containers"] if c["name"] == naming.RUNNER_CONTAINER]
    required = [e for e in runner["env"] if e["name"] == "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER"]
    assert required == [{"name": "ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER", "value": "true"}]


def test_a_pool_that_sets_nothing_keeps_its_pods() -> None:
    """Enforced in place: the operator's own entry stays where it was, so the template hash, and
    with it every running pod, stays as it was."""
    pool = _pool(containerMode="kubernetes")
    shaped = _spec(pool)
    assert kubernetes_mode.jobs_in_pods_of_their_own(pool, shaped) == shaped


def test_other_pools_get_no_api_credentials_and_no_hooks() -> None:
    spec = _spec(_pool())
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert not [name for name in _env(spec) if name.startswith("ACTIONS_RUNNER_")]


def test_the_register_container_and_a_template_keep_the_mode() -> None:
    """The register init container is made from the merged runner container, and a template's
    own settings reach both; the hooks' account and env stay the operator's."""
    runner_template = {
        "name": naming.RUNNER_CONTAINER,
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
    }
    pool = _pool(
        containerMode="kubernetes",
        template={"spec": {"priorityClassName": "ci", "containers": [runner_template]}},
    )
    spec = template.pod_template(pool, "runner:1", API_URL)["spec"]
    assert spec["priorityClassName"] == "ci"
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (
        naming.runner_account_name("k8s"),
        True,
    )
    [register] = [c for c in spec["initContainers"] if c["name"] == naming.REGISTER_CONTAINER]
    # Registration is JIT in this mode: the runner's account can read the namespace's Secrets, so
    # there is no pool-wide token to mount, only the pod's own JIT config, in the register container.
    assert naming.JIT_VOLUME in {m["name"] for m in register["volumeMounts"]}
    assert naming.TOKEN_VOLUME not in {v["name"] for v in spec["volumes"]}
    for container in (register, *spec["containers"]):
        env = {e["name"] for e in container["env"]}
        assert {"HTTPS_PROXY", "ACTIONS_RUNNER_CONTAINER_HOOKS"} <= env, container["name"]
    [runner] = spec["containers"]
    assert not {naming.TOKEN_VOLUME, naming.JIT_VOLUME} & {m["name"] for m in runner["volumeMounts"]}


def test_switching_the_mode_rolls_the_pods() -> None:
    hashes = {
        template.wanted_hash(pool, "runner:1", API_URL)
        for pool in (
            _pool(),
            _pool(containerMode="kubernetes"),
            _pool(containerMode="kubernetes", kubernetesMode={"workVolumeClaim": {}}),
        )
    }
    assert len(hashes) == 3


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"kubernetesMode": {}}, "applies to spec.containerMode: kubernetes only"),
        ({"containerMode": "kubernetes", "serviceAccountName": "mine"}, "cannot be set with containerMode"),
        (
            {"containerMode": "kubernetes", "template": {"spec": {"automountServiceAccountToken": False}}},
            "the operator makes the runners' ServiceAccount and mounts its token",
        ),
        (
            {"containerMode": "kubernetes", "workVolume": {"emptyDir": {}}},
            "use spec.kubernetesMode.workVolumeClaim",
        ),
        (
            {"containerMode": "kubernetes", "registration": "token"},
            "the runners' ServiceAccount can read the namespace's Secrets",
        ),
    ],
    ids=["settings-without-mode", "own-service-account", "template-token", "own-work-volume", "pool-token"],
)
def test_the_models_refuse_what_the_api_server_refuses(spec: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        _pool(**spec)
