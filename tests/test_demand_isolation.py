"""Demand is per tenant: what one namespace's pools count never depends on the pools, names or
credentials of another namespace. Pools on the real API server, deliveries over real HTTP to
the receiver, polls through the poller with in-memory GitHub clients, one per credential."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import BadCredentials, NotFound, RateLimited
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.jobs import ActiveJobs, Job, parse_delivery
from runnerpool.github.protocol import GitHubClient
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings, TenantSettings
from runnerpool.tenants import parse_allow_rule
from tests.demand_payloads import API, delivery, job_object
from tests.test_demand_recording import Clock
from tests.test_demand_tenants import CLUSTER, Pools, create_pool, deliver

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

REPO = "acme/app"
GPU = {"maxReplicas": 5}
API_URL_OF = GitHubSettings(api_url=API).api_url_of


def job(job_id: int, state: str, **kw: str) -> Job:
    return parse_delivery(
        delivery(job_object(job_id, state, ["self-hosted", "gpu"], repository=REPO, **kw), repository=REPO)
    )


def ordered(namespace: str, other_namespace: str, other_sorts: str) -> tuple[str, str]:
    """(team-a's namespace, the other tenant's): the other one sorting ``before`` or ``after``."""
    low, high = sorted((namespace, other_namespace))
    return (high, low) if other_sorts == "before" else (low, high)


@pytest.fixture
def receiver_of(api_client: client.ApiClient) -> Iterator[list[WebhookServer]]:
    servers: list[WebhookServer] = []
    yield servers
    for server in servers:
        server.stop()


def start_receiver(
    api_client: client.ApiClient,
    pools: Pools,
    servers: list[WebhookServer],
    tenants: TenantSettings | None = None,
) -> WebhookServer:
    allowed = (tenants or TenantSettings()).allows_pool
    writer = DemandWriter(Kube(api_client), pools, API_URL_OF, allowed=allowed)
    server = WebhookServer(0, lambda: (CLUSTER,), writer.record_job, host="127.0.0.1")
    server.start()
    servers.append(server)
    return server


@pytest.mark.parametrize("other_sorts", ["before", "after"])
@pytest.mark.parametrize("thief", ["aaa-thief", "zzz-thief", "app"])
def test_a_pool_in_another_namespace_cannot_take_team_as_delivered_job(
    api_client: client.ApiClient,
    namespace: str,
    other_namespace: str,
    receiver_of: list[WebhookServer],
    other_sorts: str,
    thief: str,
) -> None:
    """A credential-less pool with team-a's repository and labels, whatever its name and
    namespace: team-a's pool counts team-a's job from the cluster-signed delivery at once."""
    team_a, other = ordered(namespace, other_namespace, other_sorts)
    create_pool(api_client, team_a, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    create_pool(
        api_client,
        other,
        thief,
        repository=REPO,
        labels=["gpu"],
        autoscaling=GPU,
        credentialSecretName="none",
    )
    pools = Pools(api_client, [other, team_a])
    receiver = start_receiver(api_client, pools, receiver_of)
    status, _ = deliver(receiver, CLUSTER, 1, REPO, labels=["self-hosted", "gpu"])
    assert status == 200
    demand = pools.demand(team_a, "app")
    assert demand is not None and (demand.queued, sorted(demand.jobs)) == (1, ["1"])


def test_the_webhook_recorder_applies_the_allow_list(
    api_client: client.ApiClient, namespace: str, other_namespace: str, receiver_of: list[WebhookServer]
) -> None:
    """With --allow rules, a delivery moves no pool of a namespace the rules do not allow there."""
    create_pool(api_client, namespace, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    create_pool(api_client, other_namespace, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [namespace, other_namespace])
    tenants = TenantSettings(allow=(parse_allow_rule(f"{namespace}=org:acme"),))
    receiver = start_receiver(api_client, pools, receiver_of, tenants)
    assert deliver(receiver, CLUSTER, 2, REPO, labels=["self-hosted", "gpu"]) == (
        200,
        "job 2 queued: 1 pool(s)\n",
    )
    demand = pools.demand(namespace, "app")
    assert demand is not None and sorted(demand.jobs) == ["2"]
    assert pools.demand(other_namespace, "app") is None


class Refused:
    """A credential GitHub refuses: every call is a 401 (or ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.jobs_requests: list[str] = []
        self.error = error or BadCredentials(
            "GET /repos/acme/app/actions/runs: HTTP 401 (Bad credentials)", status=401
        )

    def active_jobs(self, repository: str) -> ActiveJobs:
        self.jobs_requests.append(repository)
        raise self.error


def poller(
    api_client: client.ApiClient, pools: Pools, clients: dict[str, Any], clock: Clock | None = None
) -> DemandPoller:
    """A poller whose clients are per namespace (each namespace's credential Secret); a namespace
    missing from ``clients`` has no credential Secret."""

    def client_of(pool: api.RunnerPool) -> GitHubClient:
        found: GitHubClient | None = clients.get(pool.namespace)
        if found is None:
            raise CredentialError.missing(
                f"Secret {pool.namespace}/{pool.spec.credential_secret_name} not found"
            )
        return found

    writer = DemandWriter(Kube(api_client), pools, API_URL_OF)
    return DemandPoller(pools, writer, client_of, API_URL_OF, interval=30, clock=clock or Clock())


@pytest.mark.parametrize("junk_first", [True, False])
def test_a_refused_credential_in_one_namespace_leaves_anothers_polling_untouched(
    api_client: client.ApiClient, namespace: str, other_namespace: str, junk_first: bool
) -> None:
    team_a, junk = namespace, other_namespace
    create_pool(api_client, team_a, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    create_pool(api_client, junk, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [junk, team_a] if junk_first else [team_a, junk])
    github = FakeGitHubClient(jobs={REPO: [job(3, "queued")]})
    refused = Refused()
    poller(api_client, pools, {team_a: github, junk: refused}).poll_once()
    demand = pools.demand(team_a, "app")
    assert demand is not None and (demand.queued, sorted(demand.jobs)) == (1, ["3"])
    assert github.jobs_requests == [REPO] and refused.jobs_requests == [REPO], "each credential asked once"
    junk_demand = pools.demand(junk, "app")
    assert junk_demand is not None and junk_demand.jobs == {}, "nothing listed with the refused credential"
    assert junk_demand.poll_problem is not None and junk_demand.poll_problem.reason == "BadCredentials"
    assert team_a_demand_problem(pools, team_a) is None, "the refusal is its own pool's alone"


def team_a_demand_problem(pools: Pools, namespace: str) -> api.Problem | None:
    demand = pools.demand(namespace, "app")
    return None if demand is None else demand.poll_problem


def test_a_refused_poll_is_on_the_pool_until_a_poll_goes_through(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A credential without Actions read access got a warning in the log per poll and nothing on
    the pool (DemandVisible said the repository was polled). A rate limit or an outage says
    nothing of the credential: the refusal known stays, and nothing is written."""
    create_pool(api_client, namespace, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [namespace])
    clients: dict[str, Any] = {
        namespace: Refused(
            BadCredentials(
                "GET /repos/acme/app/actions/runs: HTTP 403 (Resource not accessible by integration)",
                status=403,
            )
        )
    }
    clock = Clock()
    polls = poller(api_client, pools, clients, clock)
    polls.poll_once()
    problem = team_a_demand_problem(pools, namespace)
    assert problem is not None and problem.reason == "BadCredentials"
    assert "HTTP 403 (Resource not accessible by integration)" in problem.message
    assert '"Actions: read"' in problem.message

    written = pools.get(namespace, "app")["metadata"]["resourceVersion"]
    clients[namespace] = Refused(RateLimited("GET /repos/acme/app/actions/runs: HTTP 429", retry_after=1))
    polls.poll_once()
    assert team_a_demand_problem(pools, namespace) == problem
    assert pools.get(namespace, "app")["metadata"]["resourceVersion"] == written

    clients[namespace] = Refused(NotFound("GET /repos/acme/app/actions/runs: HTTP 404", status=404))
    clock.now += timedelta(minutes=1)  # past the rate limit's wait
    polls.poll_once()
    gone = team_a_demand_problem(pools, namespace)
    assert gone is not None and gone.message.startswith(f"{REPO} is not found with the pool's credential")

    clients[namespace] = FakeGitHubClient(jobs={REPO: [job(3, "queued")]})
    clock.now += timedelta(minutes=1)
    polls.poll_once()
    demand = pools.demand(namespace, "app")
    assert demand is not None and demand.poll_problem is None and sorted(demand.jobs) == ["3"]


def test_a_rate_limited_credential_slows_down_alone(
    api_client: client.ApiClient, namespace: str, other_namespace: str
) -> None:
    """GitHub tells namespace B's credential to wait 10 minutes: A's pool is polled at the
    normal interval all the same, B's credential not before its wait is over."""
    team_a, other = namespace, other_namespace
    create_pool(api_client, team_a, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    create_pool(api_client, other, "app", repository="acme/other", labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [other, team_a])
    github = FakeGitHubClient(jobs={REPO: []})
    limited = Refused(
        RateLimited("GET /repos/acme/other/actions/runs: HTTP 403 (rate limit)", retry_after=600)
    )
    clock = Clock()
    polls = poller(api_client, pools, {team_a: github, other: limited}, clock)
    assert polls.poll_once() == 30, "the next poll comes at the interval, for A"
    github.jobs[REPO] = [job(6, "queued")]
    clock.now += timedelta(seconds=30)
    polls.poll_once()
    demand = pools.demand(team_a, "app")
    assert demand is not None and sorted(demand.jobs) == ["6"]
    assert (len(github.jobs_requests), len(limited.jobs_requests)) == (2, 1)
    clock.now += timedelta(seconds=600)
    polls.poll_once()
    assert (len(github.jobs_requests), len(limited.jobs_requests)) == (3, 2)


@pytest.mark.parametrize("other_sorts", ["before", "after"])
def test_a_pool_never_holds_a_job_learnt_with_another_namespaces_credential(
    api_client: client.ApiClient, namespace: str, other_namespace: str, other_sorts: str
) -> None:
    team_b, other = ordered(namespace, other_namespace, other_sorts)
    create_pool(api_client, team_b, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    create_pool(api_client, other, "app18", repository=REPO, labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [team_b, other])
    github = FakeGitHubClient(jobs={REPO: [job(4, "queued"), job(5, "in_progress", runner="someone-else")]})
    poller(api_client, pools, {team_b: github}).poll_once()  # the other namespace has no credential
    demand = pools.demand(team_b, "app")
    assert demand is not None and sorted(demand.jobs) == ["4", "5"]
    assert pools.demand(other, "app18") is None


class PerRepository(FakeGitHubClient):
    """Listings per repository: an exception to raise, or the jobs to answer."""

    def __init__(self, answers: dict[str, Exception | list[Job]]) -> None:
        super().__init__()
        self.answers = answers

    def active_jobs(self, repository: str) -> ActiveJobs:
        answer = self.answers[repository]
        if isinstance(answer, Exception):
            raise answer
        return ActiveJobs(jobs=tuple(answer), spent=1)


def test_a_refusal_fixed_while_another_repository_fails_for_a_while_is_cleared(
    api_client: client.ApiClient, namespace: str
) -> None:
    """An organization pool polls two repositories. The one GitHub refused lists again while the
    other hits a rate limit: the refusal is gone (it was kept whole while any listing failed)."""
    create_pool(
        api_client,
        namespace,
        "app",
        organization="acme",
        labels=["gpu"],
        autoscaling={**GPU, "repositories": ["app", "lib"]},
    )
    pools = Pools(api_client, [namespace])
    forbidden = BadCredentials(
        "GET /repos/acme/app/actions/runs: HTTP 403 (Resource not accessible)", status=403
    )
    github = PerRepository({"acme/app": forbidden, "acme/lib": []})
    clock = Clock()
    polls = poller(api_client, pools, {namespace: github}, clock)
    polls.poll_once()
    assert team_a_demand_problem(pools, namespace) is not None

    github.answers = {
        "acme/app": [],
        "acme/lib": RateLimited("GET /repos/acme/lib/actions/runs: HTTP 429", retry_after=0),
    }
    clock.now += timedelta(minutes=1)
    polls.poll_once()
    assert team_a_demand_problem(pools, namespace) is None


def test_a_repository_hidden_from_one_credential_keeps_its_jobs_whoever_else_lists_them(
    api_client: client.ApiClient, namespace: str, other_namespace: str
) -> None:
    """A 404 ends only the jobs the pool's own credential listed before: that another tenant's
    credential lists the repository says nothing of whether this one could ever see it."""
    team_a, team_b = namespace, other_namespace
    for tenant in (team_a, team_b):
        create_pool(api_client, tenant, "app", repository=REPO, labels=["gpu"], autoscaling=GPU)
    pools = Pools(api_client, [team_a, team_b])
    clock = Clock()
    DemandWriter(Kube(api_client), pools, API_URL_OF).record_job(job(8, "queued"))
    hidden = Refused(NotFound(f"GET /repos/{REPO}/actions/runs: HTTP 404 (Not Found)", status=404))
    listing = FakeGitHubClient(jobs={REPO: [job(8, "queued")]})
    polls = poller(api_client, pools, {team_a: hidden, team_b: listing}, clock)
    for _ in range(2):  # the second poll knows team B's listing of job 8
        clock.now += timedelta(seconds=30)
        polls.poll_once()
    for tenant in (team_a, team_b):
        demand = pools.demand(tenant, "app")
        assert demand is not None and demand.queued == 1, tenant
