"""The commands: read, decide (``views``), print.

``convert`` reads only its input (``runnerpool.plugin.convert``). Each other command makes at
most one GitHub listing (``runners``, ``remove-offline``: the pool's scope, once) plus, for
``remove-offline``, one DELETE per runner it removes; ``list`` and ``why`` ask only the API
server.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pydantic

from runnerpool import api
from runnerpool.domain import parse_rfc3339, utcnow
from runnerpool.github.types import DeleteOutcome
from runnerpool.plugin import views
from runnerpool.plugin.cluster import Cluster
from runnerpool.plugin.convert.documents import convert_text, render
from runnerpool.plugin.convert.result import ConvertError
from runnerpool.plugin.errors import PluginError
from runnerpool.plugin.github_access import PoolGitHub
from runnerpool.plugin.output import NONE, since, table, until
from runnerpool.reasons import ConditionType, Reason
from runnerpool.settings import GitHubSettings

__all__ = [
    "CONVERTED",
    "NOT_ALL_MAPPED",
    "UNREADABLE",
    "Context",
    "convert",
    "list_pools",
    "list_runners",
    "remove_offline",
    "why",
]

#: Events ``why`` shows, newest last, and Warning events among "Last errors".
RECENT_EVENTS = 10
RECENT_ERRORS = 5
#: Condition reasons of a pool on its way up, which are no error (runnerpool.reconciler's list).
_STARTING = frozenset({Reason.WAITING_FOR_TOKEN, Reason.TOKEN_NOT_READY, Reason.RUNNERS_STARTING})
_EPOCH = datetime.min.replace(tzinfo=UTC)
#: ``convert``'s exit codes: all mapped; input that makes no pool; pools printed, fields left out.
CONVERTED, UNREADABLE, NOT_ALL_MAPPED = 0, 2, 3


@dataclass
class Context:
    """What every command gets: the cluster as the user sees it, the streams, the clock."""

    cluster: Cluster
    out: TextIO
    err: TextIO
    stdin: TextIO
    #: The operator's default GitHub (``--github-api-url``), which resolves each pool's URL.
    github: GitHubSettings
    now: Callable[[], datetime] = utcnow

    def print(self, text: str = "") -> None:
        print(text, file=self.out)


def _model(raw: Mapping[str, Any]) -> api.RunnerPool:
    """The pool as the operator parses it; a stored spec it refuses cannot be acted on here either."""
    try:
        return api.RunnerPool.model_validate(raw)
    except pydantic.ValidationError as err:
        problems = "; ".join(e["msg"] for e in err.errors())
        name = (raw.get("metadata") or {}).get("name")
        raise PluginError(
            f"runnerpool {name!r} has a spec the operator refuses ({problems}); fix the spec"
        ) from None


def _number(value: int | None) -> str:
    return NONE if value is None else str(value)


# -- list -----------------------------------------------------------------------------------------


def list_pools(ctx: Context, namespace: str | None, output: str) -> int:
    """``list [-n NS | -A] [-o json]``."""
    pools = ctx.cluster.pools(namespace)
    secrets = ctx.cluster.token_secrets(namespace)
    expiries = None if secrets is None else views.token_expiries(secrets)
    rows = sorted((views.pool_row(raw, expiries) for raw in pools), key=lambda r: (r.namespace, r.name))
    if output == "json":
        ctx.print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    if not rows:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        print(f"No RunnerPools found in {where}.", file=ctx.err)
        return 0
    now = ctx.now()
    headers = ["NAME", "SCOPE", "DESIRED", "READY", "BUSY", "QUEUED", "TOKEN EXPIRES", "STATUS"]
    cells = [
        [
            row.name,
            row.scope,
            _number(row.desired),
            str(row.ready),
            _number(row.busy),
            _number(row.queued),
            until(row.token_expires_at, now),
            NONE
            if row.ready_status is None
            else f"{'Ready' if row.ready_status == 'True' else 'NotReady'} ({row.ready_reason})",
        ]
        for row in rows
    ]
    if namespace is None:
        headers.insert(0, "NAMESPACE")
        cells = [[row.namespace, *line] for row, line in zip(rows, cells, strict=True)]
    ctx.print(table(headers, cells))
    return 0


# -- runners --------------------------------------------------------------------------------------


def _runner_rows(
    ctx: Context, namespace: str, name: str
) -> tuple[api.RunnerPool, PoolGitHub, list[views.RunnerRow]]:
    pool = _model(ctx.cluster.pool(namespace, name))
    pods = ctx.cluster.pool_pods(namespace, name)
    github = PoolGitHub.of(ctx.cluster, pool, ctx.github.api_url_of(pool))
    return pool, github, views.match(github.pool_runners(pool), pods)


def _runner_table(rows: list[views.RunnerRow]) -> str:
    cells = [
        [
            NONE if row.runner is None else row.runner.name,
            NONE if row.runner is None else str(row.runner.id),
            NONE if row.runner is None else row.runner.status,
            NONE if row.runner is None else str(row.runner.busy).lower(),
            NONE if row.pod is None else row.pod.name,
            NONE if row.pod is None else row.pod.phase,
            row.note,
        ]
        for row in rows
    ]
    return table(["RUNNER", "ID", "STATUS", "BUSY", "POD", "POD PHASE", "NOTE"], cells)


def list_runners(ctx: Context, namespace: str, name: str, output: str) -> int:
    """``runners POOL``: GitHub's runners of the pool (one listing) matched to its pods by name."""
    pool, _, rows = _runner_rows(ctx, namespace, name)
    if output == "json":
        ctx.print(json.dumps([row.as_json() for row in rows], indent=2))
        return 0
    if not rows:
        print(f"No runners or runner pods for pool {pool.key} ({pool.scope}).", file=ctx.err)
        return 0
    ctx.print(_runner_table(rows))
    return 0


