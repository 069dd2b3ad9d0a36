"""Demand recorded on real RunnerPool objects (real API server), from deliveries and from polls."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from github import Auth, Github
from kubernetes import client

from runnerpool import api
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.errors import NotFound
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.jobs import ActiveJobs, Job, parse_delivery
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.reads import ParsedPool
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings
from tests.demand_payloads import API, delivery, fixture, job_object
from tests.pools import autoscaling_of

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

REPO = "octo-org/hello-world"


class Pools:
    """The pool cache, read live so each step sees the previous one's write."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._namespace = namespace
        #: Runner pod names per pool, as the pod informer would show them.
        self.pods: dict[str, list[str]] = {}

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": name}} for name in self.pods.get(pool, [])]

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        return None  # not cached: the writer reads the pool itself

    def autoscaling_pools(self, scopes: Any = None) -> list[api.RunnerPool]:
        found = self._custom.list_namespaced_custom_object(
            api.GROUP, api.VERSION, self._namespace, api.PLURAL
        )
        return autoscaling_of(found["items"])

    def get(self, name: str) -> dict[str, Any]:
        return dict(
            self._custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, self._namespace, api.PLURAL, name
            )
        )


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 20, 17, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def create(api_client: client.ApiClient, namespace: str, name: str, **spec: Any) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, body
    )


def job(job_id: int, status: str, labels: list[str], **kw: Any) -> Job:
    return parse_delivery(delivery(job_object(job_id, status, labels, **kw)))


@pytest.fixture
def pools(api_client: client.ApiClient, namespace: str) -> Pools:
    create(
        api_client,
        namespace,
        "gpu",
        repository="octo-org/hello-world",
        labels=["gpu"],
        autoscaling={"maxReplicas": 50},
    )
    create(api_client, namespace, "cpu", repository="octo-org/hello-world", autoscaling={"maxReplicas": 50})
    create(api_client, namespace, "fixed", repository="octo-org/hello-world", replicas=2)
    return Pools(api_client, namespace)


def demand(pools: Pools, name: str) -> api.Demand | None:
    return api.RunnerPool.model_validate(pools.get(name)).status.demand


def test_a_queued_job_counts_in_one_autoscaling_pool_it_matches_and_nowhere_else(
    api_client: client.ApiClient, pools: Pools
) -> None:
    """Both autoscaling pools could take a plain self-hosted job: the plainer one (cpu) counts it."""
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of)
    assert writer.record_job(job(1, "queued", ["self-hosted"])) == 1
    assert writer.record_job(job(2, "queued", ["self-hosted", "gpu"])) == 1
    before = {name: pools.get(name)["metadata"]["resourceVersion"] for name in ("gpu", "cpu", "fixed")}
    assert writer.record_job(job(3, "queued", ["self-hosted", "no-such-label"])) == 0
    assert {name: pools.get(name)["metadata"]["resourceVersion"] for name in before} == before
    gpu, cpu = demand(pools, "gpu"), demand(pools, "cpu")
    assert gpu is not None and (gpu.queued, sorted(gpu.jobs)) == (1, ["2"])
    assert cpu is not None and (cpu.queued, sorted(cpu.jobs)) == (1, ["1"])
    assert demand(pools, "fixed") is None
    # Taken by a gpu runner: busy there, no longer wanted by cpu.
    pools.pods["gpu"] = ["gpu-x1y2z"]
    assert writer.record_job(job(1, "in_progress", ["self-hosted"], runner="gpu-x1y2z")) == 2
    gpu, cpu = demand(pools, "gpu"), demand(pools, "cpu")
    assert gpu is not None and (gpu.queued, gpu.busy) == (1, 1)
    assert cpu is not None and (cpu.queued, cpu.busy) == (0, 0)


