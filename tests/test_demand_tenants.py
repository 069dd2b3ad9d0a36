"""Per-tenant webhook secrets and the one-pool rule, end to end: real HTTP deliveries to the
receiver, pools and Secrets on the real API server, demand written by the demand writer.

A pool's own secret is tried only at its URL, ``/webhook/<namespace>/<secret>``
(``demand.verification``); the cluster-wide secret at ``/webhook``."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api
from runnerpool.demand.matching import scope_keys
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import sign
from runnerpool.demand.verification import Verifier
from runnerpool.demand.writer import DemandWriter
from runnerpool.reads import ParsedPool, parse_pool
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings
from tests.demand_payloads import API, delivery, job_object
from tests.pools import autoscaling_of, by_name_reads
from tests.test_demand_webhook import post as webhook_post

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

CLUSTER = b"the operator's cluster-wide secret"
ALICE, BOB = b"alice's webhook secret", b"bob's webhook secret"


class Pools:
    """The pool cache across the test's namespaces, read live so each step sees the last write,
    and looked up by scope as the cache's index does."""

    def __init__(self, api_client: client.ApiClient, namespaces: list[str]) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._namespaces = namespaces

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return []

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        return None  # not cached: the writer reads the pool itself

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        found = self._custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
        return [parse_pool(item) for item in found["items"]]

    def autoscaling_pools(self, scopes: Any = None) -> list[api.RunnerPool]:
        items: list[dict[str, Any]] = []
        for namespace in self._namespaces:
            found = self._custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
            items.extend(found["items"])
        pools = autoscaling_of(items)
        # What the cache's scope index gives (runnerpool.watches): the pools under those keys.
        if scopes is None:
            return pools
        api_url_of = GitHubSettings(api_url=API).api_url_of
        return [p for p in pools if set(scope_keys(p, api_url_of(p))) & set(scopes)]

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self._custom.get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name)
        )

    def demand(self, namespace: str, name: str) -> api.Demand | None:
        return api.RunnerPool.model_validate(self.get(namespace, name)).status.demand


def create_pool(api_client: client.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, body
    )


def put_secret(api_client: client.ApiClient, namespace: str, name: str, value: bytes) -> None:
    core = client.CoreV1Api(api_client)
    data = {"webhook-secret": base64.b64encode(value).decode()}
    try:
        core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "data": data})
    except ApiException as err:
        if err.status != 409:
            raise
        core.patch_namespaced_secret(name, namespace, {"data": data})


@pytest.fixture
def tenants(api_client: client.ApiClient, namespace: str, other_namespace: str) -> Pools:
    """Alice's namespace: her pool with her secret, and one trusting the cluster-wide secret;
    Bob's: his pool with his secret, and one naming a Secret that does not exist."""
    alice, bob = namespace, other_namespace
    put_secret(api_client, alice, "hooks", ALICE)
    put_secret(api_client, bob, "hooks", BOB)
    own = {"maxReplicas": 5, "webhookSecretRef": {"name": "hooks"}}
    create_pool(api_client, alice, "alice", repository="octo-org/alice-app", autoscaling=own)
    create_pool(api_client, alice, "shared", repository="octo-org/shared-app", autoscaling={"maxReplicas": 5})
    create_pool(api_client, bob, "bob", repository="octo-org/bob-app", autoscaling=own)
    missing = {"maxReplicas": 5, "webhookSecretRef": {"name": "not-there"}}
    create_pool(api_client, bob, "lost", repository="octo-org/lost-app", autoscaling=missing)
    return Pools(api_client, [alice, bob])


@pytest.fixture
def receiver(api_client: client.ApiClient, tenants: Pools) -> Iterator[WebhookServer]:
    kube = Kube(api_client)
    # retry_gap=0: a delivery no cached secret verifies re-reads the Secrets at once.
    verifier = Verifier(lambda: (CLUSTER,), tenants, PoolSecrets(by_name_reads(kube), retry_gap=0.0))
    server = WebhookServer(
        0,
        verifier,
        DemandWriter(kube, tenants, GitHubSettings(api_url=API).api_url_of).record_job,
        host="127.0.0.1",
    )
    server.start()
    yield server
    server.stop()


