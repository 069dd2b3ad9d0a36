"""Every PromQL expression under deploy/monitoring/ parses, as the pinned promtool reads it.

The rules of every PrometheusRule there and every ``targets[].expr`` of every Grafana dashboard
JSON there (found by globbing: a dashboard added later is checked without touching this test),
with the dashboards' variables substituted first, as Grafana does before it queries Prometheus.
The checker is itself tested on a dashboard written here, with a broken query in a nested row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_deploy_manifests import render
from testworld.tools import assets as tool_assets
from testworld.tools import promql

REPO = Path(__file__).resolve().parent.parent.parent
MONITORING = REPO / "deploy" / "monitoring"
ALERTS = MONITORING / "alerts" / "alerts.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return tool_assets.ensure_tool(tool_assets.PROMTOOL)


def test_every_expression_under_deploy_monitoring_parses(promtool: Path) -> None:
    expressions = promql.monitoring_expressions(MONITORING)
    rules = [r for g in promql.prometheus_rule_groups(ALERTS) for r in g["rules"]]
    assert len(expressions) >= len(rules), "the alerts' expressions are among those checked"
    for dashboard in MONITORING.rglob("*.json"):
        assert promql.dashboard_expressions(dashboard), f"{dashboard.name}: no panel has a query"
    assert promql.check_expressions(promtool, expressions) == []


def test_the_rules_read_the_scrape_job_of_deploys_servicemonitor() -> None:
    """The job an alert names is a metrics Service the ServiceMonitor selects (its job label): the
    operator's and the webhook receiver's (its own Deployment); the absence alerts name the
    operator's, which a live receiver must not mask."""
    (monitor,) = [
        o for o in render(REPO / "deploy" / "optional" / "servicemonitor") if o["kind"] == "ServiceMonitor"
    ]
    services = [
        o
        for o in render(REPO / "deploy")
        if o["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= o["metadata"]["labels"].items()
    ]
    assert sorted(s["metadata"]["name"] for s in services) == [
        "runnerpool-operator-metrics",
        "runnerpool-operator-webhook-metrics",
    ]
    jobs = {job for e in promql.monitoring_expressions(MONITORING) for job in promql.job_names(e.expr)}
    assert jobs == {"runnerpool-operator-metrics"}
    (rule,) = render(REPO / "deploy" / "optional" / "prometheusrule")
    assert rule["spec"]["groups"] == promql.prometheus_rule_groups(ALERTS)


def _dashboard(tmp_path: Path, exprs: list[str]) -> Path:
    """A dashboard as Grafana exports it: templated variables, a row with nested panels."""
    panels = [{"type": "timeseries", "title": f"panel {i}", "targets": [{"refId": "A", "expr": e}]}
              for i, e in enumerate(exprs)]  # fmt: skip
    dashboard = {
        "title": "test",
        "templating": {"list": [{"name": "namespace", "type": "query"}]},
        "panels": [panels[0], {"type": "row", "title": "nested", "panels": panels[1:]}],
    }
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(dashboard))
    return path


def test_dashboard_queries_are_checked_with_their_variables_substituted(
    promtool: Path, tmp_path: Path
) -> None:
    good = [
        'sum by (pool) (runnerpool_pool_queued_jobs{namespace=~"$namespace"})',
        "histogram_quantile(0.95, sum by (le) "
        '(rate(runnerpool_job_pickup_latency_seconds_bucket{pool="${pool}"}[$__rate_interval])))',
        "rate(runnerpool_reconcile_total[${__range}]) > $threshold",
        'max_over_time(runnerpool_workqueue_depth{name=~"[[queue]]"}[$interval:$__interval])',
    ]  # fmt: skip
    path = _dashboard(tmp_path, [*good, "sum(rate(runnerpool_reconcile_total[5m])"])
    found = promql.dashboard_expressions(path)
    assert [e.expr for e in found] == [*good, "sum(rate(runnerpool_reconcile_total[5m])"], "nested panels too"
    failures = promql.check_expressions(promtool, found)
    assert len(failures) == 1, failures
    assert failures[0].startswith("dashboard.json: panel 4 [A]: "), failures
    assert "unclosed left parenthesis" in failures[0], failures


def test_substitution_puts_a_value_of_the_right_kind_in_each_place() -> None:
    assert (
        promql.substitute_variables('rate(x{a=~"$ns|${pod:regex}"}[$__rate_interval]) > $n')
        == 'rate(x{a=~"x|x"}[5m]) > 1'
    )
    assert promql.substitute_variables('x{a="\\"$v"}[$r:$s] offset 1m') == 'x{a="\\"x"}[5m:5m] offset 1m'
