"""Every metric the Grafana dashboard names is one a running operator exports.

A panel whose query names a series nobody exports shows "No data" forever, and nothing else
notices: neither promtool (the query parses) nor Grafana (an empty result is not an error).
So the operator runs here as on a cluster (its console script, deploy/'s ServiceAccount) and
is made to export its labelled series the way a user's would: an autoscaling pool that takes
a job queued on the fake GitHub and delivered by webhook (demand, pickup latency, job
duration, runners, tokens, GitHub requests and budget, deliveries) and a pool whose PAT
GitHub refuses (token failures). ``/metrics`` is then scraped as Prometheus scrapes it (HTTPS,
a token bound to deploy/'s metrics-reader role) and read with prometheus-client's own text
parser, and each name in each panel's query and each variable's query must be a series in it.
A histogram counts by the series it exports (``_bucket``, ``_sum``, ``_count``), a counter by
``_total``: what a PromQL query can select.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from runnerpool import naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import BAD_PAT, REPO
from tests.e2e.test_metrics_auth import scrape
from tests.helpers import wait_for
from tests.pools import create_pool, play_kubelet, pool_manifest
from testworld.envtest.serviceaccount import metrics_reader_binding, token_of
from testworld.fakegithub import FakeGitHub
from testworld.ports import free_port
from testworld.promql_names import metric_names, variable_query_names
from testworld.simulator import OperatorProcess, RunnerSimulator
from testworld.wait import poll_until

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "dashboard.json"
SECRET = b"the dashboard test's webhook secret"
#: Short enough to complete (and be observed) while the test waits.
JOB_SECONDS = 1.0
TIMEOUT = 90.0


def dashboard_names(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    """Each metric name the dashboard reads, with the panels (or variables) that read it."""
    names: dict[str, list[str]] = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in metric_names(target["expr"]):
                names.setdefault(name, []).append(panel["title"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            for name in variable_query_names(variable["query"]["query"]):
                names.setdefault(name, []).append(f"${variable['name']}")
    return names


def exported_series(operator: OperatorProcess, token: str) -> set[str]:
    """The names of the series in one scrape (families without a sample export nothing)."""
    status, body = scrape(operator, token)
    assert status == 200, body
    families = text_string_to_metric_families(body)
    return {sample.name for family in families for sample in family.samples}


@pytest.fixture
def prometheus_token(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """A ServiceAccount bound to deploy/'s metrics reader role, as Prometheus's is: the scrape
    is the one a cluster's Prometheus makes (HTTPS, ``--metrics-secure``)."""
    client.CoreV1Api(api_client).create_namespaced_service_account(
        namespace, {"metadata": {"name": "prometheus"}}
    )
    token = token_of(api_client, namespace, "prometheus", seconds=600)
    with metrics_reader_binding(api_client, namespace, "prometheus"):
        yield token


def stuck_pool(api_client: client.ApiClient, namespace: str) -> None:
    """A pool whose one pod, started by the simulator, the kubelet then reports crash-looping."""
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, pool_manifest("stuck", repo=REPO, replicas=1))

    def started() -> str:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}=stuck").items
        running = [p.metadata.name for p in pods if p.status.phase == "Running"]
        return running[0] if running else ""

    pod: str = wait_for(started, TIMEOUT, 0.2, "the stuck pool's pod")
    play_kubelet(api_client, namespace, pod, state="waiting")


def missing_from(exported: set[str], wanted: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: panels for name, panels in sorted(wanted.items()) if name not in exported}


def test_every_metric_a_panel_names_is_exported(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
    prometheus_token: str,
    tmp_path: Path,
) -> None:
    wanted = dashboard_names(json.loads(DASHBOARD.read_text()))
    assert len(wanted) >= 20, f"the dashboard reads only {sorted(wanted)}"

    secret_file = tmp_path / "webhook-secret"
    secret_file.write_bytes(SECRET + b"\n")
    port = free_port()
    operator = start_operator(
        "--metrics-secure", "--runner-sync-interval", "2", "--demand-poll-interval", "2"
    )
    # The receiver runs apart: its delivery metrics are scraped from it (both parts sit behind
    # the one metrics Service).
    receiver = start_operator(
        "--metrics-secure",
        "--webhook-secret-file",
        str(secret_file),
        webhook_port=port,
        component="webhook-receiver",
    )
    sender = fake_github.send_webhooks(f"http://127.0.0.1:{port}/webhook", SECRET)
    try:
        autoscaling = {"minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "5s"}
        create_pool(api_client, namespace, pool_manifest("served", repo=REPO, autoscaling=autoscaling))
        client.CoreV1Api(api_client).create_namespaced_secret(
            namespace, {"metadata": {"name": "revoked-pat"}, "stringData": {"token": BAD_PAT}}
        )
        create_pool(
            api_client,
            namespace,
            pool_manifest("locked", repo=REPO, replicas=1, credentialSecretName="revoked-pat"),
        )
        stuck_pool(api_client, namespace)
        label = naming.pool_runner_label(namespace, "served")
        job = fake_github.queue_job(REPO, ["self-hosted", label], JOB_SECONDS)
        wait_for(
            lambda: fake_github.job(job)["status"] == "completed",
            TIMEOUT,
            0.2,
            "the queued job to be picked up by the pool's runner and to complete",
        )
        found: dict[str, set[str]] = {}

        def all_exported() -> bool:
            found["series"] = exported_series(operator, prometheus_token) | exported_series(
                receiver, prometheus_token
            )
            return not missing_from(found["series"], wanted)

        if not poll_until(all_exported, TIMEOUT, interval=0.5):
            missing = missing_from(found["series"], wanted)
            raise AssertionError(
                "the dashboard names series neither part exports (metric: panels):\n  "
                + "\n  ".join(f"{name}: {panels}" for name, panels in missing.items())
            )
        answered = [d.status for d in sender.deliveries if d.status is not None]
        assert answered and set(answered) == {200}, f"webhook answers: {answered}"
    finally:
        fake_github.stop_webhooks(sender)
