"""meows' RunnerPool (meows.cybozu.com): the closest source, field names and all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerpool.plugin.convert.pod import pod_metadata, pod_spec, runner_container
from runnerpool.plugin.convert.result import Converted, Draft

__all__ = ["GROUP", "MEOWS_CREDENTIAL_SECRET", "convert_meows"]

GROUP = "meows.cybozu.com"
#: The Secret meows reads when a pool names none.
MEOWS_CREDENTIAL_SECRET = "meows-github-cred"
_NO_COUNTERPART = {
    "setupCommand": "run it in an init container (spec.template.spec.initContainers) "
    "or bake it into spec.runnerImage",
    "notification": "no Slack notifications here: a job's result is on GitHub, "
    "the pool's Events say why a pod went",
    "denyDisruption": "eviction never stops a busy runner here (docs/busy-runners.md); idle runners may go, "
    "which a drain wants",
}
_HANDLED = frozenset(
    {"repository", "organization", "credentialSecretName", "replicas", "maxRunnerPods", "workVolume",
     "recreateDeadline", "template", "labels"}
)  # fmt: skip


def _scaling(draft: Draft, spec: Mapping[str, Any]) -> None:
    """meows keeps ``replicas`` idle runners, within ``maxRunnerPods`` pods when that is set."""
    idle = int(spec.get("replicas", 1))
    most = int(spec.get("maxRunnerPods") or 0)
    if most:
        draft.spec["autoscaling"] = {"minReplicas": 0, "maxReplicas": most, "minIdle": idle}
    else:
        draft.spec["replicas"] = idle


def _template(draft: Draft, template: Mapping[str, Any]) -> None:
    pod_metadata(draft, template.get("metadata") or {}, "spec.template.metadata")
    runner_container(draft, template.get("runnerContainer") or {}, "spec.template.runnerContainer")
    pod = {k: v for k, v in template.items() if k not in ("metadata", "runnerContainer")}
    if pod.get("serviceAccountName") == "default":
        del pod["serviceAccountName"]
    pod_spec(draft, pod, "spec.template")


def convert_meows(pool: Mapping[str, Any]) -> Converted:
    metadata = pool.get("metadata") or {}
    name = str(metadata.get("name") or "")
    draft = Draft(f"RunnerPool/{name} ({GROUP})", name, metadata.get("namespace"))
    spec = pool.get("spec") or {}
    draft.set("repository", spec.get("repository") or None)
    draft.set("organization", spec.get("organization") or None)
    draft.set("credentialSecretName", spec.get("credentialSecretName") or MEOWS_CREDENTIAL_SECRET)
    _scaling(draft, spec)
    draft.set("labels", spec.get("labels"))
    draft.set("workVolume", spec.get("workVolume"))
    draft.set("recreateDeadline", spec.get("recreateDeadline") or "24h")
    _template(draft, spec.get("template") or {})
    for key in sorted(spec.keys() - _HANDLED):
        if spec[key] or key not in _NO_COUNTERPART:
            draft.drop(f"spec.{key}", _NO_COUNTERPART.get(key, "no RunnerPool counterpart"))
    return draft.result()
