"""``python -m bench.run``: how the operator behaves with 10 to 10,000 pools.

Everything is real except GitHub and the runner pods: a local control plane, the operator's
console script as its own process, the fake GitHub and the runner simulator (the same
pieces as ``make demo`` and the e2e tests).  For each size, on a fresh control plane:

1. Create N pools at once; from watches, time each pool's create -> token in its Secret and
   create -> Ready=True, and the time until all N are Ready; from the audit log, the time until
   every runner pod exists and the most pod creates the server had in flight at once.
2. GitHub requests per pool per hour, in compressed time: token lifetime, refresh margin and
   the fake's rate limit are scaled by ``--time-scale`` (30: one simulated hour is 120 s) and
   every request the fake answers in one simulated hour is counted.
3. Switch the fake to real one-hour tokens, let every pool pick one up, then count the
   operator's writes to the API server in a quiet window of two resync periods: from the
   API server's audit log (mutating verbs by anything that is neither the bench nor the
   controller manager) and by comparing resourceVersions of every pool, Secret, runner
   pod and disruption budget before and after.  A converged operator should write nothing.
4. The operator's peak RSS (VmHWM) and CPU time (user+system from /proc/<pid>/stat): from
   exec until /readyz answers (start-up, its bytecode compiled first as in its image) and from
   the first create until all Ready (converge);
   and both over the whole run, sampled by a thread of the bench (bench/sampler.py).
5. The operator's writes to converge, by kind: every mutating request in the audit log
   between the first create and the last pool's Ready, by resource (runnerpools,
   runnerpools/status, secrets, pods, poddisruptionbudgets, events, ...), so it keeps counting
   whatever objects the pod path creates.

6. With ``--idle SECONDS``, after convergence: the operator's CPU and GitHub requests in a
   window of that many seconds with nothing to do (use ``--time-scale 1`` for the defaults'
   intervals).
7. With ``--deletion``, after convergence (and the steady state, unless ``--converge-only``):
   delete every pool at once and time it until no runner is registered on the fake and until
   every pool is gone; the operator's CPU meanwhile and its runner listings per scope.

``--profile OUT.html`` runs the operator under pyinstrument (bench/profile_operator.py, every
thread) and ``--converge-only`` stops each size after convergence; together they profile the
part of the run that matters without the minutes of steady state.

Prints a table and writes JSON to bench/results/, with PNG plots beside it (bench/plots.py):
pools with a token and Ready over time, the per-pool latency distributions, RSS and CPU; each
size's figures also go to bench/history.jsonl as one row (bench/history.py; not under
``--profile``, which doubles the operator's CPU). It is a
measurement, not a test: nothing fails on a missed target; bench/README.md compares the figures
with the targets.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.informer import ADDED, MODIFIED

import runnerpool
import secret_updater
from bench import history, plots
from bench.sampler import ProcessSampler
from bench.stats import peak_overlap, percentile
from runnerpool import api, naming
from runnerpool.naming import MANAGED_BY_SELECTOR
from runnerpool.reasons import ConditionType
from runnerpool.runtime.informers import ListWatchAdapter, StoppableInformer
from runnerpool.settings import QueueSettings
from testworld.demo import install_crd
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import enable_namespace, operator_kubeconfig
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.state import DEFAULT_RATE_LIMIT
from testworld.simulator import OperatorProcess, RunnerSimulator, operator_command
from testworld.wait import poll_until

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
NAMESPACE = "bench"
PAT = "ghp_bench000000000000000000000000000000"
BENCH_AGENT = "runnerpool-bench"
#: Agents whose writes are not the operator's in the audit log.
NOT_OPERATOR = (BENCH_AGENT, "kube-controller-manager", "kube-apiserver")
MUTATING = {"create", "update", "patch", "delete", "deletecollection"}
#: Time for the audit log to catch up with the request that made the last pool Ready.
AUDIT_SETTLE = 2.0
REAL_HOUR = 3600.0
#: The operator's defaults that the time scale compresses.
DEFAULT_MARGIN_MINUTES = 30.0
DEFAULT_RUNNER_SYNC = 60.0
#: The operator's own ``--workers`` default.
DEFAULT_WORKERS = QueueSettings().workers


@dataclass
class Options:
    sizes: list[int]
    workers: int
    replicas: int
    #: ``--pod-create-concurrency`` of the operator (``None``: its default).
    pod_creates: int | None
    scopes: int
    time_scale: float
    quiet_periods: int
    resync_period: float
    converge_timeout: float
    out: Path
    #: Seconds from the deletions until every runner is deregistered and every pool gone.
    deletion_timeout: float = 600.0
    profile: Path | None = None
    converge_only: bool = False
    github_hour: bool = True
    deletion: bool = False
    idle: float = 0.0
    plot: Path | None = None

    @property
    def sim_hour(self) -> float:
        return REAL_HOUR / self.time_scale


@dataclass
class SizeResult:
    pools: int
    converged: bool = False
    pools_ready: int = 0
    token_p50: float | None = None
    token_p99: float | None = None
    ready_p50: float | None = None
    ready_p99: float | None = None
    all_ready: float | None = None
    #: From the first pool's create until the server answered the last runner pod's create.
    all_pods_exist: float | None = None
    #: The most runner pod creates the server had in flight at once (its audit log's times).
    peak_pod_creates: int | None = None
    create_seconds: float | None = None
    github_per_pool_hour: float | None = None
    github_by_endpoint: dict[str, int] = field(default_factory=dict)
    quiet_window: float | None = None
    audit_writes: int | None = None
    audit_write_detail: dict[str, int] = field(default_factory=dict)
    changed_objects: int | None = None
    peak_rss_mib: float | None = None
    cpu_seconds_converge: float | None = None
    cpu_ms_per_pool: float | None = None
    cpu_seconds_startup: float | None = None
    cpu_seconds_total: float | None = None
    converge_writes: dict[str, int] = field(default_factory=dict)
    converge_writes_by_kind: dict[str, int] = field(default_factory=dict)
    writes_per_pool: float | None = None
    #: The reconcile passes until every pool was Ready, by the action their log line names.
    converge_passes: dict[str, int] = field(default_factory=dict)
    passes_per_pool: float | None = None
    idle_cpu_seconds: float | None = None
    idle_github: dict[str, int] = field(default_factory=dict)
    deletion_deregistered: float | None = None
    deletion_gone: float | None = None
    deletion_cpu_seconds: float | None = None
    #: The operator's writes from the deletions until every pool is gone, by verb and resource.
    deletion_writes: dict[str, int] = field(default_factory=dict)
    deletion_listings: int | None = None
    deletion_listings_per_scope: int | None = None
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The samples behind the figures, for the plots: per-pool latencies (``token_seconds``,
    #: ``ready_seconds``: from the pool's create), when each pool got there (``token_at``,
    #: ``ready_at``: from the first create) and the operator's ``resources`` over the run.
    series: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ observation


class Watcher:
    """First time each pool had a token and was Ready, from watches on the bench's side."""

    def __init__(self, api_client: client.ApiClient) -> None:
        core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        crd = {"group": api.GROUP, "version": api.VERSION, "plural": api.PLURAL}
        self._adapters = [
            ListWatchAdapter(custom.list_namespaced_custom_object, crd),
            ListWatchAdapter(core.list_namespaced_secret),
        ]
        self.pools = StoppableInformer(self._adapters[0], namespace=NAMESPACE)
        self.secrets = StoppableInformer(
            self._adapters[1], namespace=NAMESPACE, label_selector=MANAGED_BY_SELECTOR
        )
        self._changed = threading.Condition()
        self.token_at: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        for event in (ADDED, MODIFIED):
            self.pools.add_event_handler(event, self._on_pool)
            self.secrets.add_event_handler(event, self._on_secret)

    def start(self) -> Watcher:
        for informer in (self.pools, self.secrets):
            informer.start()
        for adapter in self._adapters:
            adapter.synced.wait(30)
        return self

    def stop(self) -> None:
        for informer in (self.pools, self.secrets):
            informer.signal_stop()
        for informer in (self.pools, self.secrets):
            informer.join(10)

    def _on_pool(self, pool: dict[str, Any]) -> None:
        now = time.perf_counter()
        name = pool["metadata"]["name"]
        conditions = (pool.get("status") or {}).get("conditions") or []
        if any(c.get("type") == ConditionType.READY and c.get("status") == "True" for c in conditions):
            with self._changed:
                self.ready_at.setdefault(name, now)
                self._changed.notify_all()

    def _on_secret(self, secret: dict[str, Any]) -> None:
        now = time.perf_counter()
        if (secret.get("data") or {}).get(naming.TOKEN_SECRET_KEY):
            pool = (secret["metadata"].get("labels") or {}).get(naming.POOL_LABEL, "")
            with self._changed:
                self.token_at.setdefault(pool, now)
                self._changed.notify_all()

    def wait_ready(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.ready_at) >= count, timeout)

    def long_tokens_everywhere(self, count: int, longer_than: timedelta) -> bool:
        """Every pool's Secret and status carry a token that expires after ``longer_than`` from now."""
        horizon = datetime.now(UTC) + longer_than
        secrets = [s for s in self.secrets.cache.list() if (s.get("data") or {}).get(naming.TOKEN_SECRET_KEY)]
        expiries = {
            (s["metadata"].get("labels") or {}).get(naming.POOL_LABEL): (
                s["metadata"].get("annotations") or {}
            ).get(naming.TOKEN_EXPIRY_ANNOTATION, "")
            for s in secrets
        }
        if len(expiries) < count or any(not e or _parse(e) < horizon for e in expiries.values()):
            return False
        published = {
            p["metadata"]["name"]: (p.get("status") or {}).get("tokenExpiresAt")
            for p in self.pools.cache.list()
        }
        return all(published.get(pool) == expiry for pool, expiry in expiries.items())


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class AuditTail:
    """Mutating requests in the API server's audit log since a mark, by who is not the operator."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        self._offset = audit.end_of_complete_events(self.path) if self.path else 0

    def operator_writes(self, received_before: datetime | None = None) -> Counter[str]:
        """``"verb resource[/subresource]"`` -> count, for requests received before the given time."""
        found: Counter[str] = Counter()
        if self.path is None:
            return found
        for event in audit.complete_events(self.path, self._offset):
            agent = str(event.get("userAgent", ""))
            if event.get("stage") != "ResponseComplete" or event.get("verb") not in MUTATING:
                continue
            if any(agent.startswith(a) or a in agent for a in NOT_OPERATOR):
                continue
            if received_before and _parse(event["requestReceivedTimestamp"]) > received_before:
                continue
            ref = event.get("objectRef") or {}
            what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            found[f"{event['verb']} {what}"] += 1
        return found

    def pod_creates(self) -> list[tuple[datetime, datetime]]:
        """When the server received and answered each pod create that made a pod (any agent:
        the operator is the only one that creates pods in the bench's namespace)."""
        if self.path is None:
            return []
        return [
            (_parse(event["requestReceivedTimestamp"]), _parse(event["stageTimestamp"]))
            for event in audit.complete_events(self.path, self._offset)
            if event.get("stage") == "ResponseComplete"
            and event.get("verb") == "create"
            and (event.get("objectRef") or {}).get("resource") == "pods"
            and (event.get("objectRef") or {}).get("namespace") == NAMESPACE
            and (event.get("responseStatus") or {}).get("code") == 201
        ]


def by_kind(writes: Counter[str] | dict[str, int]) -> dict[str, int]:
    """``"patch runnerpools/status"`` -> ``"runnerpools/status"``: writes per resource, any verb."""
    kinds: Counter[str] = Counter()
    for verb_resource, count in writes.items():
        kinds[verb_resource.split(" ", 1)[1]] += count
    return dict(kinds.most_common())


def passes(log: Path, until: datetime) -> Counter[str]:
    """The operator's reconcile passes logged before ``until``, by action (``noop``: a pass
    that found nothing to do). Read from its JSON log: one "reconciled pool" line a pass."""
    actions: Counter[str] = Counter()
    for line in log.read_text(errors="replace").splitlines():
        if '"reconciled pool"' not in line:
            continue
        record = json.loads(line)
        if datetime.fromisoformat(record["time"]) < until:
            actions[record["action"]] += 1
    return actions


def _versions(api_client: client.ApiClient) -> dict[str, str]:
    """resourceVersion of every pool and every operator-owned Secret, budget and runner pod."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    policy = client.PolicyV1Api(api_client)
    out = {
        f"pool/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
        for p in custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL)["items"]
    }
    for kind, items in (
        ("secret", core.list_namespaced_secret(NAMESPACE, label_selector=MANAGED_BY_SELECTOR).items),
        (
            "poddisruptionbudget",
            policy.list_namespaced_pod_disruption_budget(NAMESPACE, label_selector=MANAGED_BY_SELECTOR).items,
        ),
        ("pod", core.list_namespaced_pod(NAMESPACE, label_selector=MANAGED_BY_SELECTOR).items),
    ):
        out.update({f"{kind}/{o.metadata.name}": o.metadata.resource_version for o in items})
    return out


# ------------------------------------------------------------------------------ one size


class ProfiledOperator(OperatorProcess):
    """The same operator process, started by bench/profile_operator.py under pyinstrument."""

    profile_out: Path = RESULTS / "profile.html"

    def command(self) -> list[str]:
        operator_args = super().command()[len(operator_command()) :]
        launcher = ROOT / "profile_operator.py"
        return [sys.executable, str(launcher), str(self.profile_out), "--", *operator_args]


def _operator_flags(opts: Options) -> dict[str, int]:
    """The operator flags a run set away from their defaults: a history row measured with
    another ``--workers`` or ``--pod-create-concurrency`` says so beside its figures."""
    flags = {"workers": opts.workers} if opts.workers != DEFAULT_WORKERS else {}
    return flags | ({"pod_creates": opts.pod_creates} if opts.pod_creates is not None else {})


def compile_operator() -> None:
    """The operator's bytecode written beside its sources, as its image has it (deploy/images/
    operator/Dockerfile: ``pip install --compile``): start-up CPU is then what an installed
    operator spends, without the 0.3-0.5 s of compiling its own modules at every start that an
    editable install under ``PYTHONDONTWRITEBYTECODE`` pays (bench/README.md)."""
    for package in (runnerpool, secret_updater):
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)


def _api_client(kubeconfig: Path) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    api_client = client.ApiClient(configuration)
    api_client.user_agent = BENCH_AGENT
    return api_client


def prepare_cluster(api_client: client.ApiClient) -> None:
    """The CRD, the bench's namespace enabled for the operator and the pools' PAT Secret."""
    install_crd(api_client)
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    enable_namespace(api_client, NAMESPACE)
    core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": PAT}}
    )


def _supports(flag: str) -> bool:
    import subprocess  # noqa: PLC0415 - only for this one look at --help

    done = subprocess.run([*operator_command(), "--help"], capture_output=True, text=True, check=False)
    return flag in done.stdout


def _pool(index: int, opts: Options) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": f"pool-{index:04d}"},
        "spec": {"repository": f"bench-org/repo-{index % opts.scopes}", "replicas": opts.replicas},
    }


def per_pool_hour(counts: Counter[str], n: int, opts: Options, listings_scaled: bool) -> float:
    """Requests per pool per hour of the operator's own clock.

    Token requests follow the compressed clock (lifetime and margin are scaled), so the window
    is one hour of them; runner listings run on the real clock unless their interval could be
    scaled too, so for them the same window is ``sim_hour`` real seconds.
    """
    total = 0.0
    for endpoint, count in counts.items():
        scaled = "registration-token" in endpoint or listings_scaled
        hours = 1.0 if scaled else opts.sim_hour / REAL_HOUR
        total += count / hours
    return total / n


class SizeRun:
    """One size on a fresh control plane; each phase method fills in part of ``result``."""

    def __init__(self, n: int, opts: Options, log_dir: Path, say: Callable[[str], None]) -> None:
        self.n = n
        self.opts = opts
        self.log_dir = log_dir
        self.say = say
        self.result = SizeResult(pools=n)

    def run(self) -> SizeResult:
        with contextlib.ExitStack() as stack:
            self._start(stack)
            self._converge()
            if not self.result.converged:
                self.result.notes.append(
                    f"not all Ready within {self.opts.converge_timeout:.0f}s: steady state not measured"
                )
            else:
                if not self.opts.converge_only:
                    if self.opts.github_hour:
                        self._github_hour()
                    self._quiet_window()
                if self.opts.idle:
                    self._idle()
                if self.opts.deletion:
                    self._deletion()
            self.result.peak_rss_mib = self.operator.peak_rss_bytes() / 2**20
            self.result.cpu_seconds_total = self.operator.cpu_seconds()
            self.sampler.stop()
            self.result.series["resources"] = self.sampler.as_json()
        return self.result

    def _start(self, stack: contextlib.ExitStack) -> None:
        n, opts = self.n, self.opts
        extra = [
            "--workers",
            str(opts.workers),
            "--token-refresh-margin",
            f"{DEFAULT_MARGIN_MINUTES / opts.time_scale:g}",
        ]
        if opts.pod_creates is not None:
            extra += ["--pod-create-concurrency", str(opts.pod_creates)]
        self.runner_sync_scaled = _supports("--runner-sync-interval")
        if self.runner_sync_scaled:
            extra += ["--runner-sync-interval", f"{DEFAULT_RUNNER_SYNC / opts.time_scale:g}"]
        else:
            self.result.notes.append("no --runner-sync-interval: runner listings counted in real time")
        plane = ControlPlane()
        stack.callback(plane.stop)
        plane.start()
        self.fake = stack.enter_context(
            FakeGitHub(
                scopes=[f"bench-org/repo-{i}" for i in range(min(n, opts.scopes))],
                tokens=[PAT],
                registration_token_lifetime=opts.sim_hour,
                rate_limit=int(DEFAULT_RATE_LIMIT * opts.time_scale),
            )
        )
        self.api = _api_client(plane.kubeconfig)
        stack.callback(self.api.close)
        prepare_cluster(self.api)
        operator_class = ProfiledOperator if opts.profile else OperatorProcess
        self.operator = operator_class(
            operator_kubeconfig(plane),
            self.fake.url,
            self.log_dir / f"operator-{n}.log",
            namespaces=[NAMESPACE],
            extra_args=extra,
        )
        if isinstance(self.operator, ProfiledOperator) and opts.profile:
            profile = opts.profile
            self.operator.profile_out = profile.with_name(f"{profile.stem}-{n}{profile.suffix}")
            self.result.notes.append(f"profiled (pyinstrument): {self.operator.profile_out}")
        stack.callback(self.operator.stop)
        compile_operator()
        self.operator.start()
        self.sampler = ProcessSampler(self.operator.pid).start()
        stack.callback(self.sampler.stop)
        self.operator.wait_ready()
        self.sampler.mark("ready")
        self.result.cpu_seconds_startup = self.operator.cpu_seconds()
        self.simulator = stack.enter_context(RunnerSimulator(self.api, self.fake, NAMESPACE, workers=8))
        self.watcher = Watcher(self.api).start()
        stack.callback(self.watcher.stop)
        self.audit = AuditTail(getattr(plane, "audit_log", None))

    def _converge(self) -> None:
        """Create N pools at once and time each one's token and Ready from the watches."""
        n, result, watcher = self.n, self.result, self.watcher
        custom = client.CustomObjectsApi(self.api)
        cpu0 = self.operator.cpu_seconds()
        created: dict[str, float] = {}

        def create(index: int) -> None:
            body = _pool(index, self.opts)
            created[body["metadata"]["name"]] = time.perf_counter()
            custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, body)

        self.say(f"N={n}: creating {n} pools")
        self.audit.mark()
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        self.sampler.mark("creates", start)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        result.create_seconds = time.perf_counter() - start
        result.converged = watcher.wait_ready(n, self.opts.converge_timeout)
        result.pools_ready = len(watcher.ready_at)
        result.cpu_seconds_converge = self.operator.cpu_seconds() - cpu0
        converged_at = datetime.now(UTC)
        if result.converged:
            result.cpu_ms_per_pool = result.cpu_seconds_converge * 1000 / n
        tokens = [watcher.token_at[p] - t for p, t in created.items() if p in watcher.token_at]
        ready = [watcher.ready_at[p] - t for p, t in created.items() if p in watcher.ready_at]
        if tokens:
            result.token_p50, result.token_p99 = percentile(tokens, 50), percentile(tokens, 99)
        if ready:
            result.ready_p50, result.ready_p99 = percentile(ready, 50), percentile(ready, 99)
        if result.converged:
            result.all_ready = max(watcher.ready_at.values()) - start
            done = passes(self.operator.log_path, converged_at)
            result.converge_passes, result.passes_per_pool = dict(done.most_common()), done.total() / n
            self.sampler.mark("all Ready", max(watcher.ready_at.values()))
        result.series.update(
            token_seconds=tokens,
            ready_seconds=ready,
            token_at=[at - start for at in watcher.token_at.values()],
            ready_at=[at - start for at in watcher.ready_at.values()],
        )
        if self.simulator.rejections:
            result.notes.append(f"{len(self.simulator.rejections)} runner registrations refused")
        if result.converged and self.audit.path:
            threading.Event().wait(AUDIT_SETTLE)  # the audit log is written after the response
            writes = self.audit.operator_writes(received_before=converged_at)
            result.converge_writes = dict(writes.most_common())
            result.converge_writes_by_kind = by_kind(writes)
            result.writes_per_pool = sum(writes.values()) / n
            creates = self.audit.pod_creates()
            if len(creates) >= n * self.opts.replicas:
                result.all_pods_exist = (max(end for _, end in creates) - started_at).total_seconds()
            spans = [
                ((begin - started_at).total_seconds(), (end - started_at).total_seconds())
                for begin, end in creates
            ]
            result.peak_pod_creates = peak_overlap(spans)
            result.series["pod_creates"] = spans
        self.say(f"N={n}: {result.pools_ready}/{n} Ready, all after {result.all_ready or float('nan'):.1f}s")

    def _github_hour(self) -> None:
        self.say(f"N={self.n}: counting GitHub requests for one simulated hour ({self.opts.sim_hour:.0f}s)")
        first = len(self.fake.requests)
        self.sampler.mark("GitHub hour")
        threading.Event().wait(self.opts.sim_hour)  # a measurement window, not a wait for a condition
        counts = Counter(r.endpoint for r in self.fake.requests[first:])
        self.result.github_by_endpoint = dict(counts)
        self.result.github_per_pool_hour = per_pool_hour(counts, self.n, self.opts, self.runner_sync_scaled)

    def _quiet_window(self) -> None:
        """Real one-hour tokens first, so that no refresh is due while writes are counted."""
        n, result = self.n, self.result
        self.fake.registration_token_lifetime = REAL_HOUR
        self.say(f"N={n}: switching to one-hour tokens and waiting for every pool to pick one up")
        deadline = max(self.opts.sim_hour * 1.5 + 60, n * 0.6)
        if not poll_until(
            lambda: self.watcher.long_tokens_everywhere(n, timedelta(minutes=40)), deadline, 1.0
        ):
            result.notes.append("not every pool picked up a one-hour token: writes window skipped")
            return
        result.quiet_window = self.opts.quiet_periods * self.opts.resync_period
        self.say(f"N={n}: counting API writes for {result.quiet_window:.0f}s")
        before = _versions(self.api)
        self.audit.mark()
        self.sampler.mark("quiet window")
        threading.Event().wait(result.quiet_window)  # a measurement window
        after = _versions(self.api)
        writes = self.audit.operator_writes()
        result.audit_writes = sum(writes.values()) if self.audit.path else None
        result.audit_write_detail = dict(writes)
        result.changed_objects = sum(1 for k, v in after.items() if before.get(k) != v) + len(
            set(before) - set(after)
        )

    def _idle(self) -> None:
        window = self.opts.idle
        self.say(f"N={self.n}: measuring {window:.0f}s of idle operator")
        first, cpu0 = len(self.fake.requests), self.operator.cpu_seconds()
        threading.Event().wait(window)  # a measurement window
        self.result.idle_cpu_seconds = self.operator.cpu_seconds() - cpu0
        self.result.idle_github = dict(Counter(r.endpoint for r in self.fake.requests[first:]))

    def _deletion(self) -> None:
        """Every pool deleted at once (``kubectl delete runnerpools --all``)."""
        n, result = self.n, self.result
        custom = client.CustomObjectsApi(self.api)
        scopes = [f"bench-org/repo-{i}" for i in range(min(n, self.opts.scopes))]
        first, cpu0 = len(self.fake.requests), self.operator.cpu_seconds()
        self.audit.mark()
        self.say(f"N={n}: deleting every pool")
        start = time.perf_counter()
        names = [f"pool-{index:04d}" for index in range(n)]
        with ThreadPoolExecutor(8) as threads:  # a deletecollection of 10,000 outlasts the API server's 60 s
            list(
                threads.map(
                    lambda name: custom.delete_namespaced_custom_object(
                        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, name
                    ),
                    names,
                )
            )
        deadline = start + self.opts.deletion_timeout  # one for both waits
        if poll_until(
            lambda: not any(self.fake.runners(scope) for scope in scopes), self.opts.deletion_timeout, 0.2
        ):
            result.deletion_deregistered = time.perf_counter() - start

        def no_pools() -> bool:
            found = custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL)
            return not found["items"]

        if poll_until(no_pools, max(deadline - time.perf_counter(), 0.0), 0.5):
            result.deletion_gone = time.perf_counter() - start
        if result.deletion_deregistered is None or result.deletion_gone is None:
            result.notes.append(self._left_after_deletion(scopes))
        result.deletion_cpu_seconds = self.operator.cpu_seconds() - cpu0
        if self.audit.path:
            threading.Event().wait(AUDIT_SETTLE)  # the audit log is written after the response
            result.deletion_writes = dict(self.audit.operator_writes().most_common())
        listings = Counter(
            r.path
            for r in self.fake.requests[first:]
            if r.endpoint.startswith("actions/list-self-hosted-runners")
        )
        result.deletion_listings = sum(listings.values())
        result.deletion_listings_per_scope = max(listings.values(), default=0)
        self.say(f"N={n}: runners deregistered after {result.deletion_deregistered or float('nan'):.1f}s")
        if result.deletion_writes:
            self.say(f"N={n}: writes to delete: {result.deletion_writes}")

    def _left_after_deletion(self, scopes: list[str]) -> str:
        """What a deletion that did not finish left behind, for the note a failed run prints:
        runners still on the fake, pools still there (finalizers, ``RunnersDeregistered``), their
        pods, whether the operator still runs, and its last warnings."""
        runners = [
            f"{scope}: {r['name']} ({r['status']}{', busy' if r['busy'] else ''})"
            for scope in scopes
            for r in self.fake.runners(scope)
        ]
        custom, core = client.CustomObjectsApi(self.api), client.CoreV1Api(self.api)
        pools = []
        for raw in custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL)[
            "items"
        ]:
            found = [
                c for c in raw.get("status", {}).get("conditions", []) if c["type"] == "RunnersDeregistered"
            ]
            said = (
                f"{found[0]['status']} {found[0]['reason']}: {found[0]['message']}" if found else "not said"
            )
            pools.append(f"{raw['metadata']['name']} {raw['metadata'].get('finalizers', [])} {said}")
        pods = [
            f"{p.metadata.name} ({p.status.phase}{', deleting' if p.metadata.deletion_timestamp else ''})"
            for p in core.list_namespaced_pod(NAMESPACE, label_selector=MANAGED_BY_SELECTOR).items
        ]
        lines = self.operator.log_path.read_text(errors="replace").splitlines()
        warnings = [
            line[:400] for line in lines if '"level": "warning"' in line or '"level": "error"' in line
        ]
        return (
            f"deletion unfinished after {self.opts.deletion_timeout:.0f}s; "
            f"runners on GitHub: {runners or 'none'}; pools: {pools or 'none'}; pods: {pods or 'none'}; "
            f"operator {'running' if self.operator.alive else 'exited'}; "
            f"its last warnings: {warnings[-10:] or 'none'}"
        )


