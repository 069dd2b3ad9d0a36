"""How a runner pod registers its runner without the job's container ever seeing a pool credential.

A registration token is pool-wide: anyone who reads it can register runners of their own for
the pool's repository or organization for the token's remaining life (an hour), and take other
workflows' jobs and secrets.  Jobs run arbitrary code in the runner container, so that container
must not mount it.  Registration therefore happens in an init container (the same image, the
entrypoint's ``register`` phase), which alone mounts the pool's token Secret, runs ``config.sh``
and writes the runner's own configuration (``.runner``, ``.credentials``,
``.credentials_rsaparams``: one runner's identity, which registers nothing) to an emptyDir;
the runner container mounts only that emptyDir and restores the configuration before
``run.sh``.  An init container has ended before the runner container starts, and a Secret
volume is read when the init container runs: a token refreshed later reaches only a restarted
init container (a failed registration), which is all it needs.

In JIT mode (``spec.registration: jit``) the init container mounts the pod's own JIT Secret
instead (``runner-jit-<pool>-<suffix>``, named in the pod's ``naming.JIT_SECRET_ANNOTATION``): the
operator creates it empty once the pod exists (``runnerpool.children.jit_child``), the token
scheduler fills it with one runner's config, and until then the kubelet retries the volume (the pod waits in
``PodInitializing``, which is no failure: ``runnerpool.pods.failures``). The register phase copies
the config to the emptyDir, the runner container hands it to ``run.sh --jitconfig``.

`template` asks this module for the init container, the runner container's mounts and env,
and the volumes: the pod's shape stays there, the registration's here.
"""

from __future__ import annotations

import secrets
from typing import Any

from runnerpool import api, naming

__all__ = [
    "CONFIG_MOUNT_DIR",
    "REGISTER_CONTAINER",
    "TOKEN_MOUNT_DIR",
    "TOKEN_VOLUME",
    "init_containers",
    "runner_args",
    "runner_env",
    "runner_mounts",
    "volumes",
    "with_jit_secret",
    "with_register_container",
]

#: The init container that registers the pod's runner, its volumes and where they are mounted.
REGISTER_CONTAINER = naming.REGISTER_CONTAINER
TOKEN_MOUNT_DIR = naming.TOKEN_MOUNT_DIR
CONFIG_MOUNT_DIR = naming.CONFIG_MOUNT_DIR
TOKEN_VOLUME = naming.TOKEN_VOLUME
_CONFIG_VOLUME = naming.CONFIG_VOLUME
#: The entrypoint's phases (deploy/images/runner/entrypoint.sh).
_REGISTER_PHASE = "register"
_RUN_PHASE = "run"


def _config_mount() -> dict[str, Any]:
    return {"name": _CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_DIR}


def _shared_env() -> list[dict[str, Any]]:
    """What both containers need to find the configuration they hand over."""
    return [{"name": "RUNNER_CONFIG_DIR", "value": CONFIG_MOUNT_DIR}]


def _jit(pool: api.RunnerPool) -> bool:
    return pool.spec.registers_jit


def _credential(pool: api.RunnerPool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The register container's env naming its credential file, and the mount of that file."""
    if _jit(pool):
        return (
            {"name": "RUNNER_JITCONFIG_FILE", "value": f"{naming.JIT_MOUNT_DIR}/{naming.JIT_SECRET_KEY}"},
            {"name": naming.JIT_VOLUME, "mountPath": naming.JIT_MOUNT_DIR, "readOnly": True},
        )
    return (
        {"name": "RUNNER_TOKEN_FILE", "value": f"{TOKEN_MOUNT_DIR}/{naming.TOKEN_SECRET_KEY}"},
        {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": True},
    )


def init_containers(pool: api.RunnerPool, runner: dict[str, Any]) -> list[dict[str, Any]]:
    """The register init container, made from the runner container so both run the same image.

    It inherits the runner container's image, env (scope, labels, URL, and the pool's own: a
    proxy that config.sh needs to reach GitHub), resources, security context and the pool's
    volume mounts (a CA bundle), plus the token; the pod's request is the larger of an init
    container's and the containers' sum, so copying the resources does not raise it.
    """
    env, mount = _credential(pool)
    container: dict[str, Any] = {
        "name": REGISTER_CONTAINER,
        "image": runner["image"],
        "args": [_REGISTER_PHASE],
        "env": [env, *runner["env"]],
        "volumeMounts": [mount, *runner["volumeMounts"]],
    }
    # The same pull policy, env sources, resources and security context (Pod Security
    # restricted checks init containers too).
    for field in ("imagePullPolicy", "envFrom", "resources", "securityContext"):
        if field in runner:
            container[field] = runner[field]
    return [container]


def with_register_container(pool: api.RunnerPool, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the register init container first, made from its runner container."""
    runner = next(c for c in spec["containers"] if c["name"] == naming.RUNNER_CONTAINER)
    others = [c for c in spec.get("initContainers", ()) if c.get("name") != REGISTER_CONTAINER]
    return {**spec, "initContainers": [*init_containers(pool, runner), *others]}


def runner_args() -> list[str]:
    return [_RUN_PHASE]


def runner_env(pool: api.RunnerPool) -> list[dict[str, Any]]:
    """Token mode sets nothing more (the entrypoint's default): its pods keep their template hash."""
    jit = [{"name": "RUNNER_REGISTRATION", "value": api.REGISTRATION_JIT}] if _jit(pool) else []
    return [*_shared_env(), *jit]


def runner_mounts() -> list[dict[str, Any]]:
    """The runner container's share of the registration: the configuration, never the token."""
    return [_config_mount()]


#: The JIT volume's Secret in the pool's template (the same for every pod, so the template hash
#: is too); each pod's own name replaces it (:func:`with_jit_secret`).
_JIT_SECRET_PLACEHOLDER = "runner-jit"


def _secret_volume(name: str, secret_name: str, key: str) -> dict[str, Any]:
    return {
        "name": name,
        "secret": {
            "secretName": secret_name,
            "items": [{"key": key, "path": key}],
            # Read by the runner user (the pod's fsGroup owns the file) and no one else.
            "defaultMode": 0o440,
        },
    }


def _credential_volume(pool: api.RunnerPool) -> dict[str, Any]:
    if _jit(pool):
        return _secret_volume(naming.JIT_VOLUME, _JIT_SECRET_PLACEHOLDER, naming.JIT_SECRET_KEY)
    return _secret_volume(TOKEN_VOLUME, naming.token_secret_name(pool.name), naming.TOKEN_SECRET_KEY)


def jit_secret_name(pool: api.RunnerPool) -> str | None:
    """A new JIT pod's Secret name, drawn before the pod is created; ``None`` in token mode.

    Ten random characters: the pod's own name is the API server's (``generateName``), so the
    Secret cannot be named after it, and a clash with another pod's is never to be expected.
    """
    return naming.jit_secret_name(pool.name, secrets.token_hex(5)) if _jit(pool) else None


def with_jit_secret(spec: dict[str, Any], secret_name: str) -> dict[str, Any]:
    """``spec`` with its JIT volume naming the pod's own Secret."""

    def named(volume: dict[str, Any]) -> dict[str, Any]:
        if volume.get("name") != naming.JIT_VOLUME:
            return volume
        return {**volume, "secret": {**volume["secret"], "secretName": secret_name}}

    return {**spec, "volumes": [named(v) for v in spec["volumes"]]}


def volumes(pool: api.RunnerPool) -> list[dict[str, Any]]:
    return [
        _credential_volume(pool),
        # Memory-backed: the runner's credential never lands on the node's disk.
        {"name": _CONFIG_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
