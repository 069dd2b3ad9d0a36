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

`template` asks this module for the init container, the runner container's mounts and env,
and the volumes: the pod's shape stays there, the registration's here.
"""

from __future__ import annotations

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


def init_containers(runner: dict[str, Any]) -> list[dict[str, Any]]:
    """The register init container, made from the runner container so both run the same image.

    It inherits the runner container's image, env (scope, labels, URL, and the pool's own: a
    proxy that config.sh needs to reach GitHub), resources, security context and the pool's
    volume mounts (a CA bundle), plus the token; the pod's request is the larger of an init
    container's and the containers' sum, so copying the resources does not raise it.
    """
    container: dict[str, Any] = {
        "name": REGISTER_CONTAINER,
        "image": runner["image"],
        "args": [_REGISTER_PHASE],
        "env": [
            {"name": "RUNNER_TOKEN_FILE", "value": f"{TOKEN_MOUNT_DIR}/{naming.TOKEN_SECRET_KEY}"},
            *runner["env"],
        ],
        "volumeMounts": [
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": True},
            *runner["volumeMounts"],
        ],
    }
    # The same pull policy, env sources, resources and security context (Pod Security
    # restricted checks init containers too).
    for field in ("imagePullPolicy", "envFrom", "resources", "securityContext"):
        if field in runner:
            container[field] = runner[field]
    return [container]


def with_register_container(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the register init container first, made from its runner container."""
    runner = next(c for c in spec["containers"] if c["name"] == naming.RUNNER_CONTAINER)
    others = [c for c in spec.get("initContainers", ()) if c.get("name") != REGISTER_CONTAINER]
    return {**spec, "initContainers": [*init_containers(runner), *others]}


def runner_args() -> list[str]:
    return [_RUN_PHASE]


def runner_env() -> list[dict[str, Any]]:
    return _shared_env()


def runner_mounts() -> list[dict[str, Any]]:
    """The runner container's share of the registration: the configuration, never the token."""
    return [_config_mount()]


def volumes(pool: api.RunnerPool) -> list[dict[str, Any]]:
    return [
        {
            "name": TOKEN_VOLUME,
            "secret": {
                "secretName": naming.token_secret_name(pool.name),
                "items": [{"key": naming.TOKEN_SECRET_KEY, "path": naming.TOKEN_SECRET_KEY}],
                # Read by the runner user (the pod's fsGroup owns the file) and no one else.
                "defaultMode": 0o440,
            },
        },
        # Memory-backed: the runner's credential never lands on the node's disk.
        {"name": _CONFIG_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
