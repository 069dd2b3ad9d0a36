"""ARC's summerwind API (actions.summerwind.dev): a RunnerDeployment and the
HorizontalRunnerAutoscaler that scales it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runnerpool.plugin.convert.pod import (
    grace_period,
    kubernetes_mode,
    pod_metadata,
    pod_spec,
    runner_container,
    runner_image,
)
from runnerpool.plugin.convert.result import Converted, Draft

__all__ = ["GROUP", "HRA", "RUNNER_DEPLOYMENT", "convert_runner_deployment"]

GROUP = "actions.summerwind.dev"
RUNNER_DEPLOYMENT = "RunnerDeployment"
HRA = "HorizontalRunnerAutoscaler"

_T = "spec.template.spec"
#: The name of ARC's Docker sidecar, which a RunnerDeployment's containers may override.
_ARC_DOCKER = "docker"
_DAEMON = "no field for it: give the daemon a daemon.json in an image of your own (spec.dindImage)"
#: RunnerConfig and RunnerPodSpec fields that are no pod field, each with what to do instead.
_NO_COUNTERPART = {
    "workDir": "the runner works in its work volume; spec.workVolume sets what that is",
    "dockerMTU": _DAEMON,
    "dockerRegistryMirror": _DAEMON,
    "dockerVarRunVolumeSizeLimit": "the Docker daemon's socket volume is the operator's",
    "podTemplateName": "put the PodTemplate's fields into spec.template",
    "ephemeralContainers": "ephemeral containers are added to running pods (kubectl debug), not templates",
}


def _scope(draft: Draft, spec: Mapping[str, Any]) -> None:
    for key in ("enterprise", "organization", "repository"):
        draft.set(key, spec.get(key) or None)
    group = spec.get("group")
    if group and spec.get("repository"):
        draft.drop(
            f"{_T}.group", "a repository's runners belong to no runner group; register with the organization"
        )
    else:
        draft.set("runnerGroup", group or None)


def _docker(draft: Draft, spec: Mapping[str, Any]) -> None:
    """ARC runs a Docker sidecar unless ``dockerEnabled: false``; here that is containerMode dind."""
    mode = spec.get("containerMode")
    if mode == "kubernetes":
        kubernetes_mode(draft, spec.get("workVolumeClaimTemplate"))
        return
    if spec.get("dockerdWithinRunnerContainer"):
        draft.drop(
            f"{_T}.dockerdWithinRunnerContainer",
            "the Docker daemon runs as a sidecar here (containerMode: dind); "
            "use a runner image without dockerd",
        )
    elif spec.get("dockerEnabled") is False:
        return
    draft.set("containerMode", "dind")
    daemon = {
        "env": spec.get("dockerEnv"),
        "volumeMounts": spec.get("dockerVolumeMounts"),
        "resources": spec.get("dockerdContainerResources"),
    }
    daemon = {k: v for k, v in daemon.items() if v}
    if daemon:
        draft.pod.setdefault("initContainers", []).append({"name": "dind", **daemon})


def _work_volume(draft: Draft, spec: Mapping[str, Any]) -> None:
    """``volumeSizeLimit``/``volumeStorageMedium`` (an emptyDir) or a claim template (ephemeral)."""
    claim = spec.get("workVolumeClaimTemplate")
    if claim and spec.get("containerMode") != "kubernetes":
        draft.set("workVolume", {"ephemeral": {"volumeClaimTemplate": {"spec": dict(claim)}}})
        return
    empty = {"sizeLimit": spec.get("volumeSizeLimit"), "medium": spec.get("volumeStorageMedium")}
    draft.set(
        "workVolume",
        {"emptyDir": {k: v for k, v in empty.items() if v}} if any(empty.values()) else None,
        f"{_T}.volumeSizeLimit",
    )


_HANDLED = frozenset(
    {
        "enterprise", "organization", "repository", "group", "labels", "ephemeral", "image",
        "containerMode", "workVolumeClaimTemplate", "dockerdWithinRunnerContainer", "dockerEnabled",
        "dockerEnv", "dockerVolumeMounts", "dockerdContainerResources", "volumeSizeLimit",
        "volumeStorageMedium", "githubAPICredentialsFrom", "containers", "sidecarContainers",
        "terminationGracePeriodSeconds", "env", "resources", "volumeMounts", "envFrom", "imagePullPolicy",
    }
)  # fmt: skip


def _runner_spec(draft: Draft, spec: Mapping[str, Any]) -> None:
    _scope(draft, spec)
    draft.set("labels", spec.get("labels"))
    if spec.get("ephemeral") is False:
        draft.drop(f"{_T}.ephemeral", "runners here are ephemeral: one job per pod, then a fresh pod")
    if spec.get("image"):
        runner_image(draft, spec["image"], f"{_T}.image")
    _docker(draft, spec)
    _work_volume(draft, spec)
    secret = (spec.get("githubAPICredentialsFrom") or {}).get("secretRef") or {}
    draft.set("credentialSecretName", secret.get("name") or None)
    runner = {
        k: spec[k] for k in ("env", "resources", "volumeMounts", "envFrom", "imagePullPolicy") if k in spec
    }
    runner_container(draft, runner, _T)
    containers = [*(spec.get("containers") or []), *(spec.get("sidecarContainers") or [])]
    for container in [c for c in containers if c.get("name") == _ARC_DOCKER]:
        containers.remove(container)
        draft.drop(
            f"{_T}.containers[{_ARC_DOCKER}]",
            "ARC's Docker sidecar; here the daemon is the dind init container of containerMode: dind: "
            "set its fields in spec.template.spec.initContainers[dind]",
        )
    pod_spec(draft, {"containers": containers} if containers else {}, _T)
    if "terminationGracePeriodSeconds" in spec:
        grace_period(draft, spec["terminationGracePeriodSeconds"], f"{_T}.terminationGracePeriodSeconds")
    rest = {k: v for k, v in spec.items() if k not in _HANDLED and k not in _NO_COUNTERPART}
    pod_spec(draft, rest, _T)
    for key in sorted(_NO_COUNTERPART.keys() & spec.keys()):
        draft.drop(f"{_T}.{key}", _NO_COUNTERPART[key])


def _autoscaling(draft: Draft, hra: Mapping[str, Any]) -> None:
    """HRA replicas and triggers: webhook ``workflowJob`` and ``TotalNumberOfQueuedAndInProgressWorkflowRuns``
    are what the pool does anyway (busy + queued jobs, from deliveries and polling)."""
    name = (hra.get("metadata") or {}).get("name")
    where = f"{HRA}/{name}.spec"
    spec = hra.get("spec") or {}
    low = int(spec.get("minReplicas", 1))
    high = spec.get("maxReplicas")
    if high is None:
        high = max(low, 1)
        draft.drop(
            f"{where}.maxReplicas", f"unset (no ceiling in ARC); set to {high}: raise it to your ceiling"
        )
    autoscaling: dict[str, Any] = {"minReplicas": low, "maxReplicas": int(high)}
    if "scaleDownDelaySecondsAfterScaleOut" in spec:
        autoscaling["scaleDownDelay"] = f"{int(spec['scaleDownDelaySecondsAfterScaleOut'])}s"
    for i, metric in enumerate(spec.get("metrics") or []):
        kind = metric.get("type")
        if kind == "TotalNumberOfQueuedAndInProgressWorkflowRuns":
            names = [str(n).split("/")[-1] for n in metric.get("repositoryNames") or []]
            if draft.spec.get("organization") and names:
                autoscaling["repositories"] = names
        else:
            draft.drop(
                f"{where}.metrics[{i}]",
                f"{kind}: the pool runs as many runners as busy plus queued jobs; "
                "spec.autoscaling.minIdle keeps spare idle runners",
            )
    for i, trigger in enumerate(spec.get("scaleUpTriggers") or []):
        events = set((trigger.get("githubEvent") or {}).keys())
        if events - {"workflowJob"}:
            draft.drop(
                f"{where}.scaleUpTriggers[{i}]",
                f"{', '.join(sorted(events - {'workflowJob'}))}: the pool follows workflow_job deliveries "
                "only (docs/demand.md)",
            )
    for key in ("capacityReservations", "scheduledOverrides"):
        if spec.get(key):
            draft.drop(f"{where}.{key}", "no counterpart; change spec.autoscaling.minReplicas when needed")
    draft.spec["autoscaling"] = autoscaling


def convert_runner_deployment(deployment: Mapping[str, Any], hra: Mapping[str, Any] | None) -> Converted:
    metadata = deployment.get("metadata") or {}
    name = str(metadata.get("name") or "")
    draft = Draft(f"{RUNNER_DEPLOYMENT}/{name}", name, metadata.get("namespace"))
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    _runner_spec(draft, template.get("spec") or {})
    pod_metadata(draft, template.get("metadata") or {}, "spec.template.metadata")
    if hra is not None:
        _autoscaling(draft, hra)
    elif "replicas" in spec:
        draft.spec["replicas"] = spec["replicas"]
    if spec.get("effectiveTime"):
        draft.drop("spec.effectiveTime", "ARC's webhook scaling clock; the pool needs none")
    return draft.result()
