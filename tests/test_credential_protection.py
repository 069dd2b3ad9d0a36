"""A credential Secret stays while a pool needs it to deregister, and goes once none does.

Against the real API server: the finalizer on the Secret is what keeps a deleted Secret
readable (``deletionTimestamp`` set, data intact) until the pools that use it are
finalized, and removing it is what lets the Secret, and a namespace, go.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
import responses
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.binding_protection import EnablingBindings
from runnerpool.credential_protection import CredentialProtection
from runnerpool.naming import BINDING_FINALIZER, CREDENTIAL_FINALIZER
from runnerpool.observe import SecretChecks
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import RunnerManagers
from runnerpool.runtime.kube import ROLE_BINDINGS, Kube
from tests.github_mocks import RunnerEndpoint, github
from tests.helpers import wait_for
from tests.pools import LiveReader, create_pool, fill_token, pat_secret, pool_manifest
from tests.reconcilers import make_reconciler
from tests.test_reconciler import FUTURE, _finalize, runners
from testworld.envtest.serviceaccount import NAMESPACE_ROLE, OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT

__all__ = ["github", "runners"]  # the fixtures

CRED = naming.DEFAULT_CREDENTIAL_SECRET
OPERATOR_ACCOUNT = f"{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"


@pytest.fixture
def protection(api_client: client.ApiClient) -> CredentialProtection:
    return CredentialProtection(LiveReader(api_client), Kube(api_client))


def _bindings(api_client: client.ApiClient) -> EnablingBindings:
    """What the operator holds of a namespace's enabling RoleBinding (the test namespaces have one)."""
    return EnablingBindings(LiveReader(api_client), Kube(api_client), lambda: OPERATOR_ACCOUNT)


@pytest.fixture
def reconciler(
    api_client: client.ApiClient,
    runnerpool_crd: dict[str, Any],
    protection: CredentialProtection,
    runners: RunnerManagers,
) -> Reconciler:
    return make_reconciler(
        api_client,
        runners=runners,
        secrets=SecretChecks(protection, _bindings(api_client), lambda namespace, ref: None),
    )


def _secret(api_client: client.ApiClient, namespace: str, name: str = CRED) -> dict[str, Any] | None:
    return LiveReader(api_client).get_secret(namespace, name)


def _protected(api_client: client.ApiClient, namespace: str, name: str = CRED) -> bool:
    return CREDENTIAL_FINALIZER in (
        (_secret(api_client, namespace, name) or {}).get("metadata", {}).get("finalizers") or []
    )


def _converge(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str, **spec: Any
) -> None:
    create_pool(api_client, namespace, pool_manifest(name, repo="octo-org/octo-repo", **spec))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(f"{namespace}/{name}")


def _delete_pool(api_client: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name
    )


def test_a_deleted_secret_stays_until_the_last_pool_using_it_is_finalized(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    github: responses.RequestsMock,
) -> None:
    pat_secret(api_client, namespace)
    _converge(api_client, namespace, reconciler, "one")
    _converge(api_client, namespace, reconciler, "two")
    assert _protected(api_client, namespace)
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(1, "one-a", [f"{namespace}/one"])
    endpoint.add(2, "two-a", [f"{namespace}/two"])

    # What the namespace controller does first: the Secret is deleted before the pools.
    client.CoreV1Api(api_client).delete_namespaced_secret(CRED, namespace)
    held = _secret(api_client, namespace)
    assert held is not None and held["metadata"].get("deletionTimestamp"), "deleted, but held"
    assert held["data"]["token"], "and still readable for deregistration"

    _delete_pool(api_client, namespace, "one")
    _finalize(api_client, namespace, reconciler, "one")
    assert _protected(api_client, namespace), "pool two still needs it"

    _delete_pool(api_client, namespace, "two")
    _finalize(api_client, namespace, reconciler, "two")

    assert sorted(runner_id for runner_id, _ in endpoint.deleted) == [1, 2], "both deregistered"
    wait_for(lambda: _secret(api_client, namespace) is None, message="the Secret to go with its last pool")


