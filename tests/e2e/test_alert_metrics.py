"""The alerts read only what a running operator exports, under the names it exports them.

An alert on a metric that does not exist (a typo, a counter without ``_total``, a gauge that
was renamed) is silent forever, and promtool cannot tell: only a scrape can. The operator
runs as its own process with a Ready pool; every series name the rules of
deploy/monitoring/alerts/alerts.yaml read must be one its /metrics declares, and the pool gauges
the alerts were built on say what the pool's status says.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.runners import REPO, wait_condition
from tests.pools import create_pool, pool_manifest
from testworld.simulator import OperatorProcess, RunnerSimulator
from testworld.tools import promql

pytestmark = pytest.mark.usefixtures("credentials")

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "alerts" / "alerts.yaml"
#: The series names a metric family of each type is exposed as (prometheus_client's text format).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def declared_series(exposition: str) -> set[str]:
    """Every series name the exposition declares, whether or not a labelled child exists yet."""
    return {
        family.name + suffix
        for family in text_string_to_metric_families(exposition)
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def test_every_metric_an_alert_reads_is_exported(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, simulator: RunnerSimulator
) -> None:
    create_pool(api_client, namespace, pool_manifest("alerted", repo=REPO, replicas=1))
    wait_condition(api_client, namespace, "alerted", "Ready", "True")
    exposition = operator.metrics()

    read = {
        name
        for group in promql.prometheus_rule_groups(ALERTS)
        for rule in group["rules"]
        for name in promql.metric_names(rule["expr"])
    }
    assert len(read) >= 9, f"the rules' metric names were found: {sorted(read)}"
    missing = read - declared_series(exposition)
    assert not missing, f"alerts read series the operator does not export: {sorted(missing)}"

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }
    pool = (("namespace", namespace), ("pool", "alerted"))
    assert samples[("runnerpool_pool_ready", pool)] == 1, "Ready: the not-Ready alert stays quiet"
    assert samples[("runnerpool_leader", ())] == 1, "the only replica leads"
