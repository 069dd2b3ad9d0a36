"""Test doubles and helpers for reconciling pools on the real API server.

``LiveReader`` reads straight from the API server (no informer lag) so step-by-step
reconcile tests are deterministic; the controller-level tests use the real informers.
The secret updater's stand-in is ``runnerpool.fakes.FakeSecretUpdater``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, children, naming
from runnerpool.reads import ParsedPool, parse_pool
from runnerpool.runtime.kube import Kube
from runnerpool.secret_reads import SecretReads
from tests.helpers import wait_for


class NoCachedSecrets:
    """The operator's Secret cache as a pool's webhook Secret finds it: without it (not labelled)."""

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def by_name_reads(kube: Kube) -> SecretReads:
    """The operator's one by-name Secret reader, over a cache that holds none of the Secrets read."""
    return SecretReads(NoCachedSecrets(), kube)


class LiveReader:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    def _read(self, call: Any, *args: Any) -> dict[str, Any] | None:
        try:
            obj = call(*args)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj if isinstance(obj, dict) else dict(self._api.sanitize_for_serialization(obj))

    def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(
            self._custom.get_namespaced_custom_object, api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_secret, name, namespace)

    def get_disruption_budget(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(
            client.PolicyV1Api(self._api).read_namespaced_pod_disruption_budget, name, namespace
        )

    def get_service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_service_account, name, namespace)

    def get_role_binding(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(
            client.RbacAuthorizationV1Api(self._api).read_namespaced_role_binding, name, namespace
        )

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        pods = self._core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}={pool}")
        return [dict(self._api.sanitize_for_serialization(p)) for p in pods.items]

    def list_secrets(self, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace is None:
            found = self._core.list_secret_for_all_namespaces()
        else:
            found = self._core.list_namespaced_secret(namespace)
        return [dict(self._api.sanitize_for_serialization(s)) for s in found.items]

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        raw = self.get_pool(namespace, name)
        return None if raw is None else parse_pool(raw)

    def namespace_terminating(self, namespace: str) -> bool:
        found = self._read(self._core.read_namespace, namespace)
        return found is None or (found.get("status") or {}).get("phase") == "Terminating"

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        found = self._custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
        return [parse_pool(raw) for raw in found["items"]]

    def scale_set_pools(self) -> list[api.RunnerPool]:
        found = self._custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL)
        models = (parse_pool(raw).model for raw in found["items"])
        return [model for model in models if model is not None and model.spec.scale_set is not None]


class PodsNotCachedYet(LiveReader):
    """Reads from the API server, but for the pods: a cache whose watch has not shown the pool's
    creates yet."""

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return []


def autoscaling_of(raws: Iterable[dict[str, Any]]) -> list[api.RunnerPool]:
    """``Reads.autoscaling_pools`` of a live listing, for any scopes: every valid autoscaling
    pool not being deleted (a superset of one scope's; the demand writer and the poller match
    each job against each pool themselves)."""
    models = (parse_pool(raw).model for raw in raws)
    return [p for p in models if p is not None and p.spec.autoscaling is not None and not p.deleting]


def pool_manifest(
    name: str, *, org: str | None = None, repo: str | None = None, **spec: Any
) -> dict[str, Any]:
    scope = {"organization": org} if org else {"repository": repo or "octo-org/octo-repo"}
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {**scope, **spec},
    }


def create_pool(api_client: client.ApiClient, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, manifest
    )
    return created


def fill_token(api_client: client.ApiClient, namespace: str, pool: str, token: str, expires_at: str) -> None:
    """What the secret updater does: merge-patch the token and its expiry into the Secret."""
    client.CoreV1Api(api_client).patch_namespaced_secret(
        naming.token_secret_name(pool),
        namespace,
        {
            "metadata": {
                "annotations": {
                    naming.TOKEN_EXPIRY_ANNOTATION: expires_at,
                    naming.TOKEN_ISSUED_ANNOTATION: "true",
                }
            },
            "data": {naming.TOKEN_SECRET_KEY: base64.b64encode(token.encode()).decode()},
        },
    )


def pat_secret(api_client: client.ApiClient, namespace: str, token: str = "ghp_test") -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": token}},
    )


def play_kubelet(
    api_client: client.ApiClient,
    namespace: str,
    pod: str,
    *,
    phase: str = "Running",
    state: str = "running",
    restarts: int = 0,
) -> None:
    """Nothing runs pods here, so report what a kubelet would: the phase and the runner's state."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    details = {
        "running": {"startedAt": now},
        "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now},
        "waiting": {"reason": "CrashLoopBackOff"},
    }[state]
    container = {
        "name": naming.RUNNER_CONTAINER,
        "image": api.DEFAULT_RUNNER_IMAGE,
        "imageID": "",
        "ready": state == "running",
        "restartCount": restarts,
        "state": {state: details},
    }
    ready = {"type": "Ready", "status": "True" if state == "running" else "False", "lastTransitionTime": now}
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": phase, "containerStatuses": [container], "conditions": [ready]}}
    )


def mark_pods_ready(api_client: client.ApiClient, namespace: str, pool: str, count: int) -> list[str]:
    """Wait for ``count`` live pods of the pool and report them Running and Ready; returns their names."""
    core = client.CoreV1Api(api_client)
    selector = f"{naming.POOL_LABEL}={pool}"

    def pods_created() -> list[str] | None:
        items = core.list_namespaced_pod(namespace, label_selector=selector).items
        names = sorted(p.metadata.name for p in items if p.metadata.deletion_timestamp is None)
        return names if len(names) == count else None

    names = wait_for(pods_created, message=f"{count} runner pods")
    for name in names:
        play_kubelet(api_client, namespace, name)
    return names


def legacy_budget(api_client: client.ApiClient, namespace: str, name: str) -> str:
    """The per-pool disruption budget an earlier operator version kept for pool ``name``."""
    stored = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name
    )
    pool = api.RunnerPool.model_validate(stored)
    labels = children.selector_labels(pool)
    budget = naming.disruption_budget_name(name)
    client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {
                "name": budget,
                "labels": labels,
                "ownerReferences": [children.owner_reference(pool)],
            },
            "spec": {
                "maxUnavailable": 0,
                "selector": {"matchLabels": {**labels, naming.BUSY_LABEL: "true"}},
            },
        },
    )
    return budget


def pool_events(api_client: client.ApiClient, namespace: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events on RunnerPools (not the scheduler's on pods)."""
    items = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    return [(e.type, e.reason, e.message) for e in items if e.involved_object.kind == api.KIND]
