"""A pool's ``spec.template`` put onto the operator's runner pod.

The rules (docs/pod-template.md shows them to users):

* The template comes last, over the pod that the operator and the pool's fixed fields
  (runnerImage, env, resources, nodeSelector, ...) make: where both set a value, the
  template's wins.
* Objects merge key by key, all the way down (nodeSelector, securityContext, resources, ...).
* Lists of keyed items merge item by item, as a strategic merge patch (``kubectl patch``)
  merges them: containers, initContainers, ephemeralContainers, volumes, env,
  imagePullSecrets, resourceClaims and schedulingGates by name, volumeMounts by mountPath,
  ports by containerPort, hostAliases by ip, topologySpreadConstraints by topologyKey.  An
  item whose key the pod has is merged into it; a new one is added after the pod's.
* Any other list the template sets replaces the pod's: tolerations, command, args, envFrom,
  capabilities' drop and add.  (No ``$patch`` directives: a template only adds and changes.)
* Of the metadata only labels and annotations are taken, added to the operator's.
* The operator's own parts never change: the labels it selects and tracks pods by, the busy
  marks, restartPolicy, terminationGracePeriodSeconds, the token and work volumes, the runner
  container's ``RUNNER_*``/POD_NAME/POD_NAMESPACE/GITHUB_URL env and its mounts at the token and
  work paths.  The CRD's rules refuse a template that sets any of them (``runnerpool.api``); one
  that got past them anyway (stored before a rule existed) has them dropped here, never applied.
* A template that names a serviceAccountName gets that account's token mounted unless it sets
  automountServiceAccountToken itself: the operator turns the token off only for pods that
  name no account.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from runnerpool import api, naming

__all__ = ["MERGE_KEYS", "apply_template", "merge", "merge_pod"]

#: The key that identifies an item of a list, by the list's field name (core/v1's patchMergeKey).
MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "claims": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}

_OPERATOR_SPEC_FIELDS = ("restartPolicy", "terminationGracePeriodSeconds")
_OPERATOR_VOLUMES = naming.OPERATOR_VOLUMES
_OPERATOR_MOUNT_PATHS = naming.OPERATOR_MOUNT_PATHS


def apply_template(pod: Mapping[str, Any], template: api.PodTemplate | None) -> dict[str, Any]:
    """``pod`` (metadata and spec of the operator's runner pod) with the pool's template on it."""
    if template is None:
        return dict(pod)
    return merge_pod(pod, template.model_dump(by_alias=True, exclude_none=True))


def merge_pod(pod: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` with a template (as a dict, validated or not) on it."""
    return {
        "metadata": _metadata(pod["metadata"], over.get("metadata") or {}),
        "spec": _spec(pod["spec"], over.get("spec") or {}),
    }


def merge(base: Any, over: Any, field: str | None = None) -> Any:
    """``over`` merged onto ``base`` (neither changed); ``field`` names the list being merged."""
    if isinstance(base, Mapping) and isinstance(over, Mapping):
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(over, list) and field is not None and field in MERGE_KEYS:
        return _merge_items(base, over, MERGE_KEYS[field])
    return copy.deepcopy(over)


def _merge_items(base: list[Any], over: list[Any], key: str) -> list[Any]:
    out = list(base)
    for item in over:
        at = _position(out, key, item[key]) if isinstance(item, Mapping) and key in item else None
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = merge(out[at], item)
    return out


def _position(items: list[Any], key: str, value: Any) -> int | None:
    """Where the first item whose ``key`` is ``value`` is (the pod's own items are unique)."""
    return next(
        (i for i, mine in enumerate(items) if isinstance(mine, Mapping) and mine.get(key) == value), None
    )


def _metadata(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    labels = {k: v for k, v in (over.get("labels") or {}).items() if not api.operator_label(k)}
    annotations = {k: v for k, v in (over.get("annotations") or {}).items() if not api.operator_annotation(k)}
    if labels:
        out["labels"] = {**labels, **base.get("labels", {})}
    if annotations:
        out["annotations"] = {**base.get("annotations", {}), **annotations}
    return out


def _spec(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    allowed = _without_operator_parts(over)
    merged: dict[str, Any] = merge(base, allowed)
    if "serviceAccountName" in allowed and "automountServiceAccountToken" not in allowed:
        merged.pop("automountServiceAccountToken", None)
    return merged


def _without_operator_parts(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k not in _OPERATOR_SPEC_FIELDS}
    if "volumes" in out:
        out["volumes"] = [v for v in out["volumes"] if v.get("name") not in _OPERATOR_VOLUMES]
    if "containers" in out:
        out["containers"] = [
            _runner_without_operator_parts(c) if c.get("name") == naming.RUNNER_CONTAINER else c
            for c in out["containers"]
        ]
    return out


def _runner_without_operator_parts(container: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(container)
    if "env" in out:
        out["env"] = [e for e in out["env"] if not api.operator_env(str(e.get("name")))]
    if "volumeMounts" in out:
        out["volumeMounts"] = [
            m for m in out["volumeMounts"] if m.get("mountPath") not in _OPERATOR_MOUNT_PATHS
        ]
    return out