def deliver(
    server: WebhookServer,
    secret: bytes,
    job_id: int,
    repository: str,
    path: str = "/webhook",
    guid: str | None = None,
    **kw: Any,
) -> tuple[int, str]:
    labels = kw.pop("labels", ["self-hosted"])
    body = json.dumps(
        delivery(job_object(job_id, "queued", labels, repository=repository, **kw), repository=repository)
    ).encode()
    return post(server, "workflow_job", body, secret, path, guid)


def post(
    server: WebhookServer,
    event: str,
    body: bytes,
    secret: bytes,
    path: str = "/webhook",
    guid: str | None = None,
) -> tuple[int, str]:
    """``guid``: the ``X-GitHub-Delivery`` (default: a new one)."""
    return webhook_post(server, body, event=event, signature=sign(secret, body), delivery_id=guid, path=path)


def versions(pools: Pools, *keys: tuple[str, str]) -> list[str]:
    return [pools.get(*key)["metadata"]["resourceVersion"] for key in keys]


def url(namespace: str, secret: str = "hooks") -> str:
    """Where the pools of ``namespace`` that trust Secret ``secret`` take their deliveries."""
    return f"/webhook/{namespace}/{secret}"


def test_a_tenants_signed_delivery_for_another_tenants_repository_changes_nothing(
    receiver: WebhookServer, tenants: Pools, namespace: str, other_namespace: str
) -> None:
    bob = (other_namespace, "bob")
    before = versions(tenants, bob)
    # Alice signs correctly with her own secret, for Bob's repository: not at Bob's URL, nor
    # at the cluster's; at hers it verifies, and moves only her pools (none of this repository).
    status, text = deliver(receiver, ALICE, 1, "octo-org/bob-app", url(other_namespace))
    assert status == 401, text
    assert deliver(receiver, ALICE, 1, "octo-org/bob-app")[0] == 401
    at_hers = deliver(receiver, ALICE, 1, "octo-org/bob-app", url(namespace))
    assert at_hers == (200, "job 1 queued: 0 pool(s)\n")
    # Signed with the cluster-wide secret, which Bob's pool no longer trusts: accepted, moves nothing.
    status, text = deliver(receiver, CLUSTER, 2, "octo-org/bob-app")
    assert (status, text) == (200, "job 2 queued: 0 pool(s)\n")
    assert versions(tenants, bob) == before
    assert tenants.demand(*bob) is None


def test_the_owners_delivery_moves_the_owners_pool(
    receiver: WebhookServer, tenants: Pools, namespace: str, other_namespace: str
) -> None:
    status, text = deliver(receiver, BOB, 3, "octo-org/bob-app", url(other_namespace))
    assert (status, text) == (200, "job 3 queued: 1 pool(s)\n")
    # At the cluster-wide URL a pool's own secret is not tried: the body is never parsed to
    # find which pools' secrets to try.
    assert deliver(receiver, BOB, 33, "octo-org/bob-app")[0] == 401
    demand = tenants.demand(other_namespace, "bob")
    assert demand is not None and (demand.queued, sorted(demand.jobs)) == (1, ["3"])
    assert tenants.demand(namespace, "alice") is None


def test_the_cluster_wide_secret_still_moves_pools_without_their_own(
    receiver: WebhookServer, tenants: Pools, namespace: str
) -> None:
    status, text = deliver(receiver, CLUSTER, 4, "octo-org/shared-app")
    assert (status, text) == (200, "job 4 queued: 1 pool(s)\n")
    demand = tenants.demand(namespace, "shared")
    assert demand is not None and demand.queued == 1
    assert deliver(receiver, ALICE, 5, "octo-org/shared-app")[0] == 401, (
        "a tenant's secret is not the cluster's"
    )


def test_one_event_sent_to_two_tenants_webhooks_counts_for_both(
    api_client: client.ApiClient,
    receiver: WebhookServer,
    tenants: Pools,
    namespace: str,
    other_namespace: str,
) -> None:
    """GitHub sends one event to every webhook subscribed to it under one GUID: each tenant's
    own webhook is a delivery of its own, and only a repeat to the same secret is a duplicate."""
    own = {"maxReplicas": 5, "webhookSecretRef": {"name": "hooks"}}
    for tenant in (namespace, other_namespace):
        create_pool(api_client, tenant, "both", repository="octo-org/both-app", autoscaling=own)
    guid = "58474f00-b361-11eb-836d-0e4f3503ccbe"
    for tenant, secret in ((namespace, ALICE), (other_namespace, BOB)):
        answer = deliver(receiver, secret, 12, "octo-org/both-app", url(tenant), guid)
        assert answer == (200, "job 12 queued: 1 pool(s)\n"), tenant
        demand = tenants.demand(tenant, "both")
        assert demand is not None and sorted(demand.jobs) == ["12"], tenant
    again = deliver(receiver, BOB, 12, "octo-org/both-app", url(other_namespace), guid)
    assert again == (200, "duplicate delivery, already counted\n")


