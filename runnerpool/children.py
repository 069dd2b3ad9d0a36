"""The in-cluster objects a RunnerPool owns, as the operator wants them to be.

Pure functions of the pool: the reconciler compares these with the live objects
(see ``drift.contains``) and writes only what differs.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api
from runnerpool.domain import resolve_api_url, web_url_for

TOKEN_MOUNT_DIR = "/runner-token"
WORK_DIR = "/runner/_work"
RUNNER_CONTAINER = "runner"
_TOKEN_VOLUME = "runner-token"
_WORK_VOLUME = "work"
#: The group of the runner image's user ("runner", 1001:1001 in actions-runner). As the pod's
#: fsGroup it owns the token volume: a Secret file with mode 0440 is otherwise root:root
#: and the runner gets "Permission denied".
RUNNER_GID = 1001


def pool_labels(pool: api.RunnerPool) -> dict[str, str]:
    return {api.MANAGED_BY_LABEL: api.MANAGED_BY_VALUE, api.POOL_LABEL: pool.name}


def selector(pool: api.RunnerPool) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(pool_labels(pool).items()))


def owner_reference(pool: api.RunnerPool) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": pool.name,
        "uid": pool.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(pool: api.RunnerPool, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": pool.namespace,
        "labels": pool_labels(pool),
        "ownerReferences": [owner_reference(pool)],
    }


def token_secret(pool: api.RunnerPool) -> dict[str, Any]:
    """An empty Secret: the secret updater fills it, the reconciler never writes a token."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(pool, api.token_secret_name(pool.name)),
    }


def api_url(pool: api.RunnerPool, default: str) -> str:
    return resolve_api_url(pool.spec.github_api_url, default)


def runner_labels(pool: api.RunnerPool) -> list[str]:
    """The pool's own label first, so its runners can always be found on GitHub."""
    own = api.pool_runner_label(pool.namespace, pool.name)
    return [own, *(label for label in pool.spec.labels if label != own)]


def _env(pool: api.RunnerPool, github_api_url: str) -> list[dict[str, Any]]:
    scope: dict[str, Any] = (
        {"name": "RUNNER_ORG", "value": pool.spec.organization}
        if pool.spec.organization
        else {"name": "RUNNER_REPO", "value": pool.spec.repository}
    )
    fixed: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "RUNNER_POOL_NAME", "value": pool.name},
        scope,
        {"name": "RUNNER_LABELS", "value": ",".join(runner_labels(pool))},
        {"name": "GITHUB_URL", "value": web_url_for(github_api_url)},
        {"name": "RUNNER_WORKDIR", "value": WORK_DIR},
        {"name": "RUNNER_TOKEN_FILE", "value": f"{TOKEN_MOUNT_DIR}/{api.TOKEN_SECRET_KEY}"},
    ]
    return fixed + [e.model_dump(by_alias=True, exclude_none=True) for e in pool.spec.env]


def pod_spec(pool: api.RunnerPool, default_image: str, github_api_url: str) -> dict[str, Any]:
    """The runner pod's spec; ``runnerpool.pods.template`` wraps it into the pool's pods."""
    spec = pool.spec
    container: dict[str, Any] = {
        "name": RUNNER_CONTAINER,
        "image": spec.runner_image or default_image,
        "env": _env(pool, github_api_url),
        "volumeMounts": [
            # A file, not an env var: a restarted container reads the current token.
            {"name": _TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_DIR, "readOnly": True},
            {"name": _WORK_VOLUME, "mountPath": WORK_DIR},
            *spec.volume_mounts,
        ],
    }
    if spec.resources is not None:
        container["resources"] = spec.resources.model_dump(by_alias=True, exclude_none=True)
    pod: dict[str, Any] = {
        # One pod, one runner, one job: the ephemeral runner exits 0 after its job, which ends
        # the pod (Succeeded) and the runner managers replace it.  A failure (say config.sh
        # could not reach GitHub) restarts the container with the kubelet's backoff; a
        # container that restarts after it registered exits 0 at once (entrypoint.sh).
        "restartPolicy": "OnFailure",
        "securityContext": {"fsGroup": RUNNER_GID},
        "containers": [container],
        "volumes": [
            {
                "name": _TOKEN_VOLUME,
                "secret": {
                    "secretName": api.token_secret_name(pool.name),
                    "items": [{"key": api.TOKEN_SECRET_KEY, "path": api.TOKEN_SECRET_KEY}],
                    "defaultMode": 0o440,
                },
            },
            {"name": _WORK_VOLUME, **(spec.work_volume or {"emptyDir": {}})},
            *spec.volumes,
        ],
    }
    if spec.termination_grace_period_seconds is not None:
        pod["terminationGracePeriodSeconds"] = spec.termination_grace_period_seconds
    if spec.service_account_name:
        pod["serviceAccountName"] = spec.service_account_name
    else:
        # Runners run untrusted workflow code; they get no API credentials unless asked for.
        pod["automountServiceAccountToken"] = False
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations]
    return pod
