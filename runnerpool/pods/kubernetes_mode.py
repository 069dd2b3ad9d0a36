"""The runner pod of ``spec.containerMode: kubernetes``: the runner container hooks' side of it.

In this mode the runner never runs a job's code itself: ``ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER``
refuses jobs without a ``container:``, and the hooks (``ACTIONS_RUNNER_CONTAINER_HOOKS``, the
actions/runner-container-hooks k8s flavour shipped in the runner image) create the job's pod
through the Kubernetes API and exec each step in it.  What the hooks document they need from
the runner pod, and this module gives it:

* ``ACTIONS_RUNNER_POD_NAME``: they name the job pod after it and pin it to the runner's node;
* the ServiceAccount the operator makes for the pool (``runnerpool.hook_access``), with its
  token mounted: the only runner pods that get API credentials;
* the work volume: an ephemeral PersistentVolumeClaim (``<pod>-work``, which the job pod mounts
  too: ``ACTIONS_RUNNER_CLAIM_NAME``) with ``kubernetesMode.workVolumeClaim``, else an emptyDir
  and the k8s-novolume hooks, which copy the workspace into the job pod over exec.

A pure function of the pool, applied last by ``runnerpool.pods.template.pod_spec``, so the
template hash covers it like everything else in the pod.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, children, naming

__all__ = ["hook_path", "shape"]


def hook_path(mode: api.KubernetesMode) -> str:
    """The hooks' index.js: the pool's own, or the image's for the kind of work volume."""
    if mode.hook_path is not None:
        return mode.hook_path
    return api.KUBERNETES_HOOK if mode.work_volume_claim is not None else api.KUBERNETES_NOVOLUME_HOOK


def shape(pool: api.RunnerPool, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` (a runner pod spec) as kubernetes mode wants it; other pools' pods unchanged."""
    if pool.spec.container_mode != api.KUBERNETES_MODE:
        return pod
    mode = pool.spec.kubernetes_mode or api.KubernetesMode()
    shaped = {**pod, "containers": [_runner(pool, c, mode) for c in pod["containers"]]}
    shaped["volumes"] = [
        _work_volume(pool, mode.work_volume_claim) if v["name"] == naming.WORK_VOLUME else v
        for v in pod["volumes"]
    ]
    shaped["serviceAccountName"] = naming.runner_account_name(pool.name)
    # The hooks talk to the API server with this token; nothing else in the pod needs it.
    shaped["automountServiceAccountToken"] = True
    return shaped


def jobs_in_pods_of_their_own(pool: api.RunnerPool, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` (a runner pod spec, the pool's template merged in) with its runner container's
    ``ACTIONS_RUNNER_REQUIRE_JOB_CONTAINER`` "true" in kubernetes mode, whatever ``spec.env`` or
    the template set: a job without ``container:`` would otherwise run in the runner container,
    next to the runner account's token (it reads the namespace's Secrets, the pool's credential
    among them). Enforced here rather than refused by the API server: a rule added to the CRD
    would make pools that already set it unreadable, and their deletion would never end."""
    if pool.spec.container_mode != api.KUBERNETES_MODE:
        return pod
    required = {"name": naming.REQUIRE_JOB_CONTAINER_ENV, "value": "true"}

    def enforced(container: dict[str, Any]) -> dict[str, Any]:
        if container["name"] != naming.RUNNER_CONTAINER:
            return container
        env, seen = [], False  # in place: a pool that set nothing keeps its template hash
        for entry in container.get("env") or []:
            if entry.get("name") != naming.REQUIRE_JOB_CONTAINER_ENV:
                env.append(entry)
            elif not seen:
                env.append(required)
                seen = True
        return {**container, "env": env if seen else [*env, required]}

    return {**pod, "containers": [enforced(c) for c in pod["containers"]]}


def _runner(pool: api.RunnerPool, container: dict[str, Any], mode: api.KubernetesMode) -> dict[str, Any]:
    if container["name"] != naming.RUNNER_CONTAINER:
        return container
    env: list[dict[str, Any]] = [
        {"name": "ACTIONS_RUNNER_CONTAINER_HOOKS", "value": hook_path(mode)},
        {"name": naming.REQUIRE_JOB_CONTAINER_ENV, "value": "true"},
        {"name": "ACTIONS_RUNNER_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if mode.work_volume_claim is not None:
        # The claim the ephemeral volume makes, "<pod>-<volume>", which the job pods mount.
        claim = f"$(ACTIONS_RUNNER_POD_NAME)-{naming.WORK_VOLUME}"
        env.append({"name": "ACTIONS_RUNNER_CLAIM_NAME", "value": claim})
    # What the pool sets itself in spec.env stays the pool's (a hooks setting it overrides).
    own = {e.name for e in pool.spec.env}
    return {**container, "env": [*(container.get("env") or []), *(e for e in env if e["name"] not in own)]}


def _work_volume(pool: api.RunnerPool, claim: api.WorkVolumeClaim | None) -> dict[str, Any]:
    if claim is None:
        return {"name": naming.WORK_VOLUME, "emptyDir": {}}
    spec: dict[str, Any] = {
        "accessModes": list(claim.access_modes),
        "resources": {"requests": {"storage": str(claim.storage)}},
    }
    if claim.storage_class_name is not None:
        spec["storageClassName"] = claim.storage_class_name
    return {
        "name": naming.WORK_VOLUME,
        "ephemeral": {
            "volumeClaimTemplate": {"metadata": {"labels": children.selector_labels(pool)}, "spec": spec}
        },
    }