# ------------------------------------------------------------------------------ report


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


@dataclass(frozen=True)
class Target:
    """A target (issues 14 and 23): ``field`` of a SizeResult at most ``limits[n]`` (``None``: every size)."""

    field: str
    limits: dict[int | None, float]
    unit: str
    one_replica_only: bool = False

    def limit(self, n: int, replicas: int) -> float | None:
        if self.one_replica_only and replicas != 1:
            return None
        return self.limits.get(n, self.limits.get(None))

    def describe(self) -> str:
        return ", ".join(
            f"{'' if n is None else f'N={n} '}<= {limit:g}{self.unit}" for n, limit in self.limits.items()
        )


TARGETS = (
    Target("all_ready", {100: 2.5, 1000: 10.0, 10000: 150.0}, " s"),
    Target("all_pods_exist", {1: 2.5}, " s"),
    Target("token_p50", {100: 0.3}, " s"),
    Target("token_p99", {100: 1.0}, " s"),
    Target("writes_per_pool", {None: 4.5}, "", one_replica_only=True),
    Target("audit_writes", {None: 0}, ""),
    Target("cpu_ms_per_pool", {None: 10.0}, " ms", one_replica_only=True),
    Target("cpu_seconds_startup", {None: 0.3}, " s"),
    Target("peak_rss_mib", {10: 55.0, 1000: 130.0, 10000: 500.0}, " MiB"),
    Target("idle_cpu_seconds", {10: 0.25}, " s"),
    Target("deletion_deregistered", {1000: 20.0}, " s"),
    Target("deletion_cpu_seconds", {1000: 8.0}, " s"),
)


