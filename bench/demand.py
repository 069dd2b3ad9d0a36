"""``python -m bench.demand``: a pool at minimum 0 following demand on the real node.

Run it in the sealed world, where the node lives:
``.venv/bin/python -m testworld.node.seal -- .venv/bin/python -m bench.demand``.

Everything is real except GitHub: a local control plane, the kubelet + containerd node,
the operator's console script as its own process, runner pods from the operator's pod spec
running the runner test image, and the fake GitHub, which delivers signed ``workflow_job``
webhooks to the operator (``testworld.fakegithub.webhooks``). For each mode (webhooks,
then polling only) and burst size (1, 10, 50 jobs queued at once, each running
``--job-seconds``):

* queued -> in_progress latency per job, p50 and p99, taken from the fake's own job events
  (the moment a job is queued and the moment a runner starts it);
* where a pickup's time goes, p50 per stage: queued -> pod created (the operator) ->
  runner online (the node starts the pod, the runner registers and listens; from the
  fake's listener log) -> job started (GitHub offers it, the runner takes it);
* time back to 0: from the last job's completion until the pool has no pod left and
  decides 0 (``status.desiredReplicas``), against ``scaleDownDelay`` + 10 s;
* with ``--min-idle N`` the pool keeps a warm buffer (``spec.autoscaling.minIdle``, its
  ``maxReplicas`` raised by N so the largest burst keeps it whole): each burst starts once N
  runners are online and idle, "back to 0" is back to that rest, and the jobs a warm runner
  took (one online before the burst) get their own pickup p50 and p95;
* busy runners killed: jobs that did not end ``success`` (GitHub fails a job whose runner
  goes away);
* GitHub requests: the operator's requests the fake answered while the bursts ran, per
  job, and while the pool then sat idle at 0 for ``--idle`` seconds, scaled to an hour;
  "budget" leaves out the 304s GitHub does not count.

Prints a table and writes JSON to bench/results/, with PNG plots beside it (bench/plots.py):
the pickup latency of every burst, and each mode's operator RSS and CPU over time (sampled
by a thread of the bench, bench/sampler.py). It is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.informer import ADDED

from bench import plots
from bench.sampler import ProcessSampler
from bench.stats import percentile
from runnerpool import api, naming
from runnerpool.runtime.informers import ListWatchAdapter, StoppableInformer
from testworld.demo import install_crd
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import enable_namespace, operator_kubeconfig, receiver_kubeconfig
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.state import RequestRecord
from testworld.node import seal
from testworld.node.node import NODE_TOLERATION, Node
from testworld.ports import free_port
from testworld.simulator import OperatorProcess, iter_runner_labels
from testworld.wait import poll_until

REPO = "octo-org/hello-world"
PAT = "ghp_bench_demand_0123456789abcdefghijkl"
SECRET = b"bench webhook secret"
NAMESPACE = "bench-demand"
POOL = "follow"
RESULTS = Path(__file__).parent / "results"


@dataclass
class Burst:
    mode: str
    jobs: int
    pickup_p50: float
    pickup_p99: float
    pickup_max: float
    back_to_zero: float
    failed_jobs: int
    #: p50 of each of `STAGES` (seconds), for the jobs whose every stage was seen.
    stages_p50: dict[str, float] = field(default_factory=dict)
    #: Every job's queued -> in_progress seconds (the plots' samples).
    pickups: list[float] = field(default_factory=list)
    pickup_p95: float = 0.0
    #: ``--min-idle``; and the pickups of the jobs a runner online before the burst took.
    min_idle: int = 0
    warm_pickups: list[float] = field(default_factory=list)
    warm_p50: float | None = None
    warm_p95: float | None = None

    @property
    def label(self) -> str:
        return _mode_label(asdict(self))


@dataclass
class Mode:
    """The operator's GitHub requests in one mode: while it ran the bursts, and idle at 0."""

    mode: str
    seconds: float
    requests: Counter[str] = field(default_factory=Counter)
    budget_requests: int = 0
    jobs: int = 0
    idle_seconds: float = 0.0
    idle_requests: int = 0
    idle_budget_requests: int = 0
    #: The operator's RSS and CPU over the mode (``ProcessSampler.as_json``).
    resources: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def per_job(self, count: int) -> float:
        return count / self.jobs if self.jobs else 0.0

    def idle_per_hour(self, count: int) -> float:
        return count * 3600.0 / self.idle_seconds if self.idle_seconds else 0.0


