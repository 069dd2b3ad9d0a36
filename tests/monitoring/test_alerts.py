"""The alerting rules (deploy/monitoring/alerts/alerts.yaml), checked and unit-tested with promtool.

``promtool check rules`` parses the rules as Prometheus would load them; ``promtool test rules``
runs tests/monitoring/alerts_test.yaml (input series -> the alerts that fire, with their
rendered summary, description and runbook link). Every alert has a case where it fires and
one where it must not, and the unit tests are themselves tested: each alert's expression is
broken in a way that matters (a threshold, an aggregation, a guard clause) and the unit tests
must then fail on that alert.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testworld.tools import assets as tool_assets
from testworld.tools import promql

REPO = Path(__file__).resolve().parent.parent.parent
ALERTS = REPO / "deploy" / "monitoring" / "alerts" / "alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
#: The name alerts_test.yaml gives its rule file.
RULES_FILE = "alerts.rules.yaml"
SEVERITIES = {"warning", "critical"}

Groups = list[dict[str, Any]]


@pytest.fixture(scope="session")
def promtool() -> Path:
    return tool_assets.ensure_tool(tool_assets.PROMTOOL)


def alert_rules(groups: Groups) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def run_unit_tests(promtool: Path, groups: Groups, folder: Path) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of alerts_test.yaml against ``groups``, in ``folder``."""
    (folder / RULES_FILE).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(UNIT_TESTS, folder / UNIT_TESTS.name)
    return subprocess.run(
        [str(promtool), "test", "rules", UNIT_TESTS.name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings (lower case, punctuation dropped, - for spaces)."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.fixture(scope="module")
def groups() -> Groups:
    found = promql.prometheus_rule_groups(ALERTS)
    assert found, f"{ALERTS} holds no PrometheusRule"
    return found


def test_the_rules_load_in_prometheus(promtool: Path, groups: Groups) -> None:
    done = promql.check_rules(promtool, groups)
    assert done.returncode == 0, done.stdout + done.stderr
    rules = sum(len(g["rules"]) for g in groups)
    assert f"SUCCESS: {rules} rules found" in done.stdout


def test_the_alerts_fire_when_they_should_and_only_then(
    promtool: Path, groups: Groups, tmp_path: Path
) -> None:
    done = run_unit_tests(promtool, groups, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_quiet_case(groups: Groups) -> None:
    cases = [
        case
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test") or []
    ]
    for alert in alert_rules(groups):
        mine = [case for case in cases if case["alertname"] == alert]
        assert any(case["exp_alerts"] for case in mine), f"no unit test where {alert} fires"
        assert any(not case["exp_alerts"] for case in mine), f"no unit test where {alert} must not fire"


def test_every_alert_says_what_and_links_its_runbook(groups: Groups) -> None:
    anchors = github_anchors(TROUBLESHOOTING.read_text())
    for name, rule in alert_rules(groups).items():
        annotations = rule.get("annotations") or {}
        assert {"summary", "description", "runbook_url"} <= annotations.keys(), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        path, _, anchor = annotations["runbook_url"].partition("#")
        assert path == "docs/troubleshooting.md", f"{name}: runbook_url {annotations['runbook_url']}"
        assert anchor == name.lower(), f"{name}: the anchor is the alert's name"
        assert anchor in anchors, f"{name}: docs/troubleshooting.md has no section #{anchor}"


#: Per alert, one way of getting its expression wrong that the unit tests must catch:
#: (alert, text in the expression, replacement, what the unit tests then see).
BROKEN = [
    ("RunnerPoolOperatorAbsent", "== 1)", "== 0)", "fires while the replica is up"),
    ("RunnerPoolOperatorNoLeader", "max by", "min by", "a standby alone counts as no leader"),
    ("RunnerPoolNotReady", "== 0", "<= 1", "fires for Ready pools"),
    ("RunnerPoolNotReady", "max by (namespace, pool) (runnerpool_pool_ready)", "runnerpool_pool_ready",
     "a leader change restarts the 10 minutes"),
    ("RunnerPoolRunnerPodsFailing", "> 0", "> 1", "misses a single stuck pod"),
    ("RunnerPoolRunnerPodsFailing", '{reason!="RunnerVersionOutdated"}', "",
     "fires twice for an outdated runner"),
    ("RunnerPoolRunnerVersionOutdated", '{reason="RunnerVersionOutdated"}', "",
     "fires for any stuck pod"),
    ("RunnerPoolTokenRefreshFailing", "unless on (namespace, pool)", "or on (namespace, pool)",
     "fires for a failure the next refresh fixed"),
    ("RunnerPoolTokenExpiringSoon", "< 15 * 60", "< 45 * 60", "fires an hour early"),
    ("RunnerPoolJobsQueuedTooLong", "> 15 * 60", "> 3 * 60", "fires after 3 minutes"),
    ("RunnerPoolPickupLatencyHigh", "0.95", "0.99", "fires when 3 % of jobs are slow"),
    ("RunnerPoolWorkflowQueueWaitHigh", ">= 3", ">= 1", "fires for one slow nightly job"),
    ("RunnerPoolWorkflowQueueWaitHigh", "sum by (namespace, pool, repository, workflow, le)",
     "sum by (namespace, pool, le)", "mixes a slow workflow with the pool's fast ones"),
    ("RunnerPoolGitHubBudgetLow", "> time()", "> 0", "fires after the window has reset"),
    ("RunnerPoolWebhookSignatureFailures", "[5m]", "[15m]", "fires for a stray unsigned post"),
]  # fmt: skip


@pytest.mark.parametrize(("alert", "old", "new", "why"), BROKEN, ids=[f"{b[0]}: {b[3]}" for b in BROKEN])
def test_a_wrong_expression_fails_the_unit_tests(
    promtool: Path, groups: Groups, tmp_path: Path, alert: str, old: str, new: str, why: str
) -> None:
    broken = copy.deepcopy(groups)
    rule = alert_rules(broken)[alert]
    assert old in rule["expr"], f"{alert}'s expression no longer contains {old!r}: update BROKEN"
    rule["expr"] = rule["expr"].replace(old, new)
    done = run_unit_tests(promtool, broken, tmp_path)
    assert done.returncode != 0, f"the unit tests pass although {alert} {why}"
    assert f"alertname: {alert}," in done.stderr, done.stdout + done.stderr


def test_an_alert_that_never_fires_fails_the_unit_tests(
    promtool: Path, groups: Groups, tmp_path: Path
) -> None:
    """Each alert's firing cases really are evaluated: silenced one by one, each is missed."""
    for alert in alert_rules(groups):
        silenced = copy.deepcopy(groups)
        alert_rules(silenced)[alert]["expr"] = "vector(1) == 0"
        done = run_unit_tests(promtool, silenced, tmp_path)
        assert done.returncode != 0, f"the unit tests pass with {alert} silenced"
        assert f"alertname: {alert}," in done.stderr, done.stdout + done.stderr


def test_each_alert_has_a_broken_variant() -> None:
    assert {b[0] for b in BROKEN} == set(alert_rules(promql.prometheus_rule_groups(ALERTS)))