def judge(result: SizeResult, replicas: int) -> None:
    """Fill ``result.targets`` with each target that applies to this size: limit, figure, met."""
    for target in TARGETS:
        limit = target.limit(result.pools, replicas)
        if limit is None:
            continue
        value = getattr(result, target.field)
        result.targets[target.field] = {
            "limit": limit,
            "value": value,
            "met": None if value is None else value <= limit,
        }


#: (label, SizeResult field, unit, digits) of each row of the printed table.
ROWS = (
    ("create->token p50", "token_p50", " s", 2),
    ("create->token p99", "token_p99", " s", 2),
    ("create->Ready p50", "ready_p50", " s", 2),
    ("create->Ready p99", "ready_p99", " s", 2),
    ("all Ready after", "all_ready", " s", 1),
    ("all runner pods exist after", "all_pods_exist", " s", 2),
    ("pod creates in flight at once (peak)", "peak_pod_creates", "", 0),
    ("API writes to converge/pool", "writes_per_pool", "", 2),
    ("reconcile passes to converge/pool", "passes_per_pool", "", 2),
    ("API writes, quiet window (audit)", "audit_writes", "", 0),
    ("objects changed, quiet window", "changed_objects", "", 0),
    ("GitHub requests/pool/hour", "github_per_pool_hour", "", 2),
    ("operator CPU at start-up", "cpu_seconds_startup", " s", 2),
    ("operator CPU to converge", "cpu_seconds_converge", " s", 2),
    ("operator CPU to converge/pool", "cpu_ms_per_pool", " ms", 1),
    ("operator peak RSS", "peak_rss_mib", " MiB", 0),
    ("idle operator CPU (--idle window)", "idle_cpu_seconds", " s", 2),
    ("deletion: all runners deregistered", "deletion_deregistered", " s", 1),
    ("deletion: all pools gone", "deletion_gone", " s", 1),
    ("deletion: operator CPU", "deletion_cpu_seconds", " s", 2),
    ("deletion: runner listings", "deletion_listings", "", 0),
    ("deletion: listings of the busiest scope", "deletion_listings_per_scope", "", 0),
)