def test_moving_a_pool_to_another_secret_releases_the_old_one(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    pat_secret(api_client, namespace)
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": "other"}, "stringData": {"token": "ghp_other"}}
    )
    _converge(api_client, namespace, reconciler, "mover")
    assert _protected(api_client, namespace) and not _protected(api_client, namespace, "other")

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "mover", {"spec": {"credentialSecretName": "other"}}
    )
    reconciler(f"{namespace}/mover")

    assert _protected(api_client, namespace, "other")
    assert not _protected(api_client, namespace), "no pool uses the old Secret any more"


def test_a_secret_whose_pools_vanished_is_released_at_start(
    api_client: client.ApiClient, namespace: str, protection: CredentialProtection
) -> None:
    """A pool whose finalizer was stripped while no operator ran leaves a protected Secret."""
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "orphan", "finalizers": [CREDENTIAL_FINALIZER]}, "stringData": {"token": "x"}},
    )
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("user"))  # names the default Secret
    client.CoreV1Api(api_client).patch_namespaced_secret(
        CRED, namespace, {"metadata": {"finalizers": [CREDENTIAL_FINALIZER]}}
    )

    assert protection.release_unused() >= 1

    assert not _protected(api_client, namespace, "orphan")
    assert _protected(api_client, namespace), "a Secret a pool names stays protected"


def test_a_pool_gone_without_finalizing_releases_its_secret(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Its finalizer removed by hand: the pool's disappearance asks the question again."""
    pat_secret(api_client, namespace)
    _converge(api_client, namespace, reconciler, "stripped")
    custom = client.CustomObjectsApi(api_client)
    custom.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "stripped", {"metadata": {"finalizers": None}}
    )
    _delete_pool(api_client, namespace, "stripped")
    wait_for(lambda: LiveReader(api_client).get_pool(namespace, "stripped") is None, message="the pool to go")

    reconciler(f"{namespace}/stripped")

    assert not _protected(api_client, namespace)


def test_a_secret_released_once_is_released_again_after_another_replica_protected_it(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str
) -> None:
    """Found by the chaos soak: a namespace made again after its deletion, its Secret protected
    by the other replica while it led, then deleted again under this one. This replica still
    remembered releasing that Secret and skipped it as "the cache lags", so the namespace waited
    minutes, until the next leadership start released it."""
    pat_secret(api_client, namespace)
    this, other = (CredentialProtection(LiveReader(api_client), Kube(api_client)) for _ in range(2))
    reader = LiveReader(api_client)

    create_pool(api_client, namespace, pool_manifest("first"))  # names the default Secret
    assert this.protect(namespace, "first", CRED)
    _delete_pool(api_client, namespace, "first")
    wait_for(lambda: reader.get_pool(namespace, "first") is None, message="the first pool to go")
    this.forget(namespace, "first")
    assert not _protected(api_client, namespace), "released with its last pool"

    create_pool(api_client, namespace, pool_manifest("second"))
    assert other.protect(namespace, "second", CRED), "the other replica, leading now, protects it"
    this.protect(namespace, "second", CRED)  # leading again: already protected, remembered
    _delete_pool(api_client, namespace, "second")
    wait_for(lambda: reader.get_pool(namespace, "second") is None, message="the second pool to go")
    this.forget(namespace, "second")

    assert not _protected(api_client, namespace), "released again, at once"


