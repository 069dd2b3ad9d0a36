"""Job queue-wait and run-time histograms by repository and workflow, from real deliveries.

Deliveries in GitHub's shape are recorded on real RunnerPool objects (real API server) the
way the webhook receiver and the poller record them (``DemandWriter``); what is asserted is
what a Prometheus scrape of the process would show.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from runnerpool import api
from runnerpool.cli import parser, settings_from
from runnerpool.demand.job_labels import JobLabels
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.jobs import Job, parse_delivery
from runnerpool.runtime.kube import Kube
from runnerpool.settings import DemandSettings, GitHubSettings
from tests.demand_payloads import API, delivery, job_object
from tests.test_demand_recording import Pools, create

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

REPO = "octo-org/hello-world"
RUNNER = "ci-x1y2z"
CREATED, STARTED, COMPLETED = "2030-01-20T17:42:00Z", "2030-01-20T17:45:30Z", "2030-01-20T17:55:30Z"


@pytest.fixture
def pools(api_client: client.ApiClient, namespace: str) -> Pools:
    create(api_client, namespace, "ci", organization="octo-org", autoscaling={"maxReplicas": 50})
    found = Pools(api_client, namespace)
    found.pods["ci"] = [RUNNER]
    return found


def writer(api_client: client.ApiClient, pools: Pools, **settings: Any) -> DemandWriter:
    labels = JobLabels(DemandSettings(**settings))
    return DemandWriter(Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, job_labels=labels)


def job(job_id: int, status: str, *, workflow: str = "CI", repository: str = REPO) -> Job:
    item = job_object(
        job_id,
        status,
        ["self-hosted"],
        repository=repository,
        runner=None if status == "queued" else RUNNER,
        created=CREATED,
        started=None if status == "queued" else STARTED,
        completed=COMPLETED if status == "completed" else None,
    )
    item["workflow_name"] = workflow
    return parse_delivery(delivery(item, repository=repository))


def sample(name: str, namespace: str, repository: str, workflow: str) -> float | None:
    labels = {"namespace": namespace, "pool": "ci", "repository": repository, "workflow": workflow}
    return REGISTRY.get_sample_value(name, labels)


def label_sets(name: str, namespace: str) -> set[tuple[str, str]]:
    return {
        (s.labels["repository"], s.labels["workflow"])
        for metric in REGISTRY.collect()
        for s in metric.samples
        if s.name == f"{name}_count" and s.labels.get("namespace") == namespace
    }


def test_a_job_queued_started_and_completed_is_observed_once_in_each_histogram(
    api_client: client.ApiClient, namespace: str, pools: Pools
) -> None:
    """Every delivery reaches two receiver replicas, and a poll sees the running job too:
    still one wait and one run, with GitHub's times, labelled by repository and workflow."""
    replicas = [writer(api_client, pools), writer(api_client, pools)]
    for status in ("queued", "in_progress", "completed"):
        for replica in replicas:
            replica.record_job(job(7, status))
        if status == "in_progress":
            pool = api.RunnerPool.model_validate(pools.get("ci"))
            replicas[0].repair(pool, [job(7, status)], [REPO], grace=timedelta(minutes=1))

    assert sample("runnerpool_job_queue_seconds_count", namespace, REPO, "CI") == 1
    assert sample("runnerpool_job_queue_seconds_sum", namespace, REPO, "CI") == 210
    assert sample("runnerpool_job_run_seconds_count", namespace, REPO, "CI") == 1
    assert sample("runnerpool_job_run_seconds_sum", namespace, REPO, "CI") == 600
    assert sample("runnerpool_job_queue_seconds_bucket", namespace, REPO, "CI") is None, "needs le"
    le = {"namespace": namespace, "pool": "ci", "repository": REPO, "workflow": "CI"}
    assert REGISTRY.get_sample_value("runnerpool_job_queue_seconds_bucket", {**le, "le": "120.0"}) == 0
    assert REGISTRY.get_sample_value("runnerpool_job_queue_seconds_bucket", {**le, "le": "300.0"}) == 1

    replicas[0].forget(namespace, "ci")
    assert label_sets("runnerpool_job_queue_seconds", namespace) == set(), "a deleted pool's series end"


def test_past_the_cap_new_workflows_and_repositories_are_counted_as_other(
    api_client: client.ApiClient, namespace: str, pools: Pools
) -> None:
    recorder = writer(api_client, pools, job_metrics_max_label_sets=2)
    started = [
        ("build", REPO),
        ("test", REPO),
        ("deploy", REPO),
        ("lint", "octo-org/second"),
        ("build", REPO),
    ]
    for job_id, (workflow, repository) in enumerate(started, start=1):
        recorder.record_job(job(job_id, "in_progress", workflow=workflow, repository=repository))

    assert label_sets("runnerpool_job_queue_seconds", namespace) == {
        (REPO, "build"),
        (REPO, "test"),
        (REPO, "other"),  # deploy: a third workflow of a repository that has a label set
        ("other", "other"),  # a repository with none
    }
    assert sample("runnerpool_job_queue_seconds_count", namespace, REPO, "build") == 2, (
        "kept ones still count"
    )


def test_the_labels_can_be_dropped(api_client: client.ApiClient, namespace: str, pools: Pools) -> None:
    settings = settings_from(parser().parse_args(["--job-metrics-labels", "none"]))
    recorder = DemandWriter(
        Kube(api_client), pools, GitHubSettings(api_url=API).api_url_of, job_labels=JobLabels(settings.demand)
    )
    recorder.record_job(job(1, "in_progress", workflow="build"))
    recorder.record_job(job(2, "completed", workflow="test"))
    assert label_sets("runnerpool_job_queue_seconds", namespace) == {("", "")}
    assert label_sets("runnerpool_job_run_seconds", namespace) == {("", "")}
    assert sample("runnerpool_job_run_seconds_count", namespace, "", "") == 1


def test_repository_only_keeps_the_repository(
    api_client: client.ApiClient, namespace: str, pools: Pools
) -> None:
    recorder = writer(api_client, pools, job_metrics_labels="repository")
    recorder.record_job(job(1, "in_progress", workflow="build"))
    recorder.record_job(job(2, "in_progress", workflow="test"))
    assert label_sets("runnerpool_job_queue_seconds", namespace) == {(REPO, "")}
    assert sample("runnerpool_job_queue_seconds_count", namespace, REPO, "") == 2