def _cell(result: SizeResult, name: str, unit: str, digits: int) -> str:
    text = _fmt(getattr(result, name), unit, digits)
    verdict = result.targets.get(name)
    if verdict is None or verdict["met"] is None:
        return text
    return f"{text} {'met' if verdict['met'] else 'MISSED'}"


def table(results: list[SizeResult], cores: int) -> str:
    targets = {t.field: t for t in TARGETS}
    rows = [("pools", [str(r.pools) for r in results], "target")]
    for label, name, unit, digits in ROWS:
        target = targets.get(name)
        cells = [_cell(r, name, unit, digits) for r in results]
        rows.append((label, cells, target.describe() if target else ""))
    kinds = sorted({k for r in results for k in r.converge_writes_by_kind})
    for kind in kinds:
        cells = [_fmt(r.converge_writes_by_kind.get(kind, 0) / r.pools, "", 2) for r in results]
        rows.append((f"  writes/pool: {kind}", cells, ""))
    width = max(len(label) for label, _, _ in rows)
    cell_width = max(10, *(len(c) for _, cells, _ in rows for c in cells))
    lines = [f"runnerpool-operator benchmark on {cores} cores ({platform.processor() or platform.machine()})"]
    for label, cells, target_text in rows:
        lines.append(
            f"  {label.ljust(width)}  " + "  ".join(c.rjust(cell_width) for c in cells) + f"  {target_text}"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,100", help="comma-separated pool counts (e.g. 10,100,1000)")
    p.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"operator --workers (its default is {DEFAULT_WORKERS})",
    )
    p.add_argument("--replicas", type=int, default=1, help="runner pods per pool")
    p.add_argument(
        "--pod-create-concurrency",
        type=int,
        metavar="N",
        help="operator --pod-create-concurrency (default: the operator's own default)",
    )
    p.add_argument("--scopes", type=int, default=10, help="repositories the pools are spread over")
    p.add_argument("--time-scale", type=float, default=30.0, help="simulated hours per real hour")
    p.add_argument("--resync-period", type=float, default=30.0, help="seconds; the quiet window is 2 of them")
    p.add_argument("--converge-timeout", type=float, default=600.0, help="seconds to wait for all Ready")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--profile",
        type=Path,
        metavar="OUT.html",
        help="run the operator under pyinstrument (all threads); writes OUT-<N>.html (.txt for text) "
        "and OUT-<N>.html.top.txt (self time per function without blocking waits)",
    )
    p.add_argument("--converge-only", action="store_true", help="stop each size once all pools are Ready")
    p.add_argument(
        "--no-github-hour",
        action="store_true",
        help="skip the simulated hour of GitHub requests (an hour of real time at --time-scale 1)",
    )
    p.add_argument("--idle", type=float, default=0.0, metavar="SECONDS", help="then measure an idle window")
    p.add_argument("--deletion", action="store_true", help="then delete every pool at once and time it")
    p.add_argument(
        "--deletion-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for every runner deregistered and every pool gone",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="BENCH.json",
        help="run nothing: draw the plots of an earlier result again, beside it",
    )
    args = p.parse_args(argv)
    return Options(
        sizes=[int(s) for s in args.sizes.split(",") if s.strip()],
        workers=args.workers,
        replicas=args.replicas,
        pod_creates=args.pod_create_concurrency,
        scopes=args.scopes,
        time_scale=args.time_scale,
        quiet_periods=2,
        resync_period=args.resync_period,
        converge_timeout=args.converge_timeout,
        out=args.out,
        profile=args.profile.resolve() if args.profile else None,
        converge_only=args.converge_only,
        github_hour=not args.no_github_hour,
        deletion=args.deletion,
        deletion_timeout=args.deletion_timeout,
        idle=args.idle,
        plot=args.plot,
    )