def test_a_pool_finalized_under_another_leader_releases_its_secret_when_it_goes(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str
) -> None:
    """Found by the chaos soak: the old leader removed the pool's finalizer and was killed; the
    new one never saw which Secret the pool used, so the namespace waited for the next
    leadership start (minutes) before its credential Secret could go."""
    pat_secret(api_client, namespace)
    old_leader, new_leader = (
        CredentialProtection(LiveReader(api_client), Kube(api_client)) for _ in range(2)
    )
    create_pool(api_client, namespace, pool_manifest("finalized"))  # names the default Secret
    assert old_leader.protect(namespace, "finalized", CRED)
    _delete_pool(api_client, namespace, "finalized")
    wait_for(
        lambda: LiveReader(api_client).get_pool(namespace, "finalized") is None, message="the pool to go"
    )

    new_leader.forget(namespace, "finalized")

    assert not _protected(api_client, namespace), "released as the pool went, not at the next leadership"


class _FirstReleaseFails(Kube):
    """The API server failing the first release patch (a JSON patch) with a 500."""

    failed = False

    def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(args[3], list) and not self.failed:  # (resource, namespace, name, body)
            self.failed = True
            raise ApiException(status=500, reason="etcdserver: request timed out")
        return super().patch(*args, **kwargs)


def _move(api_client: client.ApiClient, namespace: str, pool: str, secret: str) -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace, {"metadata": {"name": secret}, "stringData": {"token": "ghp_other"}}
    )
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, pool, {"spec": {"credentialSecretName": secret}}
    )


def test_a_failed_release_of_the_secret_a_pool_moved_from_is_tried_again(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str
) -> None:
    """The pass that found the pool moved released the old Secret after it had noted the new
    one: its release failing, the retried pass no longer knew the old one, which kept its
    finalizer for good (and its namespace, once deleted, stayed Terminating)."""
    pat_secret(api_client, namespace)
    protection = CredentialProtection(LiveReader(api_client), _FirstReleaseFails(api_client))
    create_pool(api_client, namespace, pool_manifest("mover"))
    assert protection.protect(namespace, "mover", CRED)
    _move(api_client, namespace, "mover", "other")

    with pytest.raises(ApiException):
        protection.protect(namespace, "mover", "other")
    protection.protect(namespace, "mover", "other")  # the work queue's retry

    assert not _protected(api_client, namespace), "no pool uses the old Secret any more"


def test_a_secret_a_pool_moved_from_while_no_leader_saw_it_goes_with_the_pool(
    api_client: client.ApiClient, runnerpool_crd: dict[str, Any], namespace: str
) -> None:
    """The new leader only ever saw the pool use its new Secret; the old one kept its finalizer
    after the pool, and the namespace, were gone."""
    pat_secret(api_client, namespace)
    old_leader, new_leader = (
        CredentialProtection(LiveReader(api_client), Kube(api_client)) for _ in range(2)
    )
    create_pool(api_client, namespace, pool_manifest("mover"))
    assert old_leader.protect(namespace, "mover", CRED)
    _move(api_client, namespace, "mover", "other")
    assert new_leader.protect(namespace, "mover", "other")
    _delete_pool(api_client, namespace, "mover")
    wait_for(lambda: LiveReader(api_client).get_pool(namespace, "mover") is None, message="the pool to go")

    new_leader.forget(namespace, "mover")

    assert not _protected(api_client, namespace) and not _protected(api_client, namespace, "other")


def _binding_finalizers(api_client: client.ApiClient, namespace: str, name: str) -> list[str]:
    binding = client.RbacAuthorizationV1Api(api_client).read_namespaced_role_binding(name, namespace)
    return list(binding.metadata.finalizers or [])