class JobClock:
    """The fake's job events, timed as they happen (under the fake's lock).

    Wall-clock seconds, like the fake's listener log and the pod watch, so that the
    stages of one pickup can be told apart.
    """

    def __init__(self) -> None:
        self.queued: dict[int, float] = {}
        self.started: dict[int, float] = {}
        self.completed: dict[int, float] = {}
        self._lock = threading.Lock()

    def __call__(self, payload: dict[str, Any]) -> None:
        now = time.time()
        job_id = int(payload["workflow_job"]["id"])
        table = {"queued": self.queued, "in_progress": self.started, "completed": self.completed}.get(
            payload["action"]
        )
        if table is not None:
            with self._lock:
                table.setdefault(job_id, now)


class PodClock:
    """When each runner pod first appeared in the API (an informer on the bench namespace).

    The container's start is not taken from the pod's status: with 50 pods starting the
    kubelet's status updates came seconds after the runner inside was already online.
    """

    def __init__(self, core: client.CoreV1Api) -> None:
        self.created: dict[str, float] = {}
        self._adapter = ListWatchAdapter(core.list_namespaced_pod)
        self._informer = StoppableInformer(self._adapter, namespace=NAMESPACE)
        self._informer.add_event_handler(ADDED, self._added)

    def _added(self, pod: dict[str, Any]) -> None:
        self.created.setdefault(pod["metadata"]["name"], time.time())

    def start(self) -> None:
        self._informer.start()
        self._adapter.synced.wait(30)

    def stop(self) -> None:
        self._informer.signal_stop()


#: The stages of one pickup, queued -> in progress, in order; each from the previous one:
#: the operator creates the pod; the node starts it and the runner registers and listens;
#: GitHub offers the job and the runner starts it.
STAGES = ("pod created", "runner online", "job started")


def _stages(queued: float, started: float, created: float, online: float) -> list[float]:
    """Seconds spent in each of `STAGES`."""
    marks = [queued, created, online, started]
    return [later - earlier for earlier, later in itertools.pairwise(marks)]


