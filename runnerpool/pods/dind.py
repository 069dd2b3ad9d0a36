"""``spec.containerMode: dind``: a Docker daemon beside the runner in each runner pod.

The daemon is a native sidecar (an init container with ``restartPolicy: Always``, GA in
Kubernetes 1.33), the shape ARC's dind mode and meows' users run, so that the kubelet:

* starts it first, before the register init container and the runner container, so dockerd
  warms up while the runner registers (the runner image's entrypoint still waits until the
  daemon answers before it starts the listener, ``RUNNER_DOCKER_WAIT_SECONDS``: "started" is
  not "listening");
* stops it only after the runner container has ended (kubelet ``terminationOrdering``:
  sidecars wait for every main container, then get what is left of the pod's
  ``terminationGracePeriodSeconds``, at least 2 s), so a busy runner's last step can still
  use Docker while its job finishes on SIGTERM;
* ends it when the runner exits after its one job: a pod whose main containers are done is
  ``Succeeded`` whatever its sidecars do, so one job per pod stays as without dind.

What the runner and the daemon share:

* the runner's work volume, mounted into the daemon at the same path, so
  ``docker run -v "$PWD:/src"`` from a job step names a directory the daemon sees;
* the socket volume at ``/var/run`` in both, so the socket is at Docker's default path
  ``/var/run/docker.sock`` (``DOCKER_HOST`` points there too): tools that ignore
  ``DOCKER_HOST`` work, and so does the runner's ``container:`` job, which bind-mounts
  ``/var/run/docker.sock`` into job containers as the daemon sees it.  A unix socket, not
  TCP on localhost: a TCP port is open to every process in the pod's network namespace
  (job containers run with ``--network host`` included) without any permission check,
  where the socket's group decides who may use it.

The socket's group is the pod's ``fsGroup`` (``--group``): the kubelet adds the fsGroup to
every container's supplementary groups, so the runner user (uid 1001, not root) may use the
socket whatever groups its image gives it (ARC relies on the image's ``docker`` group 123).

Docker's data (``/var/lib/docker``) is an emptyDir of its own: the container's root file
system is an overlay, on which overlay2 cannot stack, and an emptyDir goes with the pod.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, naming

__all__ = ["DIND_CONTAINER", "DOCKER_HOST", "DOCKER_WAIT_SECONDS", "with_daemon_first", "with_docker_daemon"]

DIND_CONTAINER = "dind"
SOCKET_DIR = "/var/run"
DOCKER_HOST = f"unix://{SOCKET_DIR}/docker.sock"
DATA_DIR = "/var/lib/docker"
_SOCKET_VOLUME = "dind-socket"
_DATA_VOLUME = "dind-data"
#: How long the runner's entrypoint waits for the daemon before it fails (and the kubelet
#: restarts it): dockerd answers in a few seconds; a minute covers a slow node.
DOCKER_WAIT_SECONDS = 120


def with_docker_daemon(
    spec: api.RunnerPoolSpec, pod: dict[str, Any], *, work_mount: dict[str, Any], socket_group: int
) -> dict[str, Any]:
    """``pod`` (a runner pod spec) with the daemon beside its runner when the pool asks for dind.

    ``work_mount`` is the runner container's mount of its work volume; ``socket_group`` the
    pod's fsGroup.  A pool without ``containerMode: dind`` gets ``pod`` unchanged.
    """
    if spec.container_mode != "dind":
        return pod
    containers = [
        _with_docker_client(c, _socket_mount()) if c["name"] == naming.RUNNER_CONTAINER else c
        for c in pod["containers"]
    ]
    return {
        **pod,
        "initContainers": [*pod.get("initContainers", []), _daemon(spec, work_mount, socket_group)],
        "containers": containers,
        "volumes": [
            *pod["volumes"],
            {"name": _SOCKET_VOLUME, "emptyDir": {}},
            {"name": _DATA_VOLUME, "emptyDir": {}},
        ],
    }


def with_daemon_first(
    spec: api.RunnerPoolSpec, pod: dict[str, Any], *, work_mount: dict[str, Any], socket_group: int
) -> dict[str, Any]:
    """``pod`` (after the pool's template) with the daemon first among its init containers.

    The kubelet starts init containers in order and a sidecar counts as started as soon as it
    runs, so first means dockerd warms up while the register container runs ``config.sh``.
    The template may merge into the daemon by name (``dind``), as into ``runner``: its image,
    args, env, resources and further mounts win.  What makes it the pod's daemon stays the
    operator's: ``restartPolicy: Always`` (else it would be an init container the runner waits
    for, forever) and its mounts at the work, socket and data paths.
    """
    if spec.container_mode != "dind":
        return pod
    inits = pod.get("initContainers", [])
    ours = _daemon(spec, work_mount, socket_group)
    merged = next(c for c in inits if c.get("name") == DIND_CONTAINER)
    paths = {m["mountPath"] for m in ours["volumeMounts"]}
    daemon = {
        **merged,
        "restartPolicy": ours["restartPolicy"],
        "volumeMounts": [
            *ours["volumeMounts"],
            *(m for m in merged.get("volumeMounts", ()) if m.get("mountPath") not in paths),
        ],
    }
    return {**pod, "initContainers": [daemon, *(c for c in inits if c is not merged)]}


def _socket_mount() -> dict[str, Any]:
    return {"name": _SOCKET_VOLUME, "mountPath": SOCKET_DIR}


def _daemon(spec: api.RunnerPoolSpec, work_mount: dict[str, Any], socket_group: int) -> dict[str, Any]:
    return {
        "name": DIND_CONTAINER,
        "image": spec.dind_image or api.DEFAULT_DIND_IMAGE,
        "args": ["dockerd", f"--host={DOCKER_HOST}", f"--group={socket_group}"],
        "restartPolicy": "Always",
        # Its own, whatever the pod's defaults (runnerpool.pods.security: runAsNonRoot, uid
        # 1001): dockerd runs as root and makes namespaces, mounts and cgroups (privileged
        # containers run without seccomp and AppArmor).
        "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False},
        "volumeMounts": [
            {"name": work_mount["name"], "mountPath": work_mount["mountPath"]},
            _socket_mount(),
            {"name": _DATA_VOLUME, "mountPath": DATA_DIR},
        ],
    }


def _with_docker_client(runner: dict[str, Any], socket_mount: dict[str, Any]) -> dict[str, Any]:
    env = [
        {"name": "DOCKER_HOST", "value": DOCKER_HOST},
        {"name": "RUNNER_DOCKER_WAIT_SECONDS", "value": str(DOCKER_WAIT_SECONDS)},
    ]
    return {
        **runner,
        # A pool may still point DOCKER_HOST elsewhere (spec.env) or wait longer.
        "env": _unless_set(runner["env"], env),
        "volumeMounts": [*runner["volumeMounts"], socket_mount],
    }


def _unless_set(current: list[dict[str, Any]], added: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``added`` unless the pool already sets the same names (the pool's value wins)."""
    names = {e["name"] for e in current}
    return [*current, *(e for e in added if e["name"] not in names)]
