"""The label that lets the operator cache a credential Secret, on the real API server.

The operator's Secret cache holds only Secrets with one of its labels (``runnerpool.watches``),
so here the reader is the API server seen through the same selectors (``SelectedReader``: no
lag, deterministic), and every credential Secret the reconciler needs before the label is on
is read by name. What the user sees: the Secret a pool names carries the label and the
finalizer while the pool needs it, loses both with the last pool, gets its label back when
someone removes it, and a Secret created after its pool is found without a watch. The same
holds for the token Secret the pool owns: its labels removed by hand, it is found by name and
labelled again.
"""

from __future__ import annotations

from typing import Any

import pytest
import responses
from kubernetes import client

from runnerpool import api, naming
from runnerpool.credential_protection import CredentialProtection
from runnerpool.naming import CREDENTIAL_FINALIZER, CREDENTIAL_LABEL, CREDENTIAL_VALUE
from runnerpool.observe import SecretChecks
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import RunnerManagers
from runnerpool.runtime.kube import Kube, Resource
from runnerpool.secret_reads import SecretReads
from tests.github_mocks import RunnerEndpoint, github
from tests.pools import LiveReader, create_pool, pat_secret, pool_manifest
from tests.reconcilers import make_reconciler
from tests.test_credential_protection import _bindings
from tests.test_reconciler import _finalize, runners

__all__ = ["github", "runners"]  # the fixtures

CRED = naming.DEFAULT_CREDENTIAL_SECRET


def _ours(secret: dict[str, Any] | None) -> bool:
    labels = ((secret or {}).get("metadata") or {}).get("labels") or {}
    return (
        labels.get(naming.MANAGED_BY_LABEL) == naming.MANAGED_BY_VALUE
        or labels.get(CREDENTIAL_LABEL) == CREDENTIAL_VALUE
    )


