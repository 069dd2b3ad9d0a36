"""Generate the Grafana dashboard ``deploy/monitoring/dashboard.json`` from the panel table below.

``python -m generators.dashboard`` rewrites the file; ``--check`` only compares and exits 1 when
it is stale (``tests/test_dashboard.py`` runs the check), as ``generators.crd`` does for the CRD.

Why generated and not written by hand: a dashboard's JSON is mostly layout (grid positions,
ids, the data-source reference repeated on every panel and target, legend and tooltip options)
that a person editing one query should not have to keep consistent. Here each panel is its
title, what it tells an operator, its unit and its PromQL; the layout, the ids and the
``${datasource}`` references follow from the table. Grafana itself is not used (it is AGPL and
not needed): the JSON is the documented dashboard model (schemaVersion 39), which Grafana's
sidecar or file provisioning loads as is.

Every query uses only series the operator exports (``tests/e2e/test_dashboard_metrics.py``
scrapes a running operator and checks each name) and Grafana's ``$__rate_interval`` and the
dashboard's own variables, so it stays valid PromQL once Grafana substitutes them.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generators.output import write_or_check

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "deploy" / "monitoring" / "dashboard.json"
UID = "runnerpool-operator"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: The pools the namespace and pool variables select.
POOLS = 'namespace=~"$namespace", pool=~"$pool"'
#: Grid width Grafana lays panels out on.
GRID_WIDTH = 24
#: Process metrics of every target that is an operator (its build info says so), with its version.
OPERATOR = "on (job, instance) group_left (version) runnerpool_build_info"

Json = dict[str, Any]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    #: A table of the current values instead of a time series.
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    height: int = 8
    stacked: bool = False
    #: Thresholds as (value, colour) from low to high; the base colour is green.
    thresholds: tuple[tuple[float, str], ...] = ()
    extra: Json = field(default_factory=dict)


def quantiles(histogram: str, selector: str, by: str = "") -> tuple[Query, ...]:
    """p50, p95 and p99 of a histogram over the selected series (``by``: kept labels)."""
    keep = f"{by}, le" if by else "le"
    prefix = "{{namespace}}/{{pool}} " if by else ""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({keep}) "
            f"(rate({histogram}_bucket{{{selector}}}[$__rate_interval])))",
            f"{prefix}p{round(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    )


def by_workflow(histogram: str, quantile: float) -> Query:
    """One quantile of a job histogram per repository and workflow (empty under
    ``--job-metrics-labels none``; ``other`` past the per-pool cap)."""
    return Query(
        f"histogram_quantile({quantile}, sum by (repository, workflow, le) "
        f"(rate({histogram}_bucket{{{POOLS}}}[$__rate_interval])))",
        f"{{{{repository}}}} {{{{workflow}}}} p{round(quantile * 100)}",
    )


#: The per-workflow panels of the Jobs row: (title, description, histogram, quantile).
WORKFLOW_PANELS = (
    (
        "Queue wait p95",
        "Which workflow's jobs wait for a runner (queued -> started, GitHub's timestamps). A pool's "
        "p95 can hide a workflow that is a few percent of its jobs; the alert "
        "RunnerPoolWorkflowQueueWaitHigh watches this.",
        "runnerpool_job_queue_seconds",
        0.95,
    ),
    (
        "Queue wait p50",
        "The typical wait of each workflow's jobs: a high median is a pool too small for the "
        "workflow, a high p95 alone a burst.",
        "runnerpool_job_queue_seconds",
        0.5,
    ),
    (
        "Run time p95",
        "How long each workflow's jobs run on the selected pools' runners (started -> completed).",
        "runnerpool_job_run_seconds",
        0.95,
    ),
)

ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Pools and runners",
        (
            Panel(
                "Pools",
                "RunnerPools the operator reconciles (in the selected namespaces).",
                (Query(f"count(runnerpool_pool_desired_replicas{{{POOLS}}})"),),
                kind="stat",
                width=4,
                height=4,
            ),
            Panel(
                "Pools not Ready",
                "Pools whose Ready condition is False: waiting for a token or a credential, pods "
                "refused or starting (`kubectl runnerpool why POOL` says why).",
                (Query(f"count(runnerpool_pool_ready{{{POOLS}}} == 0) or vector(0)"),),
                kind="stat",
                width=4,
                height=4,
                thresholds=((1, "orange"),),
            ),
            Panel(
                "Jobs queued",
                "Queued jobs the selected pools' labels match (status.demand.queued).",
                (Query(f"sum(runnerpool_pool_queued_jobs{{{POOLS}}})"),),
                kind="stat",
                width=4,
                height=4,
                thresholds=((1, "orange"),),
            ),
            Panel(
                "Jobs busy",
                "Jobs in progress on the selected pools' runners (status.demand.busy).",
                (Query(f"sum(runnerpool_pool_busy_jobs{{{POOLS}}})"),),
                kind="stat",
                width=4,
                height=4,
            ),
            Panel(
                "Runners online / busy / offline",
                "Runners GitHub lists for the selected pools, by state (online means online and idle).",
                tuple(
                    Query(f'sum(runnerpool_runners{{{POOLS}, state="{state}"}})', state)
                    for state in ("online", "busy", "offline")
                ),
                kind="stat",
                width=8,
                height=4,
            ),
            Panel(
                "Runner pods desired and ready, per pool",
                "What each pool asks for (spec.replicas or the autoscaling decision) against its ready "
                "pods; a gap that lasts is a pool that is not Ready.",
                (
                    Query(
                        f"sum by (namespace, pool) (runnerpool_pool_desired_replicas{{{POOLS}}})",
                        "{{namespace}}/{{pool}} desired",
                    ),
                    Query(
                        f"sum by (namespace, pool) (runnerpool_pool_ready_replicas{{{POOLS}}})",
                        "{{namespace}}/{{pool}} ready",
                    ),
                ),
            ),
            Panel(
                "Runner pods failing, by reason",
                "Runner pods stuck before their runner runs: image pulls, crash loops, config errors "
                "(the pool's Ready reason RunnerPodsFailing; docs/troubleshooting.md lists the reasons).",
                (
                    Query(
                        f"sum by (namespace, pool, reason) (runnerpool_runner_pods_failing{{{POOLS}}})",
                        "{{namespace}}/{{pool}} {{reason}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Runners by state",
                "Runners GitHub lists for the selected pools. Offline runners without a pod are deleted "
                "from GitHub by the operator.",
                (Query(f"sum by (state) (runnerpool_runners{{{POOLS}}})", "{{state}}"),),
                stacked=True,
            ),
        ),
    ),
    (
        "Jobs",
        (
            Panel(
                "Jobs queued and busy, per pool",
                "Demand as each pool's status records it: queued jobs its labels match, and jobs in "
                "progress on its runners. Autoscaling pools keep busy + queued + minIdle runners "
                "(within min/max).",
                (
                    Query(
                        f"sum by (namespace, pool) (runnerpool_pool_queued_jobs{{{POOLS}}})",
                        "{{namespace}}/{{pool}} queued",
                    ),
                    Query(
                        f"sum by (namespace, pool) (runnerpool_pool_busy_jobs{{{POOLS}}})",
                        "{{namespace}}/{{pool}} busy",
                    ),
                ),
                width=8,
            ),
            Panel(
                "Pickup latency",
                "From a job being queued to a runner of the pool starting it (GitHub's timestamps): what "
                "a developer waits for.",
                (
                    *quantiles("runnerpool_job_pickup_latency_seconds", POOLS),
                    Query(
                        f"sum(rate(runnerpool_job_pickup_latency_seconds_sum{{{POOLS}}}[$__rate_interval])) "
                        f"/ sum(rate(runnerpool_job_pickup_latency_seconds_count{{{POOLS}}}"
                        "[$__rate_interval]))",
                        "mean",
                    ),
                ),
                unit="s",
                width=8,
            ),
            Panel(
                "Job duration",
                "How long jobs ran on the selected pools' runners (GitHub's timestamps).",
                quantiles("runnerpool_job_duration_seconds", POOLS),
                unit="s",
                width=8,
            ),
            Panel(
                "Pickup latency p95, per pool",
                "Which pool makes jobs wait.",
                (quantiles("runnerpool_job_pickup_latency_seconds", POOLS, by="namespace, pool")[1],),
                unit="s",
            ),
            Panel(
                "Jobs started and finished",
                "Jobs per second that runners of the selected pools picked up and finished.",
                (
                    Query(
                        f"sum(rate(runnerpool_job_pickup_latency_seconds_count{{{POOLS}}}[$__rate_interval]))",
                        "started",
                    ),
                    Query(
                        f"sum(rate(runnerpool_job_duration_seconds_count{{{POOLS}}}[$__rate_interval]))",
                        "finished",
                    ),
                ),
                unit="ops",
            ),
            *(
                Panel(
                    f"{title}, by repository and workflow",
                    description,
                    (by_workflow(histogram, quantile),),
                    unit="s",
                    width=8,
                )
                for title, description, histogram, quantile in WORKFLOW_PANELS
            ),
        ),
    ),
    (
        "Registration tokens",
        (
            Panel(
                "Registration token expires in",
                "Time left on the registration token in each pool's Secret. The operator refreshes it "
                "well before it expires; a value falling towards 0 means refreshes fail.",
                (
                    Query(
                        f"min by (namespace, pool) (runnerpool_token_expiry_timestamp_seconds{{{POOLS}}}) "
                        "- time()",
                        "{{namespace}}/{{pool}}",
                    ),
                ),
                unit="s",
                thresholds=((0, "red"), (600, "orange"), (1800, "green")),
            ),
            Panel(
                "Token refreshes and failures",
                "Registration tokens written, and failed refreshes by reason (bad credentials, scope "
                "not found, GitHub errors).",
                (
                    Query(
                        f"sum by (namespace, pool, reason) "
                        f"(increase(runnerpool_token_failures_total{{{POOLS}}}[$__rate_interval]))",
                        "{{namespace}}/{{pool}} failed: {{reason}}",
                    ),
                    Query(
                        f"sum(increase(runnerpool_token_fills_total{{{POOLS}}}[$__rate_interval]))",
                        "written",
                    ),
                ),
            ),
        ),
    ),
    (
        "GitHub",
        (
            Panel(
                "GitHub requests by status",
                "GitHub API answers per second by HTTP status (error: no answer). A 304 costs no "
                "rate-limit budget.",
                (
                    Query(
                        "sum by (status) (rate(runnerpool_github_requests_total[$__rate_interval]))",
                        "{{status}}",
                    ),
                ),
                unit="reqps",
                stacked=True,
                width=8,
            ),
            Panel(
                "GitHub requests by endpoint",
                "Which calls spend the budget (templated endpoints, never a name or a token).",
                (
                    Query(
                        "sum by (method, endpoint) "
                        "(rate(runnerpool_github_requests_total[$__rate_interval]))",
                        "{{method}} {{endpoint}}",
                    ),
                ),
                unit="reqps",
                width=8,
            ),
            Panel(
                "Rate limit remaining",
                "Share of each credential's rate-limit window left, from GitHub's last answer. Below "
                "10 % the operator lists runners less often.",
                (
                    Query(
                        "min by (credential) (runnerpool_github_rate_limit_remaining "
                        "/ runnerpool_github_rate_limit_limit)",
                        "{{credential}}",
                    ),
                ),
                unit="percentunit",
                width=8,
                thresholds=((0, "red"), (0.1, "orange"), (0.25, "green")),
                extra={"min": 0, "max": 1},
            ),
            Panel(
                "Rate limit remaining (requests)",
                "Requests left in each credential's window, and when the window resets.",
                (
                    Query("min by (credential) (runnerpool_github_rate_limit_remaining)", "{{credential}}"),
                    Query(
                        "max by (credential) (runnerpool_github_rate_limit_reset_timestamp_seconds) - time()",
                        "{{credential}} resets in (s)",
                    ),
                ),
            ),
            Panel(
                "Runner listing delay",
                "Seconds until each scope's next runner listing: above the interval while the budget is "
                "low or GitHub asked to wait.",
                (Query("max by (scope) (runnerpool_runner_sync_delay_seconds)", "{{scope}}"),),
                unit="s",
            ),
        ),
    ),
    (
        "Webhook",
        (
            Panel(
                "Webhook deliveries by result",
                "workflow_job deliveries per second by outcome: accepted, duplicate and ignored are "
                "normal; unsigned and bad_signature mean a wrong secret (or someone else); failed means "
                "the job could not be recorded.",
                (
                    Query(
                        "sum by (result) (rate(runnerpool_webhook_deliveries_total[$__rate_interval]))",
                        "{{result}}",
                    ),
                ),
                unit="reqps",
                stacked=True,
                width=24,
            ),
        ),
    ),
    (
        "Controller",
        (
            Panel(
                "Reconciles by result and errors",
                "Pool reconciles per second by outcome, and those that raised.",
                (
                    Query(
                        "sum by (result) (rate(runnerpool_reconcile_total[$__rate_interval]))",
                        "{{result}}",
                    ),
                    Query("sum(rate(runnerpool_reconcile_errors_total[$__rate_interval]))", "errors"),
                ),
                unit="ops",
                width=8,
            ),
            Panel(
                "Reconcile duration",
                "Wall time of one reconcile, including the API and GitHub calls it makes.",
                quantiles("runnerpool_reconcile_duration_seconds", ""),
                unit="s",
                width=8,
            ),
            Panel(
                "Work-queue depth and retries",
                "Keys waiting to be reconciled (delayed keys excluded), and keys re-added after a "
                "failure per second. A depth that keeps growing means the workers cannot keep up.",
                (
                    Query("sum by (name) (runnerpool_workqueue_depth)", "{{name}} depth"),
                    Query(
                        "sum by (name) (rate(runnerpool_workqueue_retries_total[$__rate_interval]))",
                        "{{name}} retries/s",
                    ),
                ),
                width=8,
            ),
        ),
    ),
    (
        "Operator process",
        (
            Panel(
                "CPU",
                "CPU cores each operator replica uses.",
                (
                    Query(
                        f"rate(process_cpu_seconds_total[$__rate_interval]) * {OPERATOR}",
                        "{{instance}} ({{version}})",
                    ),
                ),
                unit="cores",
                width=8,
            ),
            Panel(
                "Memory",
                "Resident memory of each operator replica.",
                (Query(f"process_resident_memory_bytes * {OPERATOR}", "{{instance}} ({{version}})"),),
                unit="bytes",
                width=8,
            ),
            Panel(
                "Open file descriptors",
                "Of each operator replica, against its limit.",
                (
                    Query(f"process_open_fds * {OPERATOR}", "{{instance}} open"),
                    Query(f"process_max_fds * {OPERATOR}", "{{instance}} limit"),
                ),
                width=8,
            ),
            Panel(
                "Build",
                "Which build each replica runs: version, commit, Python and kubernetes client.",
                (Query("runnerpool_build_info", instant=True),),
                kind="table",
                width=24,
                height=5,
            ),
        ),
    ),
)


# ------------------------------------------------------------------------------ the JSON model


def _target(index: int, query: Query, *, table: bool) -> Json:
    target: Json = {
        "refId": chr(ord("A") + index),
        "datasource": DATASOURCE,
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": not query.instant,
        "instant": query.instant,
    }
    if table:
        target["format"] = "table"
    return target


def _thresholds(panel: Panel) -> Json:
    steps: list[Json] = [{"color": "green", "value": None}]
    steps += [{"color": colour, "value": value} for value, colour in panel.thresholds]
    if panel.thresholds and panel.thresholds[0][0] == 0:  # a scale that starts red at 0
        steps[0]["color"] = panel.thresholds[0][1]
        steps.pop(1)
    return {"mode": "absolute", "steps": steps}


def _options(panel: Panel) -> Json:
    if panel.kind == "stat":
        return {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "textMode": "value_and_name" if len(panel.queries) > 1 else "value",
        }
    if panel.kind == "table":
        return {"showHeader": True, "cellHeight": "sm"}
    return {
        "legend": {
            "displayMode": "table",
            "placement": "bottom",
            "showLegend": True,
            "calcs": ["lastNotNull"],
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def _custom(panel: Panel) -> Json:
    if panel.kind != "timeseries":
        return {}
    return {
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 25 if panel.stacked else 10,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if panel.stacked else "none", "group": "A"},
        }
    }


def _transformations(panel: Panel) -> list[Json]:
    if panel.kind != "table":
        return []
    hidden = {"Time": True, "Value": True, "__name__": True}
    return [{"id": "organize", "options": {"excludeByName": hidden, "renameByName": {}}}]


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> Json:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": panel.unit,
                "thresholds": _thresholds(panel),
                **({"min": 0} if panel.kind == "timeseries" and panel.unit != "percentunit" else {}),
                **panel.extra,
                **_custom(panel),
            },
            "overrides": [],
        },
        "options": _options(panel),
        "targets": [_target(i, query, table=panel.kind == "table") for i, query in enumerate(panel.queries)],
        "transformations": _transformations(panel),
    }


def panels() -> list[Json]:
    """Rows and their panels, laid out left to right, a new line when the width is used up."""
    out: list[Json] = []
    y = 0
    for title, row in ROWS:
        out.append(
            {
                "id": len(out) + 1,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x, line_height = 0, 0
        for panel in row:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            out.append(panel_json(panel, len(out) + 1, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out


def _pool_variable(name: str, label: str, query: str) -> Json:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def templating() -> list[Json]:
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "options": [],
            "regex": "",
            "refresh": 1,
            "hide": 0,
        },
        _pool_variable("namespace", "Namespace", "label_values(runnerpool_pool_desired_replicas, namespace)"),
        _pool_variable(
            "pool", "Pool", 'label_values(runnerpool_pool_desired_replicas{namespace=~"$namespace"}, pool)'
        ),
    ]


def dashboard() -> Json:
    return {
        "uid": UID,
        "title": "runnerpool-operator",
        "description": "Pools of self-hosted GitHub Actions runners: demand, pickup latency, tokens, the "
        "GitHub budget, webhook deliveries, the controller and the operator process.",
        "tags": ["runnerpool", "github-actions", "kubernetes"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": templating()},
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m generators.dashboard", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date")
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="JSON file (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    return write_or_check(args.output, render(), check=args.check, command="python -m generators.dashboard")


if __name__ == "__main__":
    raise SystemExit(main())