# -- remove-offline -------------------------------------------------------------------------------


def remove_offline(ctx: Context, namespace: str, name: str, yes: bool) -> int:
    """``remove-offline POOL [--yes]``: delete the pool's offline idle runners on GitHub.

    Busy runners are never candidates (GitHub may list one offline for a moment while its
    job's connection drops), and GitHub itself refuses to delete one that took a job since
    the listing (422): it is kept and said so.
    """
    pool, github, rows = _runner_rows(ctx, namespace, name)
    offline = [row for row in rows if row.runner is not None and row.runner.offline and not row.runner.busy]
    if not offline:
        ctx.print(f"No offline idle runners of pool {pool.key} on GitHub ({pool.scope}).")
        return 0
    ctx.print(f"Offline idle runners of pool {pool.key} on GitHub ({pool.scope}):")
    ctx.print(_runner_table(offline))
    if not yes:
        ctx.out.write(f"Remove these {len(offline)} runner(s) from GitHub? [y/N] ")
        ctx.out.flush()
        answer = ctx.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            ctx.print("Nothing removed.")
            return 1
    kept = 0
    for row in offline:
        assert row.runner is not None
        runner = row.runner
        outcome = github.call(functools.partial(github.github.delete_runner, github.scope, runner.id))
        if outcome is DeleteOutcome.DELETED:
            ctx.print(f"removed runner {runner.name} (id {runner.id})")
        elif outcome is DeleteOutcome.ALREADY_GONE:
            ctx.print(f"runner {runner.name} (id {runner.id}) was already gone")
        else:
            kept += 1
            ctx.print(f"kept runner {runner.name} (id {runner.id}): GitHub says it took a job")
    return 0 if not kept else 1


# -- why ------------------------------------------------------------------------------------------


