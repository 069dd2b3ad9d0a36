"""What every in-cluster object a RunnerPool owns carries, and the token Secret.

Pure functions of the pool: the labels a pool's children are selected by, the owner
reference that ties them to it, and the empty token Secret the reconciler creates. The
runner pod itself is built in one place, ``runnerpool.pods.template``.
"""

from __future__ import annotations

from typing import Any

from runnerpool import api, naming
from runnerpool.domain import resolve_api_url
from runnerpool.github.protocol import GitHubClient, GitHubClients


def selector_labels(pool: api.RunnerPool) -> dict[str, str]:
    """The labels every child of the pool carries, and what the pool selects its pods by."""
    return {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: pool.name}


def selector(pool: api.RunnerPool) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(pool).items()))


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
        "labels": selector_labels(pool),
        "ownerReferences": [owner_reference(pool)],
    }


def token_secret(pool: api.RunnerPool) -> dict[str, Any]:
    """An empty Secret: the secret updater fills it, the reconciler never writes a token."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(pool, naming.token_secret_name(pool.name)),
    }


def api_url(pool: api.RunnerPool, default: str) -> str:
    return resolve_api_url(pool.spec.github_api_url, default)


def github_client(clients: GitHubClients, pool: api.RunnerPool, default_api_url: str) -> GitHubClient:
    """The GitHub client of the pool's credential Secret and API server."""
    return clients.get(pool.namespace, pool.spec.credential_secret_name, api_url(pool, default_api_url))