def test_the_enabling_binding_stays_until_the_namespaces_last_pool_is_finalized(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    github: responses.RequestsMock,
) -> None:
    """Deleting a namespace deletes the RoleBinding that lets the operator write there at the same
    time as its pools: held by the operator's finalizer, RBAC keeps honouring it until the last
    pool has deregistered and released its credential Secret. Another binding is left alone."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    other = {
        "metadata": {"name": "someone-else"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACE_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, other)
    pat_secret(api_client, namespace)
    _converge(api_client, namespace, reconciler, "one")
    _converge(api_client, namespace, reconciler, "two")
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]
    RunnerEndpoint(github, "/repos/octo-org/octo-repo")

    rbac.delete_namespaced_role_binding(OPERATOR_SERVICE_ACCOUNT, namespace)
    _delete_pool(api_client, namespace, "one")
    _finalize(api_client, namespace, reconciler, "one")
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER], (
        "another pool still has to deregister"
    )
    _delete_pool(api_client, namespace, "two")
    _finalize(api_client, namespace, reconciler, "two")
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER], (
        "the last pool's own last writes there still need it"
    )
    wait_for(lambda: LiveReader(api_client).get_pool(namespace, "two") is None, message="pool two to go")
    reconciler(f"{namespace}/two")  # the pass its disappearance brings

    assert not _protected(api_client, namespace), "the credential Secret went first"
    wait_for(
        lambda: (
            not rbac.list_namespaced_role_binding(
                namespace, field_selector=f"metadata.name={OPERATOR_SERVICE_ACCOUNT}"
            ).items
        ),
        message="the enabling binding to go once released",
    )
    assert _binding_finalizers(api_client, namespace, "someone-else") == []


class _ChangedBeforeEachPatch(Kube):
    """The binding changes between the operator's read and its patch, ``times`` times: as when
    the namespace's deletion marks it while the namespace's last pools go."""

    def __init__(self, api_client: client.ApiClient, times: int) -> None:
        super().__init__(api_client)
        self.times = times
        self.patches = 0

    def patch(
        self, resource: Any, namespace: str | None, name: str, body: Any, **kwargs: Any
    ) -> dict[str, Any]:
        self.patches += 1
        if self.times:
            self.times -= 1
            change = {"metadata": {"labels": {"changed": str(self.times)}}}
            client.RbacAuthorizationV1Api(self.api_client).patch_namespaced_role_binding(
                name, namespace, change
            )
        return super().patch(resource, namespace, name, body, **kwargs)


def test_the_enabling_binding_is_released_even_when_it_changed_since_it_was_read(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """No pool is left to try again: a conflict on the release must not leave the namespace
    Terminating for good with the operator's finalizer on its binding."""
    _bindings(api_client).protect(namespace)
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]
    kube = _ChangedBeforeEachPatch(api_client, times=2)
    bindings = EnablingBindings(LiveReader(api_client), kube, lambda: OPERATOR_ACCOUNT)

    assert bindings.release_if_unused(namespace)

    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == []
    assert kube.patches == 3, "each conflict read again and patched again"


def test_a_release_that_keeps_meeting_conflicts_fails_the_pass_so_the_work_queue_tries_again(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    _bindings(api_client).protect(namespace)
    bindings = EnablingBindings(
        LiveReader(api_client), _ChangedBeforeEachPatch(api_client, 99), lambda: OPERATOR_ACCOUNT
    )

    with pytest.raises(ApiException) as raised:
        bindings.release_if_unused(namespace)

    assert raised.value.status == 409
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]


class _UnreachableOnce(Kube):
    """The API server out of reach for the first list (a restart: every retry refused)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.refused = False

    def list_items(self, resource: Any, namespace: str | None, **query: Any) -> list[dict[str, Any]]:
        if not self.refused:
            self.refused = True
            raise ConnectionRefusedError(111, "Connection refused")
        return super().list_items(resource, namespace, **query)


def test_a_hold_that_could_not_reach_the_api_server_is_tried_again_by_the_next_pass(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """The namespace counted as held before its bindings were patched, and only an API error
    undid that: after a connection error no later pass held the binding, so the namespace's
    deletion took it at once and the pools' finalizers were refused for good."""
    bindings = EnablingBindings(
        LiveReader(api_client), _UnreachableOnce(api_client), lambda: OPERATOR_ACCOUNT
    )

    with pytest.raises(ConnectionRefusedError):
        bindings.protect(namespace)
    assert bindings.protect(namespace), "held by the next pass"

    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]