def _pool_events(ctx: Context, namespace: str, name: str, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events of the pool and of its pods, those gone included (``<pool>-<5 random>``)."""
    pod_names = {str(p["metadata"]["name"]) for p in pods}
    pod_name = re.compile(rf"^(runnerpool-)?{re.escape(name)}-[a-z0-9]+(-[a-z0-9]{{5}})?$")
    about_pool = [
        e
        for e in ctx.cluster.events(namespace, api.KIND)
        if (e.get("involvedObject") or {}).get("name") == name
    ]
    about_pods = [
        e
        for e in ctx.cluster.events(namespace, "Pod")
        if (n := str((e.get("involvedObject") or {}).get("name") or "")) in pod_names or pod_name.match(n)
    ]
    return sorted([*about_pool, *about_pods], key=lambda e: views.event_time(e) or _EPOCH)


def _object(event: Mapping[str, Any]) -> str:
    """``runnerpool/NAME`` or ``pod/NAME``, as kubectl names objects."""
    obj = event.get("involvedObject") or {}
    return f"{str(obj.get('kind') or '').lower()}/{obj.get('name')}"


def _latest_warnings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest Warning Events, one per object, reason and message (a scheduler's retries
    and a component's repeats say the same thing), oldest first."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for event in events:
        if event.get("type") == "Warning":
            key = (_object(event), str(event.get("reason")), str(event.get("message")))
            latest.pop(key, None)
            latest[key] = event
    return list(latest.values())[-RECENT_ERRORS:]


def _event_line(event: Mapping[str, Any], now: datetime) -> list[str]:
    count = int(event.get("count") or 1)
    seen = since(views.event_time(event), now) + (f" (x{count})" if count > 1 else "")
    return [
        seen,
        str(event.get("type") or ""),
        str(event.get("reason") or ""),
        _object(event),
        str(event.get("message") or ""),
    ]


def _conditions_table(found: list[dict[str, Any]], now: datetime) -> str:
    if not found:
        return "  none yet"
    rows = [
        [
            str(c.get("type")),
            str(c.get("status")),
            str(c.get("reason") or ""),
            since(parse_rfc3339(c.get("lastTransitionTime")), now),
            str(c.get("message") or ""),
        ]
        for c in found
    ]
    return table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows)


def _pods_line(pods: list[dict[str, Any]], desired: Any) -> str:
    phases: dict[str, int] = {}
    for pod in pods:
        phase = views.pod_phase(pod)
        phases[phase] = phases.get(phase, 0) + 1
    summary = ", ".join(f"{phase} {count}" for phase, count in sorted(phases.items()))
    shown = desired if desired is not None else NONE
    return f"Pods: {len(pods)} of {shown} desired" + (f" ({summary})" if summary else "")


def _events_table(events: list[dict[str, Any]], now: datetime) -> str:
    recent = events[-RECENT_EVENTS:]
    if not recent:
        return "  none (Events expire after an hour)"
    return table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], [_event_line(e, now) for e in recent])


def _last_errors(
    found: list[dict[str, Any]], pods: list[dict[str, Any]], events: list[dict[str, Any]], now: datetime
) -> list[str]:
    """Failing conditions (not a pool's normal start), containers that do not run, Warning Events."""
    errors = [
        f"condition {c.get('type')}: {c.get('reason')}: {c.get('message')}"
        for c in found
        if c.get("status") != "True"
        and c.get("reason") not in _STARTING
        and c.get("type") != ConditionType.SCALING
    ]
    errors += views.container_problems(pods)
    errors += [
        f"{since(views.event_time(e), now)} ago {_object(e)}: {e.get('reason')}: {e.get('message')}"
        for e in _latest_warnings(events)
    ]
    return errors


def why(ctx: Context, namespace: str, name: str) -> int:
    """``why POOL``: what the operator waits for, the conditions, recent Events, the last errors."""
    raw = ctx.cluster.pool(namespace, name)
    pods = ctx.cluster.pool_pods(namespace, name)
    events = _pool_events(ctx, namespace, name, pods)
    now = ctx.now()
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    found = list(status.get("conditions") or [])
    errors = _last_errors(found, pods, events, now)
    sections = [
        f"RunnerPool {namespace}/{name} ({views.scope_text(spec)})\n{views.waiting_for(raw, pods)}",
        f"Conditions:\n{_conditions_table(found, now)}",
        _pods_line(pods, status.get("desiredReplicas", spec.get("replicas"))),
        f"Recent events:\n{_events_table(events, now)}",
        "Last errors:\n" + ("\n".join(f"  {line}" for line in errors) if errors else "  none"),
    ]
    if meta.get("deletionTimestamp"):
        sections.append(
            f"Being deleted since {since(parse_rfc3339(meta.get('deletionTimestamp')), now)} ago."
        )
    ctx.print("\n\n".join(sections))
    return 0


# -- convert --------------------------------------------------------------------------------------


def convert(filename: str, namespace: str | None, *, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """``convert -f FILE|-``: the pools on stdout, one ``# not mapped:`` line per field left out on stderr."""
    try:
        text = stdin.read() if filename == "-" else Path(filename).read_text(encoding="utf-8")
        pools, skipped = convert_text(text)
    except OSError as failure:
        print(f"error: cannot read {filename}: {failure.strerror or failure}", file=err)
        return UNREADABLE
    except UnicodeDecodeError:
        print(f"error: cannot read {filename}: not UTF-8 text", file=err)
        return UNREADABLE
    except ConvertError as failure:
        print(f"error: {failure}", file=err)
        return UNREADABLE
    out.write(render(pools, namespace))
    for converted in pools:
        if converted.unmapped and len(pools) > 1:
            print(f"# {converted.source}:", file=err)
        for unmapped in converted.unmapped:
            print(unmapped.line(), file=err)
    for unmapped in skipped:
        print(unmapped.line(), file=err)
    return NOT_ALL_MAPPED if skipped or any(c.unmapped for c in pools) else CONVERTED