def test_a_job_delivered_queued_counts_whatever_status_its_object_shows(
    api_client: client.ApiClient, pools: Pools
) -> None:
    """GitHub names a delivery's state in ``action``; a job with an environment comes
    ``queued`` while its object still says ``waiting`` (GitHub's own example payload). Read
    from the object, that job was dropped, and its pool waited for the next poll, or for ever.
    Waiting on a protection rule (``action: waiting``) wants no runner yet."""
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of)
    waiting = delivery(job_object(4, "waiting", ["self-hosted", "gpu"]))
    assert writer.record_job(parse_delivery(waiting)) == 0, "action: waiting"

    assert writer.record_job(parse_delivery({**waiting, "action": "queued"})) == 1
    gpu = demand(pools, "gpu")
    assert gpu is not None and (gpu.queued, sorted(gpu.jobs)) == (1, ["4"])


def test_deliveries_to_two_replicas_at_once_all_count(api_client: client.ApiClient, pools: Pools) -> None:
    replicas = [
        DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of) for _ in range(2)
    ]
    jobs = [job(100 + i, "queued", ["self-hosted", "gpu"]) for i in range(30)]
    errors: list[Exception] = []

    def deliver(writer: DemandWriter, item: Job) -> None:
        try:
            writer.record_job(item)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=deliver, args=(replicas[i % 2], item)) for i, item in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 30


@pytest.fixture
def github() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def test_polling_repairs_lost_deliveries(
    api_client: client.ApiClient, pools: Pools, github: responses.RequestsMock
) -> None:
    clock = Clock()
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, clock=clock)
    # Delivered: job 1 queued. Lost: job 1's completion, and job 2 being queued.
    writer.record_job(job(1, "queued", ["self-hosted", "gpu"]))
    runs = "/repos/octo-org/hello-world/actions/runs"
    pattern = re.compile(r"https://api\.github\.com(:443)?" + re.escape(runs) + r"(/\d+/jobs)?(\?.*)?$")
    job_2_queued = [True]

    def answer(request: Any) -> tuple[int, dict[str, str], str]:
        if not job_2_queued[0]:
            return 200, {}, json.dumps({"total_count": 0, "workflow_runs": []})
        if "/jobs" in request.url:
            return (
                200,
                {},
                json.dumps(
                    {"total_count": 1, "jobs": [job_object(2, "queued", ["self-hosted", "gpu"], run_id=21)]}
                ),
            )
        if "status=queued" in request.url:
            return (
                200,
                {},
                json.dumps({"total_count": 1, "workflow_runs": [run | {"id": 21, "status": "queued"}]}),
            )
        return 200, {}, json.dumps({"total_count": 0, "workflow_runs": []})

    run = fixture("repo-workflow-runs.json")["workflow_runs"][0]
    github.add_callback(responses.GET, pattern, callback=answer)
    gh = Github(auth=Auth.Token("ghp_test"), base_url=API, retry=None, lazy=True)
    poller = DemandPoller(
        pools,
        writer,
        lambda pool: PyGithubClient(gh),
        GitHubSettings(api_url=API).api_url_of,
        interval=30,
        clock=clock,
    )
    clock.now += timedelta(seconds=10)
    poller.poll_once()
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 2, "job 1 stays until the grace passes; job 2 counts at once"
    clock.now += poller.grace
    delay = poller.poll_once()
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 1 and gpu.jobs["1"].state == "completed"
    assert delay == 30
    # Job 2 ran and completed, its completion lost too: listed before, gone now, so ended at once.
    job_2_queued[0] = False
    clock.now += timedelta(seconds=30)
    poller.poll_once()
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 0 and gpu.jobs["2"].state == "completed"


def test_a_polled_job_two_pools_could_take_counts_in_one(api_client: client.ApiClient, pools: Pools) -> None:
    """Polling applies the one-pool rule too: the plain cpu pool counts a plain job, the gpu
    pool hears of it once a gpu runner takes it."""
    clock = Clock()
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, clock=clock)
    github = FakeGitHubClient()
    github.jobs[REPO] = [job(40, "queued", ["self-hosted"])]
    poller = DemandPoller(
        pools, writer, lambda pool: github, GitHubSettings(api_url=API).api_url_of, interval=30, clock=clock
    )
    poller.poll_once()
    cpu, gpu = demand(pools, "cpu"), demand(pools, "gpu")
    assert cpu is not None and cpu.queued == 1
    assert gpu is None or gpu.queued == 0
    pools.pods["gpu"] = ["gpu-x1y2z"]
    github.jobs[REPO] = [job(40, "in_progress", ["self-hosted"], runner="gpu-x1y2z")]
    clock.now += timedelta(seconds=30)
    poller.poll_once()
    cpu, gpu = demand(pools, "cpu"), demand(pools, "gpu")
    assert cpu is not None and (cpu.queued, cpu.busy) == (0, 0)
    assert gpu is not None and (gpu.queued, gpu.busy) == (0, 1)