def write_plots(result: dict[str, Any], prefix: Path) -> list[Path]:
    """The three plots of one size (a SizeResult as JSON), named ``<prefix>-N<pools>-<plot>.png``."""
    n, series = result["pools"], result["series"]
    name = f"{prefix.name}-N{n}"
    written = [
        plots.convergence(
            prefix.with_name(f"{name}-convergence.png"),
            {"token in Secret": series.get("token_at", []), "Ready": series.get("ready_at", [])},
            title=f"{n} pools created at once: how many have a token, how many are Ready",
            total=n,
        ),
        plots.latency(
            prefix.with_name(f"{name}-latency.png"),
            {
                "create → token": series.get("token_seconds", []),
                "create → Ready": series.get("ready_seconds", []),
            },
            title=f"per-pool latency, {n} pools",
        ),
    ]
    resources = series.get("resources")
    if resources:
        written.append(
            plots.resources(
                prefix.with_name(f"{name}-resources.png"),
                resources["samples"],
                title=f"operator process, {n} pools (sampled every {resources['interval']:g} s)",
                marks=resources["marks"],
            )
        )
    return written


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.plot is not None:
        for result in json.loads(opts.plot.read_text())["results"]:
            for png in write_plots(result, opts.plot.with_suffix("")):
                print(f"plot: {png}")
        return 0
    opts.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = opts.out / f"logs-{stamp}"
    cores = os.cpu_count() or 0
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {text}", file=sys.stderr, flush=True)

    results = []
    for n in opts.sizes:
        results.append(SizeRun(n, opts, log_dir, say).run())
        judge(results[-1], opts.replicas)
        figures = {k: v for k, v in asdict(results[-1]).items() if k != "series"}
        say(f"N={n}: done {json.dumps(figures)}")
    report = {
        "when": stamp,
        "machine": {"cores": cores, "python": platform.python_version(), "platform": platform.platform()},
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "results": [asdict(r) for r in results],
        "operator_logs": str(log_dir),
    }
    path = opts.out / f"bench-{stamp}.json"
    path.write_text(json.dumps(report, indent=2))
    for r in results if opts.profile is None else ():  # a profiler's CPU is not the operator's
        figures = asdict(r)
        scalars = {k: v for k, v in figures.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        history.append("run", {"pools": r.pools, "replicas": opts.replicas, **_operator_flags(opts)}, scalars)
    pngs = [png for r in report["results"] for png in write_plots(r, path.with_suffix(""))]
    print(table(results, cores))
    for r in results:
        for note in r.notes:
            print(f"  N={r.pools}: {note}")
        if r.converge_writes:
            print(f"  N={r.pools}: writes to converge: {r.converge_writes}")
        if r.converge_passes:
            print(f"  N={r.pools}: reconcile passes to converge: {r.converge_passes}")
        if r.audit_write_detail:
            print(f"  N={r.pools}: writes in the quiet window: {r.audit_write_detail}")
        print(f"  N={r.pools}: GitHub requests in one simulated hour: {r.github_by_endpoint}")
        if r.idle_github:
            print(f"  N={r.pools}: GitHub requests in the idle window: {r.idle_github}")
    print(f"results: {path}")
    for png in pngs:
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
