"""Pod fields every source shares: a core/v1 PodSpec's and the runner container's.

Where a RunnerPool has a field of its own (image, env, resources, mounts, node selector,
tolerations, service account, work volume, grace period) the value goes there; every other
pod and container field passes through ``spec.template``, which merges onto the runner pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerpool import api, naming
from runnerpool.domain import parse_duration
from runnerpool.plugin.convert.result import Draft

__all__ = [
    "ARC_WORK_DIR",
    "grace_period",
    "kubernetes_mode",
    "pod_metadata",
    "pod_spec",
    "runner_container",
    "runner_image",
]

#: Where ARC's runner images keep the runner's work directory (the operator's is naming.WORK_DIR).
ARC_WORK_DIR = "/home/runner/_work"
#: The Docker daemon's volumes ARC's containerMode dind adds to a template; ours adds its own.
_ARC_DIND_VOLUMES = ("dind-sock", "dind-externals")
#: Pod spec fields a RunnerPool has at the top of its spec.
_SPEC_FIELDS = ("nodeSelector", "tolerations", "serviceAccountName")
_BUSY_GRACE_SECONDS = parse_duration(api.DEFAULT_BUSY_GRACE_PERIOD).total_seconds()


def runner_image(draft: Draft, image: Any, path: str) -> None:
    """Never carried over: the pool's runner image runs the operator's entrypoint
    (deploy/images/runner), which ARC's and meows' images (and images built on them) lack."""
    draft.drop(
        path,
        f"{image} lacks the pool's runner entrypoint; the pool uses its default runner image: build "
        "yours FROM it (deploy/images/runner) and set spec.runnerImage",
    )


def pod_metadata(draft: Draft, metadata: Mapping[str, Any], path: str) -> None:
    """The template's labels and annotations, less those the operator owns."""
    owned = {"labels": api.operator_label, "annotations": api.operator_annotation}
    for key, is_operators in owned.items():
        for name, value in (metadata.get(key) or {}).items():
            if is_operators(name):
                draft.drop(f"{path}.{key}[{name}]", "the operator sets it (a busy runner's) or selects by it")
            else:
                draft.pod_metadata.setdefault(key, {})[name] = value


def runner_container(draft: Draft, container: Mapping[str, Any], path: str) -> None:
    """The runner container's fields: to the spec where it has them, else to the template's runner."""
    for key, value in container.items():
        where = f"{path}.{key}"
        if key == "name":
            continue
        if key == "image":
            runner_image(draft, value, where)
        elif key == "env":
            draft.add_env(where, value or [])
        elif key == "resources":
            draft.set("resources", {k: v for k, v in (value or {}).items() if k in ("requests", "limits")})
        elif key == "volumeMounts":
            _mounts(draft, value or [], where)
        elif key in ("command", "args"):
            draft.drop(where, "the operator starts the runner itself (register, then run one job); remove it")
        else:
            draft.runner[key] = value


def _mounts(draft: Draft, mounts: list[Mapping[str, Any]], path: str) -> None:
    for mount in mounts:
        target = str(mount.get("mountPath") or "")
        if target == ARC_WORK_DIR or target in naming.OPERATOR_MOUNT_PATHS:
            draft.drop(
                f"{path}[{mount.get('name')}]",
                f"the operator mounts the work volume at {naming.WORK_DIR} itself; "
                "spec.workVolume sets what it is",
            )
        else:
            draft.spec.setdefault("volumeMounts", []).append(dict(mount))


def _volumes(draft: Draft, volumes: list[Mapping[str, Any]], path: str) -> None:
    for volume in volumes:
        name = str(volume.get("name") or "")
        if name == naming.WORK_VOLUME:
            draft.set("workVolume", {k: v for k, v in volume.items() if k != "name"}, f"{path}[{name}]")
        elif name in naming.OPERATOR_VOLUMES or name in _ARC_DIND_VOLUMES:
            draft.drop(
                f"{path}[{name}]",
                "the operator makes this volume itself (containerMode: dind adds the Docker daemon's)",
            )
        else:
            draft.spec.setdefault("volumes", []).append(dict(volume))


def grace_period(draft: Draft, seconds: Any, path: str) -> None:
    """``terminationGracePeriodSeconds``, which here must outlast a busy runner's grace."""
    if isinstance(seconds, int) and seconds > _BUSY_GRACE_SECONDS:
        draft.set("terminationGracePeriodSeconds", seconds)
    else:
        draft.drop(
            path,
            f"here a pod's grace is spec.busyGracePeriod (default {api.DEFAULT_BUSY_GRACE_PERIOD}) plus "
            f"{api.BUSY_EXIT_MARGIN_SECONDS}s; set spec.busyGracePeriod to how long a job may finish",
        )


def pod_spec(draft: Draft, pod: Mapping[str, Any], path: str) -> None:
    """A core/v1 PodSpec: the runner container and the pool's own fields out, the rest passed on."""
    for key, value in pod.items():
        where = f"{path}.{key}"
        if key in _SPEC_FIELDS:
            draft.set(key, value, where)
        elif key == "volumes":
            _volumes(draft, value or [], where)
        elif key == "containers":
            for container in value or []:
                if container.get("name") == naming.RUNNER_CONTAINER:
                    runner_container(draft, container, f"{where}[runner]")
                else:
                    draft.pod.setdefault("containers", []).append(dict(container))
        elif key == "terminationGracePeriodSeconds":
            grace_period(draft, value, where)
        elif key == "restartPolicy":
            draft.drop(where, "the operator's: one job per pod; remove it")
        else:
            draft.pod[key] = value
            draft.origins[key] = where


def kubernetes_mode(draft: Draft, claim: Mapping[str, Any] | None) -> None:
    """``containerMode: kubernetes``, its work volume from a PersistentVolumeClaim spec (ARC's
    ``workVolumeClaimTemplate`` and ``kubernetesModeWorkVolumeClaim`` are both one)."""
    draft.set("containerMode", api.KUBERNETES_MODE)
    if not claim:
        return
    found = {
        "storageClassName": claim.get("storageClassName"),
        "accessModes": claim.get("accessModes"),
        "storage": ((claim.get("resources") or {}).get("requests") or {}).get("storage"),
    }
    draft.set("kubernetesMode", {"workVolumeClaim": {k: v for k, v in found.items() if v}})
