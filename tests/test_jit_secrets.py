"""A JIT pool's pods and their own Secrets, reconciled against the real API server.

The token scheduler is the recording stand-in (``FakeJitSecretUpdater``; ``secret_updater.jit`` has its own
tests), so a fill is written here by hand the way it writes it (``jit_patch``); no kubelet runs,
so the register init container's end is reported by hand too.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from runnerpool import children, naming
from runnerpool.fakes import FakeSecretUpdater
from runnerpool.github.types import JitConfig
from runnerpool.reconciler import Reconciler
from runnerpool.settings import QueueSettings, Settings
from secret_updater.jit import jit_patch
from tests.pools import LiveReader, create_pool, pool_manifest
from tests.reconcilers import make_reconciler

CONFIG = "eyJqaXQiOiAic2VjcmV0LWNvbmZpZyJ9"


@pytest.fixture
def tokens() -> FakeSecretUpdater:
    return FakeSecretUpdater()


@pytest.fixture
def reconciler(
    api_client: client.ApiClient,
    runnerpool_crd: dict,  # type: ignore[type-arg]
    tokens: FakeSecretUpdater,
) -> Reconciler:
    return make_reconciler(
        api_client, tokens=tokens, settings=Settings(queue=QueueSettings(status_coalesce=0.0))
    )


def _pods(api_client: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return LiveReader(api_client).list_pods(namespace, "jp")


def _secret(api_client: client.ApiClient, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    return LiveReader(api_client).get_secret(
        namespace, pod["metadata"]["annotations"][naming.JIT_SECRET_ANNOTATION]
    )


def _register_ended(api_client: client.ApiClient, namespace: str, pod: str, exit_code: int = 0) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    register = {
        "name": naming.REGISTER_CONTAINER,
        "image": "img",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": exit_code, "startedAt": now, "finishedAt": now}},
    }
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Pending", "initContainerStatuses": [register]}}
    )


def _versions(api_client: client.ApiClient, namespace: str) -> list[str]:
    pods = _pods(api_client, namespace)
    secrets = [_secret(api_client, namespace, p) for p in pods]
    pool = LiveReader(api_client).get_pool(namespace, "jp")
    assert pool is not None
    return [o["metadata"]["resourceVersion"] for o in [pool, *pods, *(s for s in secrets if s)]]


def test_a_jit_pods_secret_is_created_empty_filled_once_emptied_once_used(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    create_pool(
        api_client, namespace, pool_manifest("jp", org="octo-org", registration="jit", labels=["gpu"])
    )
    key = f"{namespace}/jp"

    # No pool token in JIT mode: the first pass makes the pods at once.
    reconciler(key)
    [pod] = _pods(api_client, namespace)
    assert LiveReader(api_client).get_secret(namespace, naming.token_secret_name("jp")) is None
    assert tokens.started == []

    # The next pass (the pod's creation brings it) makes the pod's Secret, empty, owned, cached.
    reconciler(key)
    secret = _secret(api_client, namespace, pod)
    assert secret is not None
    assert not secret.get("data")
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Pod",
        pod["metadata"]["name"],
        pod["metadata"]["uid"],
    )
    assert secret["metadata"]["labels"][naming.MANAGED_BY_LABEL] == naming.MANAGED_BY_VALUE
    # ... and asks the token scheduler for one runner named after the pod, with every label it
    # must carry: GitHub makes a JIT runner with the request's labels only (no config.sh adds
    # self-hosted, OS and architecture), so a runs-on: [self-hosted, ...] job would not reach it.
    [(secret_name, uid, request)] = tokens.jit.fills[-1:]
    assert (secret_name, uid) == (secret["metadata"]["name"], pod["metadata"]["uid"])
    assert request.name == pod["metadata"]["name"]
    assert request.labels == ("self-hosted", "Linux", "X64", f"{namespace}/jp", "gpu")
    assert request.work_folder == naming.WORK_DIR

    # Filled (as the token scheduler writes it): nothing more is asked, nothing written.
    client.CoreV1Api(api_client).patch_namespaced_secret(
        secret["metadata"]["name"], namespace, jit_patch(JitConfig(runner_id=7, encoded=CONFIG))
    )
    asked = len(tokens.jit.fills)
    before = _versions(api_client, namespace)
    reconciler(key)
    assert len(tokens.jit.fills) == asked
    after = _versions(api_client, namespace)
    assert after[1:] == before[1:], "the pod and its Secret are not written"
    # The one write: the pool is marked, it may have a runner on GitHub (runnerpool.deregistration).
    marked = LiveReader(api_client).get_pool(namespace, "jp")
    assert marked is not None and naming.MAY_HAVE_RUNNERS_ANNOTATION in marked["metadata"]["annotations"]
    reconciler(key)
    assert _versions(api_client, namespace) == after
    filled = _secret(api_client, namespace, pod)
    assert filled is not None
    assert base64.b64decode(filled["data"][naming.JIT_SECRET_KEY]).decode() == CONFIG

    # The register container ended well: one patch empties it, and it is never filled again.
    _register_ended(api_client, namespace, pod["metadata"]["name"])
    reconciler(key)
    emptied = _secret(api_client, namespace, pod)
    assert emptied is not None
    assert not base64.b64decode(emptied["data"][naming.JIT_SECRET_KEY])
    assert emptied["metadata"]["annotations"][naming.JIT_RUNNER_ID_ANNOTATION] == "7"
    assert pod["metadata"]["uid"] in tokens.jit.forgotten
    before = _versions(api_client, namespace)
    reconciler(key)
    assert _versions(api_client, namespace) == before
    assert len(tokens.jit.fills) == asked


def test_a_register_container_that_failed_does_not_empty_the_secret(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    create_pool(api_client, namespace, pool_manifest("jp", org="octo-org", registration="jit"))
    reconciler(f"{namespace}/jp")
    reconciler(f"{namespace}/jp")
    [pod] = _pods(api_client, namespace)
    secret = _secret(api_client, namespace, pod)
    assert secret is not None
    client.CoreV1Api(api_client).patch_namespaced_secret(
        secret["metadata"]["name"], namespace, jit_patch(JitConfig(runner_id=7, encoded=CONFIG))
    )
    _register_ended(api_client, namespace, pod["metadata"]["name"], exit_code=1)

    reconciler(f"{namespace}/jp")

    # The kubelet runs it again, and it needs its config then.
    kept = _secret(api_client, namespace, pod)
    assert kept is not None and kept["data"][naming.JIT_SECRET_KEY]
    assert not children.registered(pod)


def test_a_jit_pool_reports_its_token_ready_without_a_pool_token(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    create_pool(api_client, namespace, pool_manifest("jp", org="octo-org", registration="jit"))
    reconciler(f"{namespace}/jp")

    pool = LiveReader(api_client).get_pool(namespace, "jp")
    assert pool is not None
    token = next(c for c in pool["status"]["conditions"] if c["type"] == "TokenReady")
    assert (token["status"], token["reason"]) == ("True", "JitConfigs")
