"""The PromQL that ships under deploy/monitoring/, gathered for the pinned promtool to check.

Two kinds of file carry it: PrometheusRule manifests (``*.yaml``, ``spec.groups`` is a plain
Prometheus rules file) and Grafana dashboards (``*.json``, every panel's ``targets[].expr``,
rows' nested panels included).  A dashboard's queries are templates: Grafana substitutes its
variables (``$namespace``, ``${pool}``, ``$__rate_interval``...) before Prometheus sees them, so
:func:`substitute_variables` puts a value of the right kind in their place first (a duration
inside ``[...]``, a label value inside quotes, a number elsewhere).  promtool has no "parse
this expression" command: :func:`check_expressions` wraps each expression in a recording rule
of a group named after where it came from, so ``promtool check rules`` parses them all in one
run and names the panel whose query is wrong.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "Expression",
    "check_expressions",
    "check_rules",
    "dashboard_expressions",
    "job_names",
    "metric_names",
    "monitoring_expressions",
    "prometheus_rule_groups",
    "substitute_variables",
]

PROMETHEUS_RULE = ("monitoring.coreos.com/v1", "PrometheusRule")

#: ``$var``, ``${var}``, ``${var:format}`` and Grafana's old ``[[var]]``.
_VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::[^}]*)?\}|\$(?P<plain>\w+)|\[\[(?P<old>\w+)(?::[^\]]*)?\]\]")


@dataclass(frozen=True)
class Expression:
    """One PromQL expression and where it is written (file, and rule or panel)."""

    where: str
    expr: str


def prometheus_rule_groups(path: Path) -> list[dict[str, Any]]:
    """``spec.groups`` of every PrometheusRule in the (multi-document) YAML file ``path``."""
    groups: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) == PROMETHEUS_RULE:
            groups += doc["spec"]["groups"]
    return groups


def _panels(node: Any) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard, at any depth (rows and library panels nest them)."""
    if isinstance(node, dict):
        if isinstance(node.get("targets"), list):
            yield node
        for value in node.values():
            yield from _panels(value)
    elif isinstance(node, list):
        for item in node:
            yield from _panels(item)


def dashboard_expressions(path: Path) -> list[Expression]:
    """Every ``targets[].expr`` of the Grafana dashboard ``path``, as Grafana writes it."""
    found: list[Expression] = []
    for panel in _panels(json.loads(path.read_text())):
        for target in panel["targets"]:
            expr = target.get("expr") if isinstance(target, dict) else None
            if isinstance(expr, str) and expr.strip():
                title = panel.get("title") or f"panel {panel.get('id')}"
                found.append(Expression(f"{path.name}: {title} [{target.get('refId', '?')}]", expr))
    return found


def substitute_variables(expr: str) -> str:
    """``expr`` with each dashboard variable replaced by a value that parses where it stands."""
    out: list[str] = []
    quote: str | None = None  # the quote of the string being read, if any
    brackets = 0
    i = 0
    while i < len(expr):
        variable = _VARIABLE.match(expr, i)
        if variable is not None:
            if quote is not None:
                out.append("x")  # a label value, or a regex matching it
            elif brackets > 0:
                out.append("5m")  # a range or a subquery's step: $__rate_interval, $interval
            else:
                out.append("1")  # a threshold, a quantile, an offset's number
            i = variable.end()
            continue
        char = expr[i]
        if quote in ('"', "'") and char == "\\":
            out.append(expr[i : i + 2])  # an escaped character, a quote included
            i += 2
            continue
        if quote is None and char in "\"'`":
            quote = char
        elif char == quote:
            quote = None
        elif quote is None and char in "[]":
            brackets += 1 if char == "[" else -1
        out.append(char)
        i += 1
    return "".join(out)


def monitoring_expressions(folder: Path) -> list[Expression]:
    """Every expression under ``folder``: rules of its PrometheusRules, queries of its dashboards."""
    found: list[Expression] = []
    for path in sorted(folder.rglob("*.yaml")):
        for group in prometheus_rule_groups(path):
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                found.append(Expression(f"{path.name}: {group['name']}/{name}", str(rule["expr"])))
    for path in sorted(folder.rglob("*.json")):
        found += dashboard_expressions(path)
    return found


def metric_names(expr: str) -> set[str]:
    """The ``runnerpool_*`` series names an expression reads (every metric of ours is prefixed)."""
    return set(re.findall(r"\brunnerpool_[a-zA-Z0-9_]+", expr))


def job_names(expr: str) -> set[str]:
    """The scrape jobs an expression selects by name (``job="..."``)."""
    return set(re.findall(r'\bjob\s*=\s*"([^"]*)"', expr))


def check_rules(promtool: Path, groups: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on a rules file holding ``groups``."""
    with tempfile.TemporaryDirectory(prefix="promql-") as tmp:
        rules = Path(tmp) / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        return subprocess.run(
            [str(promtool), "check", "rules", str(rules)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def check_expressions(promtool: Path, expressions: Iterable[Expression]) -> list[str]:
    """The expressions that do not parse (after :func:`substitute_variables`), with promtool's why."""
    listed = list(expressions)
    # Group names must be unique in a rules file; two panels may share a title.
    names = [f"{i}: {e.where}" for i, e in enumerate(listed)]
    groups = [
        {"name": name, "rules": [{"record": "promql_check", "expr": substitute_variables(e.expr)}]}
        for name, e in zip(names, listed, strict=True)
    ]
    if not groups:
        return []
    done = check_rules(promtool, groups)
    if done.returncode == 0:
        return []
    output = (done.stdout + done.stderr).splitlines()
    failed = []
    for name, e in zip(names, listed, strict=True):
        why = [line.split(": could not parse expression: ")[-1] for line in output if f'"{name}"' in line]
        if why:
            failed.append(f"{e.where}: {e.expr!r}: {'; '.join(why)}")
    return failed or ["\n".join(output)]