class GoneRepository(FakeGitHubClient):
    """GitHub answering 404 for the repository: deleted, renamed, or no longer visible."""

    def active_jobs(self, repository: str) -> ActiveJobs:
        self.jobs_requests.append(repository)
        raise NotFound(f"GET /repos/{repository}/actions/runs: HTTP 404 (Not Found)", status=404)


def test_a_repository_deleted_after_a_poll_listed_its_jobs_ends_them(
    api_client: client.ApiClient, pools: Pools
) -> None:
    """The credential saw the repository, and now gets 404: it went, and its jobs will never be
    listed again, nor delivered; left tracked, they would hold runners for ever."""
    clock = Clock()
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, clock=clock)
    github: FakeGitHubClient = FakeGitHubClient(jobs={REPO: [job(60, "queued", ["self-hosted", "gpu"])]})
    poller = DemandPoller(
        pools, writer, lambda pool: github, GitHubSettings(api_url=API).api_url_of, interval=30, clock=clock
    )
    poller.poll_once()
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 1
    github = GoneRepository()
    clock.now += timedelta(seconds=30)  # within the grace: a job listed before ends at once
    poller.poll_once()
    assert github.jobs_requests == [REPO]
    gpu = demand(pools, "gpu")
    assert gpu is not None and gpu.queued == 0 and gpu.jobs["60"].state == "completed"


def test_a_repository_the_credential_cannot_see_keeps_the_jobs_its_deliveries_bring(
    api_client: client.ApiClient, namespace: str
) -> None:
    """GitHub answers 404 for a private repository the credential cannot see (an App installed on
    selected repositories, a PAT without the repo scope) while its deliveries come. Ending what
    only they told after the grace left a burst's queued jobs, beyond maxReplicas, unserved."""
    create(
        api_client,
        namespace,
        "org",
        organization="octo-org",
        labels=["big"],
        autoscaling={"maxReplicas": 1},
    )
    pools = Pools(api_client, namespace)
    clock = Clock()
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, clock=clock)
    writer.record_job(job(61, "queued", ["self-hosted", "big"]))
    github = GoneRepository()
    poller = DemandPoller(
        pools, writer, lambda pool: github, GitHubSettings(api_url=API).api_url_of, interval=30, clock=clock
    )
    clock.now += poller.grace
    poller.poll_once()
    assert github.jobs_requests == [REPO], "the repository of the job it tracks is polled"
    org = demand(pools, "org")
    assert org is not None and org.queued == 1 and org.jobs["61"].state == "queued"
    assert org.poll_problem is not None, "the pool says its repository is not found"


def test_a_polled_job_no_pool_can_take_leaves_the_others_counted(
    api_client: client.ApiClient, pools: Pools
) -> None:
    """A repository also runs jobs for GitHub-hosted runners, or for a pool just deleted: such a
    job is no pool's, and the jobs beside it still count (it made every poll fail before)."""
    clock = Clock()
    writer = DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, clock=clock)
    github = FakeGitHubClient()
    github.jobs[REPO] = [
        job(70, "queued", ["ubuntu-latest"]),
        job(71, "queued", ["self-hosted", "no-such-label"]),
        job(72, "queued", ["self-hosted", "gpu"]),
    ]
    poller = DemandPoller(
        pools, writer, lambda pool: github, GitHubSettings(api_url=API).api_url_of, interval=30, clock=clock
    )
    poller.poll_once()
    gpu, cpu = demand(pools, "gpu"), demand(pools, "cpu")
    assert gpu is not None and (gpu.queued, sorted(gpu.jobs)) == (1, ["72"])
    assert cpu is None or cpu.queued == 0