class Bench:
    def __init__(self, args: argparse.Namespace, plane: ControlPlane, node: Node, fake: FakeGitHub) -> None:
        self.args = args
        self.plane = plane
        self.node = node
        self.fake = fake
        self.api_client = config.new_client_from_config(config_file=str(plane.kubeconfig))
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.clock = JobClock()
        fake.on_job_event(self.clock)
        self.pods = PodClock(self.core)
        self.pods.start()

    def setup(self) -> None:
        install_crd(self.api_client)
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        enable_namespace(self.api_client, NAMESPACE)
        self.core.create_namespaced_secret(
            NAMESPACE, {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": PAT}}
        )

    def operator(self, workdir: Path, mode: str) -> OperatorProcess:
        args = [
            "--runner-image",
            self.node.runner_image.reference,
            "--demand-poll-interval",
            str(self.args.poll_interval),
            "--runner-sync-interval",
            str(self.args.runner_sync_interval),
        ]
        return OperatorProcess(
            operator_kubeconfig(self.plane),
            self.fake.url,
            workdir / f"operator-{mode}.log",
            namespaces=[NAMESPACE],
            extra_args=args,
        )

    def receiver(self, workdir: Path, port: int) -> OperatorProcess:
        """The webhook receiver apart, on its own account, as deploy/ runs it."""
        secret_file = workdir / "webhook-secret"
        secret_file.write_bytes(SECRET + b"\n")
        return OperatorProcess(
            receiver_kubeconfig(self.plane),
            self.fake.url,
            workdir / "webhook-receiver.log",
            namespaces=[NAMESPACE],
            webhook_port=port,
            extra_args=["--webhook-secret-file", str(secret_file)],
            component="webhook-receiver",
        )

    def create_pool(self) -> None:
        self.custom.create_namespaced_custom_object(
            api.GROUP,
            api.VERSION,
            NAMESPACE,
            api.PLURAL,
            {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "metadata": {"name": POOL},
                "spec": {
                    "repository": REPO,
                    "replicas": 0,
                    "tolerations": [NODE_TOLERATION],
                    "autoscaling": {
                        "minReplicas": 0,
                        "maxReplicas": max(self.args.sizes) + self.args.min_idle,
                        "minIdle": self.args.min_idle,
                        "scaleDownDelay": f"{self.args.delay}s",
                    },
                },
            },
        )

    def delete_pool(self) -> None:
        self.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, POOL)
        poll_until(lambda: self._pool() is None, 120, 0.5)

    def _pool(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, POOL
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def at_rest(self) -> bool:
        """The pool decided its minimum (0, or the ``--min-idle`` buffer) and has just that:
        no pod at all, or one online idle runner per pod."""
        rest = self.args.min_idle
        pool = self._pool() or {}
        if (pool.get("status") or {}).get("desiredReplicas") != rest:
            return False
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{naming.POOL_LABEL}={POOL}").items
        names = {p.metadata.name for p in pods}
        return len(names) == rest and names == self.warm_runners()

    def warm_runners(self) -> set[str]:
        """The pool's runners online and idle on the fake: a job queued now needs no pod start."""
        label = naming.pool_runner_label(NAMESPACE, POOL)
        return {
            r["name"]
            for r in self.fake.runners(REPO)
            if r["status"] == "online" and not r["busy"] and label in iter_runner_labels(r)
        }

    def burst(self, mode: str, size: int, sampler: ProcessSampler) -> Burst:
        if not poll_until(self.at_rest, 180, 0.2):
            raise RuntimeError("the pool did not settle at rest before the burst")
        warm = self.warm_runners()
        sampler.mark(f"{size} jobs")
        labels = ["self-hosted", naming.pool_runner_label(NAMESPACE, POOL)]
        ids = [self.fake.queue_job(REPO, labels, self.args.job_seconds) for _ in range(size)]
        done = poll_until(lambda: all(i in self.clock.completed for i in ids), self.args.timeout, 0.1)
        if not done:
            raise RuntimeError(f"{mode}: {size} jobs did not all complete in {self.args.timeout}s")
        last = max(self.clock.completed[i] for i in ids)
        if not poll_until(self.at_rest, self.args.delay + 120, 0.1):
            raise RuntimeError(f"{mode}: the pool was not back at rest within {self.args.delay + 120}s")
        back = time.time() - last
        pickups = [self.clock.started[i] - self.clock.queued[i] for i in ids]
        failed = sum(1 for i in ids if self.fake.job(i)["conclusion"] != "success")
        result = Burst(
            mode, size, percentile(pickups, 50), percentile(pickups, 99), max(pickups), back, failed
        )
        result.stages_p50 = self._stages_p50(ids, warm)
        result.pickups = pickups
        self._warm_pickups(result, ids, warm)
        print(
            f"  {mode:9} {size:3} jobs: pickup p50 {result.pickup_p50:.2f}s p95 {result.pickup_p95:.2f}s "
            f"p99 {result.pickup_p99:.2f}s{_warm_summary(result)}, back to rest after {back:.1f}s, "
            f"{failed} failed",
            flush=True,
        )
        return result

    def _warm_pickups(self, result: Burst, ids: list[int], warm: set[str]) -> None:
        """p95 of every pickup, and p50/p95 of those a runner of the warm buffer took."""
        result.pickup_p95 = percentile(result.pickups, 95)
        result.min_idle = self.args.min_idle
        result.warm_pickups = [
            self.clock.started[i] - self.clock.queued[i]
            for i in ids
            if self.fake.job(i)["runner_name"] in warm
        ]
        if result.warm_pickups:
            result.warm_p50 = percentile(result.warm_pickups, 50)
            result.warm_p95 = percentile(result.warm_pickups, 95)

    def _stages_p50(self, ids: list[int], warm: set[str]) -> dict[str, float]:
        """Where the pickup time went: the p50 of each stage over the burst's jobs that
        waited for a pod (a warm runner's pod was there before the job)."""
        online = {
            r.runner: r.finished
            for r in self.fake.listener_requests
            if r.method == "POST" and r.path == "/sessions" and r.status == 201 and r.runner
        }
        per_stage: list[list[float]] = [[] for _ in STAGES]
        for i in ids:
            runner = self.fake.job(i)["runner_name"]
            if runner in warm or runner not in self.pods.created or runner not in online:
                continue
            stages = _stages(
                self.clock.queued[i], self.clock.started[i], self.pods.created[runner], online[runner]
            )
            for values, seconds in zip(per_stage, stages, strict=True):
                values.append(seconds)
        return {name: percentile(v, 50) for name, v in zip(STAGES, per_stage, strict=True) if v}

    def run_mode(self, mode: str, workdir: Path) -> tuple[list[Burst], Mode]:
        port = free_port()
        operator = self.operator(workdir, mode)
        operator.start()
        sampler = ProcessSampler(operator.pid).start()
        operator.wait_ready()
        # Webhook mode: the receiver runs apart (its CPU is not the operator's, sampled above).
        receiver = self.receiver(workdir, port) if mode == "webhooks" else None
        if receiver is not None:
            receiver.start().wait_ready()
        sampler.mark("ready")
        sender = self.fake.send_webhooks(f"http://127.0.0.1:{port}/webhook", SECRET)
        try:
            before = len(self.fake.requests)
            started = time.monotonic()
            self.create_pool()
            bursts = [self.burst(mode, size, sampler) for size in self.args.sizes]
            # Idle at 0 for a while: what an idle pool costs is most of an hour.
            busy_until, idle_from = time.monotonic(), len(self.fake.requests)
            sampler.mark("idle")
            time.sleep(self.args.idle)
            records = _operator_requests(self.fake.requests[before:idle_from])
            idle = _operator_requests(self.fake.requests[idle_from:])
            counted = Mode(mode, busy_until - started, jobs=sum(self.args.sizes))
            for record in records:
                counted.requests[f"{record.method} {record.endpoint}"] += 1
            counted.budget_requests = sum(1 for r in records if r.counted)
            counted.idle_seconds = time.monotonic() - busy_until
            counted.idle_requests = len(idle)
            counted.idle_budget_requests = sum(1 for r in idle if r.counted)
            self.delete_pool()
            sampler.stop()
            counted.resources = sampler.as_json()
        finally:
            sampler.stop()
            self.fake.stop_webhooks(sender)
            if receiver is not None:
                receiver.stop()
            operator.stop()
        return bursts, counted


def _operator_requests(records: list[RequestRecord]) -> list[RequestRecord]:
    """The operator's requests: not the runners' registrations (their job protocol is not
    in the REST request log at all)."""
    return [r for r in records if "runner-registration" not in r.path]


def _warm_summary(b: Burst) -> str:
    if not b.min_idle:
        return ""
    if b.warm_p50 is None or b.warm_p95 is None:
        return "; no job taken by a warm runner"
    return f"; {len(b.warm_pickups)} taken by a warm runner: p50 {b.warm_p50:.2f}s p95 {b.warm_p95:.2f}s"


def _table(bursts: list[Burst], modes: list[Mode], delay: float) -> str:
    lines = [
        "| mode | jobs | pickup p50 | pickup p95 | pickup p99 | warm runner took: jobs, p50 / p95 "
        "| back to rest | failed (busy killed) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for b in bursts:
        warm = (
            f"{len(b.warm_pickups)}, {b.warm_p50:.2f} / {b.warm_p95:.2f} s"
            if b.warm_p50 is not None and b.warm_p95 is not None
            else "-"
        )
        lines.append(
            f"| {b.label} | {b.jobs} | {b.pickup_p50:.2f} s | {b.pickup_p95:.2f} s | {b.pickup_p99:.2f} s | "
            f"{warm} | {b.back_to_zero:.1f} s (target ≤ {delay + 10:.0f} s) | {b.failed_jobs} |"
        )
    lines += ["", "| mode | jobs | " + " | ".join(f"→ {s} (p50)" for s in STAGES) + " |"]
    lines.append("| --- | ---: |" + " ---: |" * len(STAGES))
    for b in bursts:
        cells = " | ".join(f"{b.stages_p50[s]:.2f} s" if s in b.stages_p50 else "-" for s in STAGES)
        lines.append(f"| {b.label} | {b.jobs} | {cells} |")
    lines += [
        "",
        "| mode | GitHub requests per job | of which budget | idle at 0: requests/hour | of which budget |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for m in modes:
        lines.append(
            f"| {m.mode} | {m.per_job(m.total):.2f} | {m.per_job(m.budget_requests):.2f} | "
            f"{m.idle_per_hour(m.idle_requests):.0f} | {m.idle_per_hour(m.idle_budget_requests):.0f} |"
        )
    return "\n".join(lines)


def _mode_label(burst: dict[str, Any]) -> str:
    """A burst's mode as JSON has it, with its warm buffer (earlier results have none)."""
    return f"{burst['mode']}, minIdle {burst['min_idle']}" if burst.get("min_idle") else str(burst["mode"])


def _series(bursts: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Pickups per burst, named by mode and size; a size run again gets its own series."""
    series: dict[str, list[float]] = {}
    for b in bursts:
        name = f"{_mode_label(b)}, {b['jobs']} jobs"
        again = sum(1 for key in series if key == name or key.startswith(f"{name} #"))
        series[f"{name} #{again + 1}" if again else name] = b["pickups"]
    return series


def write_plots(bursts: list[dict[str, Any]], modes: list[dict[str, Any]], workdir: Path) -> list[Path]:
    """Pickup latency of every burst, and each mode's operator resources (JSON as written)."""
    written = [
        plots.latency(
            workdir / "pickup.png",
            _series(bursts),
            title="queued → in progress, per job",
        )
    ]
    for m in modes:
        if m["resources"]:
            written.append(
                plots.resources(
                    workdir / f"resources-{m['mode']}.png",
                    m["resources"]["samples"],
                    title=f"operator process, {m['mode']} (sampled every {m['resources']['interval']:g} s)",
                    marks=m["resources"]["marks"],
                )
            )
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demand", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50", help="jobs queued at once per burst")
    parser.add_argument("--job-seconds", type=float, default=2.0)
    parser.add_argument("--delay", type=int, default=5, help="the pool's scaleDownDelay in seconds")
    parser.add_argument("--poll-interval", type=float, default=30.0, help="--demand-poll-interval")
    parser.add_argument("--runner-sync-interval", type=float, default=60.0)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds idle at 0 counted per mode")
    parser.add_argument("--modes", default="webhooks,polling")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--min-idle", type=int, default=0, help="the pool's spec.autoscaling.minIdle (a warm buffer)"
    )
    parser.add_argument(
        "--plot", type=Path, metavar="demand.json", help="run nothing: draw an earlier result's plots again"
    )
    args = parser.parse_args(argv)
    if args.plot is not None:
        earlier = json.loads(args.plot.read_text())
        for png in write_plots(earlier["bursts"], earlier["modes"], args.plot.parent):
            print(f"plot: {png}")
        return 0
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if not seal.is_sealed():
        print(
            "run inside the seal: .venv/bin/python -m testworld.node.seal -- .venv/bin/python -m bench.demand"
        )
        return 2
    RESULTS.mkdir(exist_ok=True)
    workdir = RESULTS / f"demand-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    workdir.mkdir()
    bursts: list[Burst] = []
    modes: list[Mode] = []
    with contextlib.ExitStack() as stack:
        plane = ControlPlane(for_node=True)
        stack.callback(plane.stop)
        plane.start()
        node = Node(plane)
        stack.callback(node.stop)
        node.start()
        fake = stack.enter_context(
            FakeGitHub(host=seal.NODE_IP, api_prefix="/api/v3", scopes=[REPO], tokens=[PAT])
        )
        bench = Bench(args, plane, node, fake)
        stack.callback(bench.pods.stop)
        bench.setup()
        for mode in args.modes.split(","):
            print(f"{mode}:", flush=True)
            found, counted = bench.run_mode(mode, workdir)
            bursts += found
            modes.append(counted)
    table = _table(bursts, modes, args.delay)
    print(table)
    out = workdir / "demand.json"
    report = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "settings": vars(args),
        "bursts": [asdict(b) for b in bursts],
        "modes": [
            {
                **asdict(m),
                "requests": dict(m.requests),
                "per_job": m.per_job(m.total),
                "idle_per_hour": m.idle_per_hour(m.idle_requests),
            }
            for m in modes
        ],
    }
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    for png in write_plots(report["bursts"], report["modes"], workdir):
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