class _AnotherReleaseAfterTheFirstList(Kube):
    """While the first release holds its listing of the namespace's bindings, another gone pool's
    pass releases too: as when a namespace's last pools go together."""

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.bindings: EnablingBindings | None = None
        self.patches = 0
        self.lists = 0
        self._second_listed = threading.Event()

    def list_items(self, resource: Any, namespace: str | None, **query: Any) -> list[dict[str, Any]]:
        items = super().list_items(resource, namespace, **query)
        self.lists += 1
        if self.lists == 1:
            assert self.bindings is not None
            second = threading.Thread(target=self.bindings.release_if_unused, args=(namespace,))
            second.start()
            # Without one release at a time the second lists at once; with it, it waits for this one.
            if self._second_listed.wait(timeout=1.0):
                second.join()
            self.second = second
        else:
            self._second_listed.set()
        return items

    def patch(
        self, resource: Any, namespace: str | None, name: str, body: Any, **kwargs: Any
    ) -> dict[str, Any]:
        self.patches += 1
        return super().patch(resource, namespace, name, body, **kwargs)


def test_two_passes_releasing_the_enabling_binding_at_once_patch_it_once(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """The namespace is being deleted and its last pools go together. The binding was the
    operator's grant: a patch on what another pass released already reaches a binding that is gone,
    which the API server answers with 403 for the operator (a false warning, a forbidden request)."""
    _bindings(api_client).protect(namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.delete_namespaced_role_binding(OPERATOR_SERVICE_ACCOUNT, namespace)  # held by the finalizer
    kube = _AnotherReleaseAfterTheFirstList(api_client)
    kube.bindings = EnablingBindings(LiveReader(api_client), kube, lambda: OPERATOR_ACCOUNT)

    kube.bindings.release_if_unused(namespace)
    kube.second.join()

    assert kube.patches == 1, "the second release found nothing left to release"
    assert not rbac.list_namespaced_role_binding(
        namespace, field_selector=f"metadata.name={OPERATOR_SERVICE_ACCOUNT}"
    ).items


def test_where_another_role_is_bound_to_the_operator_the_enabling_binding_is_released_last(
    api_client: client.ApiClient, namespace: str, operator_kube: Kube, runnerpool_crd: dict[str, Any]
) -> None:
    """A platform team also bound ``view`` to the operator there, under a name listed after the
    enabling binding. In a namespace being deleted a released binding goes at once: released
    first, the enabling binding would take the operator's right to patch the other one with it,
    and that one would hold the namespace for good."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    enabling = rbac.read_namespaced_role_binding(OPERATOR_SERVICE_ACCOUNT, namespace)
    view = {
        "metadata": {"name": "zz-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": enabling.subjects,
    }
    rbac.create_namespaced_role_binding(namespace, view)
    bindings = EnablingBindings(
        LiveReader(api_client), operator_kube, lambda: OPERATOR_ACCOUNT, NAMESPACE_ROLE
    )
    try:
        bindings.protect(namespace)
        assert _binding_finalizers(api_client, namespace, "zz-view") == [BINDING_FINALIZER]
        for name in ("zz-view", OPERATOR_SERVICE_ACCOUNT):  # as the namespace's deletion does
            rbac.delete_namespaced_role_binding(name, namespace)

        bindings.release_if_unused(namespace)

        assert not rbac.list_namespaced_role_binding(namespace).items, "both bindings gone"
    finally:
        with contextlib.suppress(ApiException):
            rbac.patch_namespaced_role_binding("zz-view", namespace, {"metadata": {"finalizers": None}})


class _NoSecretsCached(LiveReader):
    """The operator's cache at a leadership start: it reads Secrets only in namespaces where a
    pool has passed since the process started, so none in a namespace without pools."""

    def list_secrets(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def _protect_by_hand(api_client: client.ApiClient, namespace: str) -> None:
    """The credential Secret as a pool's pass left it protected."""
    pat_secret(api_client, namespace)
    client.CoreV1Api(api_client).patch_namespaced_secret(
        CRED,
        namespace,
        {
            "metadata": {
                "finalizers": [CREDENTIAL_FINALIZER],
                "labels": {naming.CREDENTIAL_LABEL: naming.CREDENTIAL_VALUE},
            }
        },
    )


def test_at_leadership_start_a_namespace_without_pools_lets_its_secret_and_binding_go(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """A leader stopped between the namespace's last pool's finalizer and the releases leaves
    both protections on, and no pool's pass comes for them: deleting the namespace would hang.
    The next leader lets them go, the Secret first (its cache does not show it); a namespace
    that still has a pool keeps both for that pool's deregistration."""
    core = client.CoreV1Api(api_client)
    others = core.create_namespace({"metadata": {"generateName": "t-pool-"}}).metadata.name
    rbac = client.RbacAuthorizationV1Api(api_client)
    try:
        binding = rbac.read_namespaced_role_binding(OPERATOR_SERVICE_ACCOUNT, namespace)
        rbac.create_namespaced_role_binding(
            others,
            {
                "metadata": {"name": OPERATOR_SERVICE_ACCOUNT},
                "roleRef": binding.role_ref,
                "subjects": binding.subjects,
            },
        )
        create_pool(api_client, others, pool_manifest("still-here"))
        bindings = _bindings(api_client)
        for each in (namespace, others):
            _protect_by_hand(api_client, each)
            bindings.protect(each)
        reads = _NoSecretsCached(api_client)
        checks = SecretChecks(
            CredentialProtection(reads, Kube(api_client)), bindings, lambda namespace, ref: None
        )

        checks.release_unused([namespace, others])

        assert not _protected(api_client, namespace)
        assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == []
        assert _protected(api_client, others), "a pool there still needs it"
        assert _binding_finalizers(api_client, others, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]
    finally:
        rbac.patch_namespaced_role_binding(
            OPERATOR_SERVICE_ACCOUNT, others, {"metadata": {"finalizers": None}}
        )
        core.patch_namespaced_secret(CRED, others, {"metadata": {"finalizers": None}})
        core.delete_namespace(others)


def test_the_namespaces_last_writes_and_release_happen_once_however_many_pools_go_together(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: dict[str, Any]
) -> None:
    """Each gone pool's pass asks; a pass whose cache still shows the busy budget another pass
    deleted would delete it again after the binding, its grant there, went: a 403. A pool made
    there since starts the next teardown."""
    bindings = _bindings(api_client)
    bindings.protect(namespace)
    last_writes: list[str] = []

    assert bindings.release_if_unused(namespace, lambda: last_writes.append("first"))
    assert not bindings.release_if_unused(namespace, lambda: last_writes.append("second"))
    assert last_writes == ["first"]

    bindings.protect(namespace)  # a new pool's first pass
    assert _binding_finalizers(api_client, namespace, OPERATOR_SERVICE_ACCOUNT) == [BINDING_FINALIZER]
    assert bindings.release_if_unused(namespace, lambda: last_writes.append("next teardown"))
    assert last_writes == ["first", "next teardown"]


def test_the_leadership_starts_list_of_role_bindings_reads_every_page(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A cluster holds many RoleBindings: they are read a page at a time, and none is missed."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = rbac.read_namespaced_role_binding(OPERATOR_SERVICE_ACCOUNT, namespace)
    for n in range(3):
        rbac.create_namespaced_role_binding(
            namespace,
            {"metadata": {"name": f"extra-{n}"}, "roleRef": binding.role_ref, "subjects": binding.subjects},
        )
    kube = Kube(api_client)

    paged = [b["metadata"]["name"] for b in kube.list_paged(ROLE_BINDINGS, namespace, page=1)]

    assert len(paged) >= 4
    assert sorted(paged) == sorted(b["metadata"]["name"] for b in kube.list_items(ROLE_BINDINGS, namespace))
