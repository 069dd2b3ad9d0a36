"""The Grafana dashboard (deploy/monitoring/dashboard.json): generated, well-formed, and read as Grafana does.

What a user would notice otherwise: a panel without a title, a panel stuck on one data source
(``${datasource}`` must be everywhere), two panels with one id (Grafana silently drops one),
panels on top of each other, or a pool filter that matches nothing because Prometheus renamed
the pool's ``namespace`` label. That every metric a panel names is exported is checked against
a running operator in ``tests/e2e/test_dashboard_metrics.py``; that every query parses, with
promtool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from generators import dashboard as dashboard_generator
from testworld.promql_names import metric_names, variable_query_names

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "deploy" / "monitoring" / "dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The variables a query may use: Grafana's own and the dashboard's pool filters.
VARIABLES = {"$__rate_interval", "$namespace", "$pool"}

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def dashboard() -> Obj:
    loaded: Obj = json.loads(DASHBOARD.read_text())
    return loaded


def panels(dashboard: Obj) -> list[Obj]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_committed_dashboard_is_the_generated_one() -> None:
    assert dashboard_generator.main(["--check", "--output", str(DASHBOARD)]) == 0, (
        "run `python -m generators.dashboard`"
    )


def test_every_panel_has_a_title_and_a_unique_id(dashboard: Obj) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    assert all(isinstance(p.get("title"), str) and p["title"].strip() for p in dashboard["panels"])
    titles = [p["title"] for p in panels(dashboard)]
    assert len(titles) == len(set(titles)), "two panels with one title"
    assert all(p.get("description") for p in panels(dashboard)), "each panel says what it shows"


def test_every_panel_and_query_uses_the_datasource_variable(dashboard: Obj) -> None:
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']}: no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]


def test_namespace_and_pool_variables_filter_the_pool_panels(dashboard: Obj) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("namespace", "pool"):
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"] == DATASOURCE
        assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*"
        assert variable_query_names(variable["query"]["query"]) == ["runnerpool_pool_desired_replicas"]
    assert '$namespace"' in variables["pool"]["query"]["query"], "the pool list follows the namespace"
    pool_panels = [p for p in panels(dashboard) if any("runnerpool_pool_" in t["expr"] for t in p["targets"])]
    assert pool_panels
    for panel in pool_panels:
        for target in panel["targets"]:
            assert 'namespace=~"$namespace", pool=~"$pool"' in target["expr"], panel["title"]


def test_queries_use_only_known_variables(dashboard: Obj) -> None:
    for panel in panels(dashboard):
        for target in panel["targets"]:
            used = set(re.findall(r"\$\{?\w+\}?", target["expr"]))
            assert used <= VARIABLES, f"{panel['title']}: {used - VARIABLES}"


def test_panels_lie_side_by_side_on_the_grid(dashboard: Obj) -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= dashboard_generator.GRID_WIDTH, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_the_issue_s_panels_are_there(dashboard: Obj) -> None:
    """Each thing the dashboard promises, by the series its queries read."""
    read = {name for p in panels(dashboard) for t in p["targets"] for name in metric_names(t["expr"])}
    assert {
        "runnerpool_pool_desired_replicas",
        "runnerpool_pool_ready_replicas",
        "runnerpool_runners",
        "runnerpool_pool_queued_jobs",
        "runnerpool_pool_busy_jobs",
        "runnerpool_job_pickup_latency_seconds_bucket",
        "runnerpool_job_duration_seconds_bucket",
        "runnerpool_token_expiry_timestamp_seconds",
        "runnerpool_token_failures_total",
        "runnerpool_github_requests_total",
        "runnerpool_github_rate_limit_remaining",
        "runnerpool_webhook_deliveries_total",
        "runnerpool_reconcile_errors_total",
        "runnerpool_workqueue_depth",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "runnerpool_build_info",
    } <= read
    quantiles = [
        t["expr"] for p in panels(dashboard) for t in p["targets"] if "histogram_quantile" in t["expr"]
    ]
    assert any("runnerpool_job_pickup_latency_seconds_bucket" in e for e in quantiles)
    assert any("runnerpool_job_duration_seconds_bucket" in e for e in quantiles)
    by_workflow = [e for e in quantiles if "sum by (repository, workflow, le)" in e]
    assert {
        (name, q) for e in by_workflow for name in metric_names(e) for q in ("0.5", "0.95") if q + "," in e
    } >= {
        ("runnerpool_job_queue_seconds_bucket", "0.5"),
        ("runnerpool_job_queue_seconds_bucket", "0.95"),
        ("runnerpool_job_run_seconds_bucket", "0.95"),
    }


def test_the_service_monitors_keep_the_pools_namespace_label() -> None:
    """The pool series carry the pool's ``namespace``; without ``honorLabels`` Prometheus renames it
    ``exported_namespace`` and sets ``namespace`` to the operator's, so the filter finds nothing."""
    deploy = yaml.safe_load(
        (REPO / "deploy" / "optional" / "servicemonitor" / "servicemonitor.yaml").read_text()
    )
    assert all(endpoint["honorLabels"] is True for endpoint in deploy["spec"]["endpoints"])
    template = (REPO / "charts" / "runnerpool-operator" / "templates" / "servicemonitor.yaml").read_text()
    assert "honorLabels: true" in template


NAMES: dict[str, tuple[str, list[str]]] = {
    "selector": ('up{job="x", instance=~"a.*"}', ["up"]),
    "range and function": ("rate(http_requests_total[$__rate_interval])", ["http_requests_total"]),
    "aggregation by": (
        'histogram_quantile(0.95, sum by (le, pool) (rate(lat_bucket{pool=~"$pool"}[5m])))',
        ["lat_bucket"],
    ),
    "by after": (
        "sum(rate(a_total[1m])) by (le) / on(job) group_left(version) b_info",
        ["a_total", "b_info"],
    ),
    "set operators and keywords": (
        "a unless b or c and bool_metric > bool 3",
        ["a", "b", "c", "bool_metric"],
    ),
    "name matcher": ('{__name__="named", job="x"} offset 5m', ["named"]),
    "strings are no names": ('label_replace(x, "dst", "$1", "src", "(.*)")', ["x"]),
    "numbers and durations": ("x > 1e3 and y offset 1h30m < 0x1f", ["x", "y"]),
    "recording rule names": ("job:requests:rate5m * 2", ["job:requests:rate5m"]),
    "subquery": ("max_over_time(rate(z_total[5m])[1h:1m])", ["z_total"]),
    "time and vector": ("(m - time()) or vector(0)", ["m"]),
    "each once": ("a / a", ["a"]),
}


@pytest.mark.parametrize(("expr", "names"), NAMES.values(), ids=NAMES.keys())
def test_metric_names_of_promql(expr: str, names: list[str]) -> None:
    assert metric_names(expr) == names


def test_unreadable_promql_is_refused_not_skipped() -> None:
    with pytest.raises(ValueError, match="cannot read PromQL"):
        metric_names("sum(x) ; drop")
    with pytest.raises(ValueError, match="unbalanced"):
        metric_names('x{job="a"')


def test_variable_queries() -> None:
    assert variable_query_names('label_values(m{namespace=~"$namespace"}, pool)') == ["m"]
    assert variable_query_names("label_values(namespace)") == []
    assert variable_query_names("query_result(topk(3, q))") == ["q"]
