"""From YAML text to RunnerPool manifests: which document is which source, each pool
validated by the operator's own models, and the YAML that is printed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic
import yaml  # PyYAML: the kubernetes client's own dependency, so the operator's runtime has it

from runnerpool import api
from runnerpool.plugin.convert import meows, scale_set, summerwind
from runnerpool.plugin.convert.result import Converted, ConvertError, Unmapped

__all__ = ["convert_text", "render"]


def _load(text: str) -> list[Mapping[str, Any]]:
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConvertError(f"the input is not YAML: {getattr(err, 'problem', None) or err}{where}") from None
    if not docs:
        raise ConvertError(
            "the input is empty: give a RunnerDeployment, scale set values or a meows RunnerPool"
        )
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ConvertError(f"document {i + 1} is not a mapping (a Kubernetes object or Helm values)")
    # ``kubectl get ... -o yaml`` of several objects prints one List of them.
    return [item for doc in docs for item in (doc.get("items") or [] if doc.get("kind") == "List" else [doc])]


def _group(doc: Mapping[str, Any]) -> str:
    return str(doc.get("apiVersion") or "").split("/")[0]


def _kind_name(doc: Mapping[str, Any]) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def _autoscaler_of(doc: Mapping[str, Any], autoscalers: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    name = (doc.get("metadata") or {}).get("name")
    for hra in autoscalers:
        target = (hra.get("spec") or {}).get("scaleTargetRef") or {}
        if (
            target.get("name") == name
            and target.get("kind", summerwind.RUNNER_DEPLOYMENT) == summerwind.RUNNER_DEPLOYMENT
        ):
            return hra
    return None


def _one(doc: Mapping[str, Any], autoscalers: list[Mapping[str, Any]]) -> Converted | None:
    """The pool a document makes, or None for one that is no runner definition."""
    group, kind = _group(doc), doc.get("kind")
    metadata = doc.get("metadata") or {}
    if group == summerwind.GROUP and kind == summerwind.RUNNER_DEPLOYMENT:
        return summerwind.convert_runner_deployment(doc, _autoscaler_of(doc, autoscalers))
    if group == meows.GROUP and kind == api.KIND:
        return meows.convert_meows(doc)
    if group == scale_set.GROUP and kind == scale_set.AUTOSCALING_RUNNER_SET:
        source = _kind_name(doc)
        return scale_set.convert_scale_set(
            doc.get("spec") or {}, metadata.get("name"), metadata.get("namespace"), source
        )
    if scale_set.is_values(doc):
        return scale_set.convert_scale_set(doc, None, None, "gha-runner-scale-set values")
    return None


def _why_left_out(doc: Mapping[str, Any]) -> str:
    if _group(doc) == summerwind.GROUP:
        return (
            "not converted (RunnerDeployments are): move its runner fields into a RunnerPool "
            "by hand, as docs/migrating.md maps a RunnerDeployment's"
        )
    return "not a runner definition; left out"


def _validated(converted: Converted) -> Converted:
    """The operator's models have the last word: a pool they refuse is never printed."""
    try:
        api.RunnerPool.model_validate(converted.manifest)
    except pydantic.ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in err.errors()
        )
        raise ConvertError(f"{converted.source}: the converted pool would be refused ({problems})") from None
    name = converted.manifest["metadata"]["name"]
    if not name:
        raise ConvertError(f"{converted.source}: no metadata.name")
    return converted


def convert_text(text: str) -> tuple[list[Converted], list[Unmapped]]:
    """Every pool the documents make, and the documents that made none (with why)."""
    docs = _load(text)
    autoscalers = [d for d in docs if _group(d) == summerwind.GROUP and d.get("kind") == summerwind.HRA]
    pools: list[Converted] = []
    skipped: list[Unmapped] = []
    used: set[int] = set()
    for doc in docs:
        if any(doc is hra for hra in autoscalers):
            continue
        try:
            converted = _one(doc, autoscalers)
        except ConvertError:
            raise
        except (TypeError, ValueError, AttributeError) as err:
            raise ConvertError(f"{_kind_name(doc)}: a field has an unexpected shape ({err})") from None
        if converted is None:
            skipped.append(Unmapped(_kind_name(doc), _why_left_out(doc)))
            continue
        hra = _autoscaler_of(doc, autoscalers) if doc.get("kind") == summerwind.RUNNER_DEPLOYMENT else None
        if hra is not None:
            used.add(id(hra))
        pools.append(_validated(converted))
    for hra in autoscalers:
        if id(hra) not in used:
            target = (hra.get("spec") or {}).get("scaleTargetRef") or {}
            skipped.append(
                Unmapped(
                    _kind_name(hra),
                    f"its target {target.get('kind', summerwind.RUNNER_DEPLOYMENT)}/{target.get('name')} "
                    "is not in the input; convert them together",
                )
            )
    if not pools:
        raise ConvertError(
            "no RunnerDeployment (actions.summerwind.dev), gha-runner-scale-set values, "
            "AutoscalingRunnerSet or meows RunnerPool in the input"
        )
    return pools, skipped


def render(pools: list[Converted], namespace: str | None) -> str:
    """The pools as YAML documents, in the order of the input (``-n`` sets their namespace)."""
    manifests = []
    for converted in pools:
        manifest = converted.manifest
        if namespace:
            manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
        manifests.append(manifest)
    return yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False)
