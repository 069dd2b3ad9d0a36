"""ARC's runner scale sets: a gha-runner-scale-set chart's values, or the AutoscalingRunnerSet
(actions.github.com) they render, whose spec holds the same keys.

An ARC scale set becomes a scale-set pool (``spec.scaleSet``, docs/scale-sets.md): the same
kind of thing on GitHub, under the same name, so workflows keep their ``runs-on``. Its
``githubServerTLS`` and ``proxy`` have the same shape as the pool's fields of those names."""

from __future__ import annotations

import re
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
_LISTENER = "the operator's leader holds the scale set's message session itself: no listener pod; remove it"
_NO_COUNTERPART = {
    "listenerTemplate": _LISTENER,
    "listenerMetrics": _LISTENER,
    "controllerServiceAccount": _LISTENER,
    "namespaceOverride": "the pool lives where you apply it: kubectl apply -n NAMESPACE",
}
#: A scale set's name as GitHub takes it (``runnerpool.api.SCALE_SET_NAME``, not imported: the
#: converter is pure text in, manifests out, and the API module is the operator's).
_SCALE_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: The keys of ARC's githubServerTLS and proxy that the pool's fields of the same names take.
_TLS_SOURCES = ("configMapKeyRef", "secretKeyRef")
_PROXY_KEYS = ("http", "https", "noProxy")


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
        "maxRunners", "template", "containerMode", "scaleSetLabels", "githubServerTLS", "proxy",
    }
)  # fmt: skip


def _scale_set(draft: Draft, values: Mapping[str, Any], name: str) -> None:
    """Workflows ask a scale set by its name (``runs-on: NAME``): the pool is a scale set of that
    name, with ``scaleSetLabels`` as its extra labels. A name GitHub would not take as a scale
    set's stays a label of a label pool."""
    extra = [str(label) for label in values.get("scaleSetLabels") or []]
    if _SCALE_SET_NAME.fullmatch(name):
        draft.set("scaleSet", {"name": name})
        draft.set("labels", list(dict.fromkeys(extra)))
        return
    draft.set("labels", list(dict.fromkeys([name, *extra])))
    draft.drop(
        "runnerScaleSetName",
        f"{name!r} is no scale set name (letters, digits, '.', '_', '-'): the pool keeps it as a label "
        "and follows demand from webhook deliveries and polling (docs/demand.md)",
    )


def _connection(draft: Draft, values: Mapping[str, Any]) -> None:
    """``githubServerTLS`` and ``proxy``: the pool's fields have ARC's shape; unknown keys stay."""
    tls = values.get("githubServerTLS") or {}
    source = tls.get("certificateFrom") or {}
    refs = {key: dict(source[key]) for key in _TLS_SOURCES if isinstance(source.get(key), Mapping)}
    if refs:
        draft.set("githubServerTLS", {"certificateFrom": refs})
    elif tls:
        draft.drop(
            "githubServerTLS", "no certificateFrom.configMapKeyRef or secretKeyRef: name the CA bundle"
        )
    proxy = values.get("proxy") or {}
    draft.set("proxy", {key: proxy[key] for key in _PROXY_KEYS if proxy.get(key)})
    for key in sorted(set(proxy) - set(_PROXY_KEYS)):
        draft.drop(f"proxy.{key}", "no RunnerPool counterpart")


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
    _scale_set(draft, values, str(set_name or DEFAULT_NAME))
    _connection(draft, values)
    template = values.get("template") or {}
    pod_metadata(draft, template.get("metadata") or {}, "template.metadata")
    pod_spec(draft, template.get("spec") or {}, "template.spec")
    for key in sorted(values.keys() - _HANDLED):
        draft.drop(key, _NO_COUNTERPART.get(key, "no RunnerPool counterpart"))
    return draft.result()