def test_a_rotated_tenant_secret_verifies_with_both_keys(
    api_client: client.ApiClient, receiver: WebhookServer, tenants: Pools, namespace: str
) -> None:
    alice = url(namespace)
    assert deliver(receiver, ALICE, 6, "octo-org/alice-app", alice)[0] == 200  # the old secret, now cached
    new = b"alice's next webhook secret"
    put_secret(api_client, namespace, "hooks", ALICE + b"\n" + new + b"\n")
    assert deliver(receiver, new, 7, "octo-org/alice-app", alice) == (200, "job 7 queued: 1 pool(s)\n")
    assert deliver(receiver, ALICE, 8, "octo-org/alice-app", alice) == (200, "job 8 queued: 1 pool(s)\n")
    demand = tenants.demand(namespace, "alice")
    assert demand is not None and sorted(demand.jobs) == ["6", "7", "8"]


def test_a_missing_tenant_secret_moves_nothing_and_says_so(
    api_client: client.ApiClient, receiver: WebhookServer, tenants: Pools, other_namespace: str
) -> None:
    lost = (other_namespace, "lost")
    before = versions(tenants, lost)
    lost_url = url(other_namespace, "not-there")
    assert deliver(receiver, BOB, 9, "octo-org/lost-app", lost_url)[0] == 401, "no secret to verify with"
    assert deliver(receiver, CLUSTER, 9, "octo-org/lost-app") == (200, "job 9 queued: 0 pool(s)\n")
    assert versions(tenants, lost) == before
    problem = PoolSecrets(by_name_reads(Kube(api_client))).problem(
        other_namespace, api.WebhookSecretRef(name="not-there")
    )
    assert problem is not None and problem.cause == f"Secret {other_namespace}/not-there not found"


def test_two_pools_could_take_the_job_and_exactly_one_counts_it(
    api_client: client.ApiClient, receiver: WebhookServer, tenants: Pools, namespace: str
) -> None:
    """An organization pool and the repository's own pool both match a plain job."""
    create_pool(api_client, namespace, "org-wide", organization="octo-org", autoscaling={"maxReplicas": 5})
    status, text = deliver(receiver, CLUSTER, 10, "octo-org/shared-app")
    assert (status, text) == (200, "job 10 queued: 1 pool(s)\n")
    shared, org_wide = tenants.demand(namespace, "shared"), tenants.demand(namespace, "org-wide")
    assert shared is not None and shared.queued == 1, (
        "the repository pool counts it (GitHub routes there first)"
    )
    # Not counted there, but the delivery shows the organization's webhook reaches the operator.
    assert org_wide is not None and (org_wide.queued, org_wide.jobs) == (0, {})
    assert org_wide.first_delivery_at is not None


def _ping(server: WebhookServer, secret: bytes, payload: dict[str, Any], path: str) -> int:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1, **payload}).encode()
    return post(server, "ping", body, secret, path)[0]


def test_a_new_webhook_with_a_pools_own_secret_gets_its_ping_answered(
    api_client: client.ApiClient, receiver: WebhookServer, tenants: Pools, other_namespace: str
) -> None:
    """GitHub pings a new webhook: a repository's names the repository, an organization's the organization."""
    repo = {"repository": {"full_name": "octo-org/bob-app", "url": f"{API}/repos/octo-org/bob-app"}}
    bob = url(other_namespace)
    assert _ping(receiver, BOB, repo, bob) == 200
    assert _ping(receiver, ALICE, repo, bob) == 401
    org_scaling = {"maxReplicas": 5, "webhookSecretRef": {"name": "hooks"}}
    create_pool(api_client, other_namespace, "bob-org", organization="bobs-org", autoscaling=org_scaling)
    org = {"organization": {"login": "bobs-org", "url": f"{API}/orgs/bobs-org"}}
    assert _ping(receiver, BOB, org, bob) == 200
    assert _ping(receiver, ALICE, org, bob) == 401
