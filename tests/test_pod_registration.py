"""The runner pod's registration shape: only the register init container sees the pool's token.

What a job could read is what the runner container mounts and is given in its env; these tests
read the pod the operator creates (``template.runner_pod``) the way a reviewer would.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, naming
from runnerpool.pods import registration, template


def pool(**spec: Any) -> api.RunnerPool:
    metadata = {"name": "ci", "namespace": "team", "uid": "pool-uid"}
    return api.RunnerPool.model_validate({"metadata": metadata, "spec": {"organization": "o", **spec}})


def pod(**spec: Any) -> dict[str, Any]:
    return template.runner_pod(pool(**spec), "img:1", "https://api.github.com")


def secret_volumes(spec: dict[str, Any]) -> set[str]:
    return {v["name"] for v in spec["volumes"] if "secret" in v or "projected" in v}


def test_the_runner_container_mounts_no_secret_and_names_no_token() -> None:
    spec = pod()["spec"]
    [runner] = spec["containers"]

    assert runner["name"] == naming.RUNNER_CONTAINER
    assert not {m["name"] for m in runner["volumeMounts"]} & secret_volumes(spec)
    assert not any("valueFrom" in e and "secretKeyRef" in e["valueFrom"] for e in runner["env"])
    assert "RUNNER_TOKEN_FILE" not in {e["name"] for e in runner["env"]}
    assert runner["args"] == ["run"]


def test_only_the_register_init_container_mounts_the_pools_token() -> None:
    spec = pod()["spec"]
    [init] = spec["initContainers"]
    token = next(v for v in spec["volumes"] if v["name"] == registration.TOKEN_VOLUME)

    assert (init["name"], init["image"], init["args"]) == ("register", "img:1", ["register"])
    assert token["secret"]["secretName"] == naming.token_secret_name("ci")
    mounts = {m["name"]: m for m in init["volumeMounts"]}
    assert mounts[registration.TOKEN_VOLUME]["readOnly"] is True
    env = {e["name"]: e.get("value") for e in init["env"]}
    assert env["RUNNER_TOKEN_FILE"] == f"{registration.TOKEN_MOUNT_DIR}/{naming.TOKEN_SECRET_KEY}"


def test_both_containers_share_the_configuration_volume_in_memory() -> None:
    spec = pod()["spec"]
    [init], [runner] = spec["initContainers"], spec["containers"]
    config = {m["name"] for m in runner["volumeMounts"] if m["mountPath"] == registration.CONFIG_MOUNT_DIR}

    assert config and config <= {m["name"] for m in init["volumeMounts"]}
    [volume] = [v for v in spec["volumes"] if v["name"] in config]
    assert volume["emptyDir"]["medium"] == "Memory"
    for container in (init, runner):
        assert {"name": "RUNNER_CONFIG_DIR", "value": registration.CONFIG_MOUNT_DIR} in container["env"]


def test_the_init_container_mounts_the_disk_backed_work_volume_for_its_reboot_marker() -> None:
    """The entrypoint keeps its markers on the work volume too, where they outlive a node reboot
    that empties the memory-backed configuration volume: the init container must mount it."""
    spec = pod()["spec"]
    [init] = spec["initContainers"]
    [work] = [v for v in spec["volumes"] if v["name"] == naming.WORK_VOLUME]

    assert {"name": naming.WORK_VOLUME, "mountPath": naming.WORK_DIR} in init["volumeMounts"]
    assert work["emptyDir"].get("medium") != "Memory"


def test_the_init_container_registers_with_what_the_runner_container_is_given() -> None:
    """Scope, labels, a proxy from spec.env, a CA bundle mount, resources: config.sh needs them too."""
    spec = pod(
        env=[{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        volumes=[{"name": "ca", "configMap": {"name": "ca"}}],
        volumeMounts=[{"name": "ca", "mountPath": "/etc/ssl/custom"}],
        resources={"requests": {"cpu": "1"}},
    )["spec"]
    [init], [runner] = spec["initContainers"], spec["containers"]

    assert all(e in init["env"] for e in runner["env"])
    assert all(m in init["volumeMounts"] for m in runner["volumeMounts"])
    assert init["resources"] == runner["resources"]
    assert init["resources"]["requests"] == {"cpu": "1"}


# -- JIT mode --------------------------------------------------------------------------------------


def test_a_jit_pod_mounts_only_its_own_secret_and_only_in_the_register_container() -> None:
    made = pod(registration="jit")
    spec = made["spec"]
    [init], [runner] = spec["initContainers"], spec["containers"]
    own = made["metadata"]["annotations"][naming.JIT_SECRET_ANNOTATION]

    assert [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v] == [own]
    assert own.startswith("runner-jit-ci-")
    assert not {m["name"] for m in runner["volumeMounts"]} & secret_volumes(spec)
    assert {m["name"]: m["readOnly"] for m in init["volumeMounts"] if m["name"] in secret_volumes(spec)} == {
        naming.JIT_VOLUME: True
    }
    init_env = {e["name"]: e.get("value") for e in init["env"]}
    assert init_env["RUNNER_JITCONFIG_FILE"] == f"{naming.JIT_MOUNT_DIR}/{naming.JIT_SECRET_KEY}"
    assert init_env["RUNNER_REGISTRATION"] == "jit"
    assert "RUNNER_TOKEN_FILE" not in init_env
    # The pool's token is nowhere in a JIT pod.
    assert naming.token_secret_name("ci") not in str(made)


def test_jit_pods_share_their_template_hash_and_have_secrets_of_their_own() -> None:
    one, two = pod(registration="jit"), pod(registration="jit")

    hash_of = [p["metadata"]["labels"][naming.TEMPLATE_HASH_LABEL] for p in (one, two)]
    secret_of = [p["metadata"]["annotations"][naming.JIT_SECRET_ANNOTATION] for p in (one, two)]
    assert hash_of[0] == hash_of[1] != pod()["metadata"]["labels"][naming.TEMPLATE_HASH_LABEL]
    assert secret_of[0] != secret_of[1]


def test_a_token_pod_keeps_its_shape_no_jit_annotation_no_registration_env() -> None:
    made = pod()
    [init] = made["spec"]["initContainers"]

    assert naming.JIT_SECRET_ANNOTATION not in (made["metadata"].get("annotations") or {})
    assert "RUNNER_REGISTRATION" not in {e["name"] for e in init["env"]}
