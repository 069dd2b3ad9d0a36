"""What the e2e tests ask of the cluster, the fake GitHub and the runner simulator.

The simulator itself lives in ``testworld.simulator`` because the demo and the bench play
the same runner pods; this module only adds the questions tests keep asking (which runners
belong to a pool, what a condition says) so that each test reads as its scenario.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from tests.helpers import wait_for
from testworld.fakegithub import FakeGitHub
from testworld.simulator import iter_runner_labels

#: Scopes the fake knows; pools use these.
REPO = "octo-org/hello-world"
OTHER_REPO = "octo-org/other"
ORG = "octo-org"
#: The PAT the fake accepts, and one it rejects.
GOOD_PAT = "ghp_e2eGoodToken0123456789abcdefghijkl"
BAD_PAT = "ghp_e2eRevokedToken0123456789abcdefgh"


def pool_runners(fake: FakeGitHub, scope: str, namespace: str, pool: str) -> list[dict[str, Any]]:
    """Runners registered on the fake that carry the pool's own label."""
    label = naming.pool_runner_label(namespace, pool)
    return [r for r in fake.runners(scope) if label in iter_runner_labels(r)]


def runners_of_namespace(fake: FakeGitHub, namespace: str) -> list[str]:
    """Runners on any scope carrying a pool label of ``namespace``."""
    prefix = f"{namespace}/"
    return [
        runner["name"]
        for scope in fake.scopes()
        for runner in fake.runners(scope)
        if any(label.startswith(prefix) for label in iter_runner_labels(runner))
    ]


#: The promise: a deleted namespace is gone within a minute (its pods, its pools' finalizers).
NAMESPACE_GONE_WITHIN = 60.0


def delete_namespace_and_wait(core: client.CoreV1Api, namespace: str) -> None:
    """Delete ``namespace`` and wait until the API server has no such namespace."""
    core.delete_namespace(namespace)
    wait_for(
        lambda: namespace_gone(core, namespace),
        timeout=NAMESPACE_GONE_WITHIN,
        interval=0.2,
        message=f"namespace {namespace} to be gone",
    )


def namespace_gone(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def issued_secrets(fake: FakeGitHub) -> set[str]:
    """Every registration token the fake handed out, plus the PATs: none may reach a log."""
    tokens = {t.token for scope in fake.scopes() for t in fake.tokens_issued(scope)}
    return tokens | {GOOD_PAT, BAD_PAT}


def get_pool(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def condition(pool: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((pool or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def wait_condition(
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    type_: str,
    status: str,
    *,
    reason: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Until the pool's condition has ``status`` (and ``reason``); returns the whole pool."""

    def reached() -> dict[str, Any] | None:
        pool = get_pool(api_client, namespace, name)
        cond = condition(pool, type_)
        if cond and cond["status"] == status and reason in (None, cond.get("reason")):
            return pool
        return None

    what = f"{namespace}/{name} {type_}={status}" + (f" ({reason})" if reason else "")
    found = wait_for(reached, timeout=timeout, message=what)
    assert found is not None  # wait_for fails the test rather than return a falsy value
    return found


def wait_gone(api_client: client.ApiClient, namespace: str, name: str, timeout: float = 30.0) -> None:
    wait_for(
        lambda: get_pool(api_client, namespace, name) is None,
        timeout=timeout,
        message=f"RunnerPool {namespace}/{name} to be gone",
    )


def token_secret(api_client: client.ApiClient, namespace: str, pool: str) -> dict[str, Any] | None:
    try:
        secret = client.CoreV1Api(api_client).read_namespaced_secret(
            naming.token_secret_name(pool), namespace
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return dict(api_client.sanitize_for_serialization(secret))


def token_of(secret: dict[str, Any] | None) -> str | None:
    value = ((secret or {}).get("data") or {}).get(naming.TOKEN_SECRET_KEY)
    return base64.b64decode(value).decode() if value else None


def wait_token(
    api_client: client.ApiClient,
    namespace: str,
    pool: str,
    *,
    unlike: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Until the pool's token Secret holds a token (other than ``unlike``); returns the Secret."""

    def filled() -> dict[str, Any] | None:
        secret = token_secret(api_client, namespace, pool)
        token = token_of(secret)
        return secret if token and token != unlike else None

    found = wait_for(filled, timeout=timeout, message=f"a new token in {namespace}/{pool}'s Secret")
    assert found is not None  # wait_for fails the test rather than return a falsy value
    return found


def managed_children(api_client: client.ApiClient, namespace: str) -> dict[str, set[str]]:
    """Pool name -> kinds of the operator's objects that still exist for it in ``namespace``
    (``"*"``: the namespace's shared busy budget, which belongs to no pool)."""
    selector = f"{naming.MANAGED_BY_LABEL}={naming.MANAGED_BY_VALUE}"
    found: dict[str, set[str]] = {}
    objects = [
        *client.CoreV1Api(api_client).list_namespaced_secret(namespace, label_selector=selector).items,
        *client.PolicyV1Api(api_client)
        .list_namespaced_pod_disruption_budget(namespace, label_selector=selector)
        .items,
        *client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items,
    ]
    for obj in objects:
        pool = (obj.metadata.labels or {}).get(naming.POOL_LABEL, "*")
        found.setdefault(pool, set()).add(type(obj).__name__.removeprefix("V1"))
    return found


def events(api_client: client.ApiClient, namespace: str, involved: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events recorded on one object."""
    items = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    return [(e.type, e.reason, e.message) for e in items if e.involved_object.name == involved]
