"""ARC's runner scale sets: a gha-runner-scale-set chart's values, or the AutoscalingRunnerSet
(actions.github.com) they render, whose spec holds the same keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from runnerpool.plugin.convert.pod import kubernetes_mode, pod_metadata, pod_spec
from runnerpool.plugin.convert.result import Converted, ConvertError, Draft

__all__ = ["AUTOSCALING_RUNNER_SET", "GROUP", "convert_scale_set", "is_values"]

GROUP = "actions.github.com"
AUTOSCALING_RUNNER_SET = "AutoscalingRunnerSet"
#: What a pool is called when the values do not name the scale set (Helm's release name does).
DEFAULT_NAME = "arc-runner-set"
#: Most runners a pool gets when the values set no maxRunners (ARC's "no limit").
DEFAULT_MAX = 10
_SIGNATURE = ("githubConfigUrl", "githubConfigSecret")
#: Keys for ARC's listener and controller, which have no counterpart: the operator itself
#: receives webhook deliveries and polls.
_LISTENER = "the operator reads demand itself (webhook deliveries, polling): no listener; remove it"
_NO_COUNTERPART = {
    "listenerTemplate": _LISTENER,
    "listenerMetrics": _LISTENER,
    "controllerServiceAccount": _LISTENER,
    "githubServerTLS": "no RunnerPool field for a private CA yet: mount the bundle with spec.volumes and "
    "spec.volumeMounts and point NODE_EXTRA_CA_CERTS (spec.env) at it",
    "proxy": "no RunnerPool field for a proxy yet: set HTTPS_PROXY, HTTP_PROXY and NO_PROXY in spec.env",
    "namespaceOverride": "the pool lives where you apply it: kubectl apply -n NAMESPACE",
}


def is_values(doc: Mapping[str, Any]) -> bool:
    """A scale set's values: no kind, and the keys only those values have."""
    return "kind" not in doc and any(key in doc for key in _SIGNATURE)


def _scope(draft: Draft, url: str) -> None:
    """``https://github.com/org[/repo]`` or ``.../enterprises/slug``; another host is a GHES."""
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    if not parts.hostname or not 1 <= len(path) <= 2:
        raise ConvertError(
            f"{draft.source}: githubConfigUrl {url!r} names no enterprise, organization or repository "
            "(https://github.com/ORG, https://github.com/ORG/REPO, https://github.com/enterprises/SLUG)"
        )
    if path[0] == "enterprises" and len(path) == 2:
        draft.set("enterprise", path[1])
    elif len(path) == 2:
        draft.set("repository", "/".join(path))
    else:
        draft.set("organization", path[0])
    if parts.hostname not in ("github.com", "www.github.com"):
        draft.set("githubApiUrl", f"{parts.scheme}://{parts.netloc}/api/v3")


def _secret(draft: Draft, secret: Any) -> None:
    if isinstance(secret, str):
        draft.set("credentialSecretName", secret)
    elif secret:
        draft.drop(
            "githubConfigSecret",
            "credentials written into the values: put them in a Secret (keys token, or app-id, "
            "app-installation-id and app-private-key) and name it in spec.credentialSecretName",
        )


def _scaling(draft: Draft, values: Mapping[str, Any]) -> None:
    low = int(values.get("minRunners") or 0)
    high = values.get("maxRunners")
    if high is None:
        high = max(low, DEFAULT_MAX)
        draft.drop("maxRunners", f"unset (no limit in ARC); set to {high}: raise it to your ceiling")
    draft.spec["autoscaling"] = {"minReplicas": low, "maxReplicas": max(int(high), 1)}


def _container_mode(draft: Draft, mode: Mapping[str, Any]) -> None:
    kind = mode.get("type")
    if kind == "dind":
        draft.set("containerMode", "dind")
    elif kind in ("kubernetes", "kubernetes-novolume"):
        kubernetes_mode(draft, mode.get("kubernetesModeWorkVolumeClaim") if kind == "kubernetes" else None)
        if mode.get("kubernetesModeServiceAccount"):
            draft.drop(
                "containerMode.kubernetesModeServiceAccount",
                "the operator makes the runners' ServiceAccount and Role (docs/kubernetes-mode.md)",
            )
    elif kind:
        draft.drop("containerMode.type", f"{kind!r}: this pool knows dind and kubernetes")


_HANDLED = frozenset(
    {
        "githubConfigUrl", "githubConfigSecret", "runnerScaleSetName", "runnerGroup", "minRunners",
        "maxRunners", "template", "containerMode", "scaleSetLabels",
    }
)  # fmt: skip


def _labels(draft: Draft, values: Mapping[str, Any], name: str | None) -> None:
    """Workflows ask a scale set by its name (``runs-on: NAME``): it stays a label of the pool."""
    labels = [*([name] if name else []), *(values.get("scaleSetLabels") or [])]
    draft.set("labels", list(dict.fromkeys(str(label) for label in labels)))


def convert_scale_set(
    values: Mapping[str, Any], name: str | None, namespace: str | None, source: str
) -> Converted:
    """The values (or an AutoscalingRunnerSet's spec, named by its metadata)."""
    set_name = values.get("runnerScaleSetName") or name
    draft = Draft(source, str(set_name or DEFAULT_NAME), namespace)
    if not set_name:
        draft.drop(
            "runnerScaleSetName", f"unset (Helm's release name names the set); the pool is {DEFAULT_NAME}"
        )
    if not values.get("githubConfigUrl"):
        raise ConvertError(
            f"{source}: no githubConfigUrl: which organization or repository do the runners serve?"
        )
    _scope(draft, str(values["githubConfigUrl"]))
    _secret(draft, values.get("githubConfigSecret"))
    group = values.get("runnerGroup")
    if group and group != "default" and not draft.spec.get("repository"):
        draft.set("runnerGroup", group)
    _scaling(draft, values)
    _container_mode(draft, values.get("containerMode") or {})
    _labels(draft, values, set_name)
    template = values.get("template") or {}
    pod_metadata(draft, template.get("metadata") or {}, "template.metadata")
    pod_spec(draft, template.get("spec") or {}, "template.spec")
    for key in sorted(values.keys() - _HANDLED):
        draft.drop(key, _NO_COUNTERPART.get(key, "no RunnerPool counterpart"))
    return draft.result()