class SelectedReader(LiveReader):
    """Secrets as the operator's cache holds them: only those its label selectors match."""

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = super().get_secret(namespace, name)
        return found if _ours(found) else None

    def list_secrets(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [s for s in super().list_secrets(namespace) if _ours(s)]


class RecordingKube(Kube):
    """Kube that remembers every patch of a Secret (what changed, nothing else)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.secret_patches: list[Any] = []

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Any, **kwargs: Any) -> Any:
        if resource.plural == "secrets" and name == CRED:
            self.secret_patches.append(body)
        return super().patch(resource, namespace, name, body, **kwargs)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kube(api_client: client.ApiClient) -> RecordingKube:
    return RecordingKube(api_client)


@pytest.fixture
def protection(api_client: client.ApiClient, kube: RecordingKube, clock: Clock) -> CredentialProtection:
    reader = SelectedReader(api_client)
    return CredentialProtection(reader, kube, SecretReads(reader, kube, clock=clock))


@pytest.fixture
def reconciler(
    api_client: client.ApiClient,
    runnerpool_crd: dict[str, Any],
    protection: CredentialProtection,
    runners: RunnerManagers,
) -> Reconciler:
    return make_reconciler(
        api_client,
        reads=SelectedReader(api_client),
        runners=runners,
        secrets=SecretChecks(protection, _bindings(api_client), lambda namespace, ref: None),
    )


def _meta(api_client: client.ApiClient, namespace: str) -> dict[str, Any]:
    return (LiveReader(api_client).get_secret(namespace, CRED) or {}).get("metadata") or {}


def _labelled(api_client: client.ApiClient, namespace: str) -> bool:
    return (_meta(api_client, namespace).get("labels") or {}).get(CREDENTIAL_LABEL) == CREDENTIAL_VALUE


def _finalizers(api_client: client.ApiClient, namespace: str) -> list[str]:
    return list(_meta(api_client, namespace).get("finalizers") or [])


def test_the_named_secret_is_labelled_at_the_first_pass_and_unlabelled_with_the_last_pool(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    kube: RecordingKube,
    github: responses.RequestsMock,
) -> None:
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("first", repo="octo-org/octo-repo"))

    reconciler(f"{namespace}/first")  # the Secret carries no label yet: read by name

    assert _labelled(api_client, namespace) and _finalizers(api_client, namespace) == [CREDENTIAL_FINALIZER]
    assert len(kube.secret_patches) == 1, "label and finalizer in one write"
    RunnerEndpoint(github, "/repos/octo-org/octo-repo")  # no runner to deregister
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "first"
    )
    _finalize(api_client, namespace, reconciler, "first")
    assert not _labelled(api_client, namespace), "no pool needs it: out of the operator's cache"
    assert _finalizers(api_client, namespace) == []


def test_a_label_removed_by_hand_is_put_back_alone(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, kube: RecordingKube
) -> None:
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("kept", repo="octo-org/octo-repo"))
    reconciler(f"{namespace}/kept")
    client.CoreV1Api(api_client).patch_namespaced_secret(
        CRED, namespace, {"metadata": {"labels": {CREDENTIAL_LABEL: None}}}
    )
    kube.secret_patches.clear()

    # The Secret leaving the cache brings its pools back (tests/test_watches.py): their next pass.
    reconciler(f"{namespace}/kept")

    assert _labelled(api_client, namespace)
    assert _finalizers(api_client, namespace) == [CREDENTIAL_FINALIZER]
    assert kube.secret_patches == [{"metadata": {"labels": {CREDENTIAL_LABEL: CREDENTIAL_VALUE}}}], (
        "only what changed"
    )


def test_a_secret_released_while_a_new_pool_starts_naming_it_is_labelled_again(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, protection: CredentialProtection
) -> None:
    """The release decided on a cache that did not have the new pool yet: the Secret leaving
    the cache (or the new pool's own first pass) brings the new pool to its pass, which labels
    the Secret again."""
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("old", repo="octo-org/octo-repo"))
    reconciler(f"{namespace}/old")
    protection.release_if_unused(namespace, CRED, finalized="old")  # decided without the new pool
    assert not _labelled(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("new", repo="octo-org/octo-repo"))

    reconciler(f"{namespace}/new")

    assert _labelled(api_client, namespace) and _finalizers(api_client, namespace) == [CREDENTIAL_FINALIZER]


def test_a_secret_created_after_its_pool_is_found_by_name_within_the_backoff(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: Clock
) -> None:
    create_pool(api_client, namespace, pool_manifest("early", repo="octo-org/octo-repo"))

    first = reconciler(f"{namespace}/early")
    assert first.requeue_after is not None and first.requeue_after <= 1.0, "looked for again in 1 s"
    pat_secret(api_client, namespace)  # no watch of the operator's sees it: it has no label
    clock.now += first.requeue_after
    reconciler(f"{namespace}/early")

    assert _labelled(api_client, namespace) and _finalizers(api_client, namespace) == [CREDENTIAL_FINALIZER]


def test_a_token_secret_whose_labels_were_removed_is_labelled_again(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Out of the cache, the create is refused as existing: the pass reads it by name instead."""
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("owner", repo="octo-org/octo-repo"))
    reconciler(f"{namespace}/owner")
    core = client.CoreV1Api(api_client)
    name = naming.token_secret_name("owner")
    core.patch_namespaced_secret(name, namespace, {"metadata": {"labels": {naming.MANAGED_BY_LABEL: None}}})

    reconciler(f"{namespace}/owner")

    labels = core.read_namespaced_secret(name, namespace).metadata.labels
    assert labels[naming.MANAGED_BY_LABEL] == naming.MANAGED_BY_VALUE


class ChangedUnderTheFirstPatch(RecordingKube):
    """Another writer changes the Secret between the operator's read and its first patch, as
    the first passes of pools created together do."""

    raced = False

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Any, **kwargs: Any) -> Any:
        if resource.plural == "secrets" and name == CRED and not self.raced:
            self.raced = True
            super().patch(resource, namespace, name, {"metadata": {"annotations": {"someone": "else"}}})
        return super().patch(resource, namespace, name, body, **kwargs)


def test_a_conflict_on_a_secret_not_labelled_yet_is_read_again_at_once(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """No event would bring the pool back for a Secret the cache does not hold."""
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("together", repo="octo-org/octo-repo"))
    kube = ChangedUnderTheFirstPatch(api_client)
    reader = SelectedReader(api_client)
    protection = CredentialProtection(reader, kube, SecretReads(reader, kube))

    assert protection.protect(namespace, "together", CRED)

    assert kube.raced and len(kube.secret_patches) == 3, "the racing write, the refused patch, the patch"
    assert _labelled(api_client, namespace) and _finalizers(api_client, namespace) == [CREDENTIAL_FINALIZER]
