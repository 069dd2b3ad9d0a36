"""``python -m bench.scale_sets``: what scale-set pools cost the operator (issue 34, "Scale").

Two parts, each selectable with ``--parts``:

1. **idle**: N (``--sessions``, 1,000) idle message sessions held against the fake GitHub's
   scale set service with the real 50 s long poll, in a child process of the bench (the fake
   runs in the bench's own process, so its CPU is not the child's), two ways:

   * ``threads``: the operator's code, ``ScaleSetListeners`` of ``runnerpool.scaleset.runnable``
     with ``listener_factory`` (one ``ScaleSetListener`` per pool: a thread each until the
     asynclistener change, a task on the poll loop since; the name is kept so that
     bench/history.jsonl's ``idle_threads_*`` rows stay comparable), a sink that does nothing;
   * ``loop``: a minimal asyncio long-poller (``bench/scale_set_loop.py``, aiohttp), the same
     GET message polls with the same headers and queue tokens; its sessions are opened with the
     operator's synchronous client first (scale set ensured, session opened), then one task each,
     every first poll at once: their empty polls then end together each hold, and one wake-up
     of the loop serves many turnovers;
   * ``spread``: the same minimal poller with the sessions' first polls ``runnable.START_GAP``
     apart, as the operator starts its listeners (and as a real fleet's polls end at their own
     times): each turnover pays a wake-up of its own. The fair reference for ``threads``.

   The child's CPU (user+system from ``/proc``) over a ``--window`` (60 s) once every session
   holds a poll, its RSS against its RSS before the first session, and its threads. The pools
   are spread over ``--scopes`` organizations (10), one PAT, as the operator's client cache
   shares one scale set client (and one HTTP connection pool) per scope and credential.

2. **latency** and **burst**: the operator as a process (``bench.run``'s control plane, fake
   GitHub, runner simulator and operator), one scale-set pool: jobs offered on the fake one after
   another (``--jobs``, 50), each timed from the offer until the bench's pod watch sees its runner
   pod; then a second pool (``maxReplicas`` = ``--burst``, 500) is offered ``--burst`` jobs at once
   and timed until that many pods exist.

Targets (issue 34): 1,000 idle sessions at <= 2 % of a core and <= +100 MiB RSS; offer -> pod p50
<= 1 s; 500 jobs at once -> 500 pods <= 15 s on 2 cores. It is a measurement, not a test.
Prints a table, writes JSON to bench/results/, appends a row to bench/history.jsonl and plots
the latencies (bench/plots.py). ``--short``: 100 sessions, a 5 s window, 10 jobs, a burst of 100.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kubernetes import client
from kubernetes.informer import ADDED

from bench import history, plots
from bench.run import NAMESPACE, PAT, RESULTS, _api_client, prepare_cluster
from bench.sampler import read_sample
from bench.stats import percentile
from runnerpool import api, naming
from runnerpool.runtime.informers import ListWatchAdapter, StoppableInformer
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import operator_kubeconfig
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.scaleset import ScaleSetService, service
from testworld.simulator import OperatorProcess, RunnerSimulator
from testworld.wait import poll_until

__all__ = ["main"]

#: The Actions service holds an empty long poll this long (the fake's default, GitHub's).
POLL_WAIT = 50.0
MODES = ("threads", "loop", "spread")
PARTS = ("idle", "latency", "burst")
TARGET_CPU_PERCENT = 2.0
TARGET_RSS_MIB = 100.0
TARGET_P50 = 1.0
TARGET_BURST_SECONDS = 15.0
OWNER = "runnerpool-bench"


def org(index: int) -> str:
    return f"bench-org-{index}"


# ------------------------------------------------------------------------------ idle sessions


@dataclass
class IdleResult:
    mode: str
    sessions: int
    window: float
    held: bool = False
    #: Seconds from the first session started until every session held a poll.
    all_held_after: float | None = None
    cpu_percent: float | None = None
    #: CPU seconds over the window per poll answered in it (each a 202 and the next GET).
    cpu_ms_per_poll: float | None = None
    #: ``cpu_ms_per_poll`` at the steady rate of ``sessions / POLL_WAIT`` polls per second: the
    #: window holds one turnover per session, the steady state 1.2 per 60 s.
    steady_cpu_percent: float | None = None
    rss_before_mib: float | None = None
    rss_after_mib: float | None = None
    rss_delta_mib: float | None = None
    threads: int | None = None
    #: GET message polls the fake answered during the window (about window / 50 s per session).
    polls_in_window: int | None = None
    #: Every request the fake's scale set service answered during the window.
    requests_in_window: int | None = None
    notes: list[str] = field(default_factory=list)


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def _polling(scale_sets: ScaleSetService) -> int:
    return sum(scale_sets.polling(found["id"]) for found in scale_sets.scale_sets())


class Answered:
    """Counts what the fake's scale set service answers (its requests are not in the fake's
    request log): message polls and everything."""

    def __init__(self, scale_sets: ScaleSetService) -> None:
        self.polls = 0
        self.requests = 0
        self._lock = threading.Lock()
        original = scale_sets.answer

        def counting(method: str, path: str, **kwargs: Any) -> Any:
            reply = original(method, path, **kwargs)
            with self._lock:
                self.requests += 1
                self.polls += method == "GET" and path.rstrip("/").endswith("/messages")
            return reply

        scale_sets.answer = counting  # type: ignore[method-assign]

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.polls, self.requests


def _line(stream: IO[str], timeout: float) -> str:
    """The child's next line of stdout (it says where it is)."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got or not got[0]:
        raise RuntimeError(f"the child said nothing within {timeout:g} s")
    return got[0].strip()


def idle(mode: str, sessions: int, scopes: int, window: float, say: Callable[[str], None]) -> IdleResult:
    """One way of holding ``sessions`` idle sessions, in a child process, on a fresh fake."""
    result = IdleResult(mode, sessions, window)
    orgs = [org(i) for i in range(scopes)]
    with FakeGitHub(scopes=orgs, tokens=[PAT]) as fake:
        scale_sets = service(fake, poll_wait=POLL_WAIT)
        answered = Answered(scale_sets)
        command = [
            sys.executable,
            "-m",
            "bench.scale_sets",
            "--child",
            mode,
            "--url",
            fake.url,
            "--sessions",
            str(sessions),
            "--scopes",
            str(scopes),
        ]
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            assert child.stdin is not None and child.stdout is not None
            if _line(child.stdout, 60) != "imported":
                raise RuntimeError("the child did not start")
            before = read_sample(child.pid, 0.0)
            result.rss_before_mib = before.rss_mib
            child.stdin.write("go\n")
            child.stdin.flush()
            started = time.monotonic()
            result.held = poll_until(lambda: _polling(scale_sets) >= sessions, timeout=300, interval=0.5)
            if not result.held:
                result.notes.append(f"only {_polling(scale_sets)} of {sessions} sessions held a poll")
                return result
            result.all_held_after = time.monotonic() - started
            say(f"  {mode}: {sessions} sessions hold a poll after {result.all_held_after:.1f} s")
            # Set-up traffic done (threads of the loop's set-up gone, first polls settled).
            time.sleep(2.0)
            first, (polls, requests) = read_sample(child.pid, 0.0), answered.counts()
            time.sleep(window)
            last = read_sample(child.pid, window)
            polls_now, requests_now = answered.counts()
            result.polls_in_window, result.requests_in_window = polls_now - polls, requests_now - requests
            result.cpu_percent = 100.0 * (last.cpu_seconds - first.cpu_seconds) / window
            if result.polls_in_window:
                per_poll = (last.cpu_seconds - first.cpu_seconds) / result.polls_in_window
                result.cpu_ms_per_poll = 1000.0 * per_poll
                result.steady_cpu_percent = 100.0 * per_poll * sessions / POLL_WAIT
            result.rss_after_mib = last.rss_mib
            result.rss_delta_mib = last.rss_mib - before.rss_mib
            result.threads = _threads(child.pid)
            holding = _polling(scale_sets)  # one turning over at this instant is not missing
            if holding < sessions - max(1, sessions // 100):
                result.notes.append(f"{holding} of {sessions} sessions held a poll at the end")
        finally:
            child.kill()
            child.wait(30)
    return result


def _wait_go() -> None:
    print("imported", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


def child(mode: str, url: str, sessions: int, scopes: int) -> int:
    """The measured process: imports, says so, waits for ``go``, holds the sessions until killed."""
    from runnerpool.domain import PoolRef, Scope  # noqa: PLC0415 - the child's own imports
    from runnerpool.scaleset.clients import ScaleSetClients  # noqa: PLC0415
    from runnerpool.scaleset.listener import ScaleSetSettings  # noqa: PLC0415

    pools = [
        ScaleSetSettings(
            PoolRef(
                NAMESPACE,
                f"pool-{i:04d}",
                Scope(organization=org(i % scopes)),
                "github-credentials",
                api_url=url,
            ),
            name=f"bench-{i:04d}",
            max_runners=10,
        )
        for i in range(sessions)
    ]
    rest = _Rest(url)
    clients = ScaleSetClients(rest)
    if mode == "threads":
        from runnerpool.scaleset.runnable import ScaleSetListeners, listener_factory  # noqa: PLC0415

        listeners = ScaleSetListeners(
            lambda: [((s.pool.namespace, s.pool.name), s) for s in pools],
            listener_factory(clients, _NoSink(), OWNER),
            interval=3600.0,
        )
        _wait_go()
        listeners.start()
        threading.Event().wait()
        return 0
    from bench import scale_set_loop  # noqa: PLC0415 - aiohttp only in this mode

    _wait_go()
    from runnerpool.scaleset.runnable import START_GAP  # noqa: PLC0415 - the child's own imports

    scale_set_loop.hold(clients, pools, OWNER, start_gap=START_GAP if mode == "spread" else 0.0)
    return 0


class _NoSink:
    """The pool's status writes, for nothing: the idle cost is the session's alone."""

    def publish(self, namespace: str, name: str, view: Any) -> None:
        return None


class _Rest:
    """The operator's ``ClientCache`` for one PAT: one REST client for every pool."""

    def __init__(self, url: str) -> None:
        from github import Auth  # noqa: PLC0415

        from runnerpool.github.pygithub import PyGithubClient  # noqa: PLC0415

        self.client = PyGithubClient.from_auth(Auth.Token(PAT), url)

    def get(self, namespace: str, secret_name: str, base_url: Any = None, connection: Any = None) -> Any:
        return self.client


# ------------------------------------------------------------------------------ job -> pod


@dataclass
class PodResult:
    jobs: int = 0
    latencies: list[float] = field(default_factory=list)
    p50: float | None = None
    p95: float | None = None
    max: float | None = None
    burst: int = 0
    burst_seconds: float | None = None
    #: Seconds until the pool's status counted every burst job as assigned.
    burst_assigned_seconds: float | None = None
    burst_pods: int = 0
    operator_cpu_burst: float | None = None
    operator_peak_rss_mib: float | None = None
    notes: list[str] = field(default_factory=list)


class PodWatch:
    """When the bench's watch first saw each runner pod, by pool (``naming.POOL_LABEL``)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        core = client.CoreV1Api(api_client)
        self._adapter = ListWatchAdapter(core.list_namespaced_pod)
        self._informer = StoppableInformer(self._adapter, namespace=NAMESPACE)
        self._cond = threading.Condition()
        self.seen: dict[str, list[float]] = {}
        self._names: set[str] = set()
        self._informer.add_event_handler(ADDED, self._added)

    def _added(self, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        meta = pod.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(naming.POOL_LABEL)
        if pool is None:
            return
        with self._cond:
            if meta.get("name") in self._names:
                return
            self._names.add(meta.get("name", ""))
            self.seen.setdefault(pool, []).append(now)
            self._cond.notify_all()

    def start(self) -> PodWatch:
        self._informer.start()
        self._adapter.synced.wait(30)
        return self

    def stop(self) -> None:
        self._informer.signal_stop()

    def wait(self, pool: str, count: int, timeout: float) -> float | None:
        """When the ``count``-th pod of ``pool`` was seen; None after ``timeout``."""
        with self._cond:
            if self._cond.wait_for(lambda: len(self.seen.get(pool, [])) >= count, timeout):
                return self.seen[pool][count - 1]
            return None

    def count(self, pool: str) -> int:
        with self._cond:
            return len(self.seen.get(pool, []))


def _scale_set_pool(name: str, max_replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {
            "repository": "bench-org/repo-0",
            "replicas": 0,
            "scaleSet": {"name": f"bench-{name}"},
            "autoscaling": {"minReplicas": 0, "maxReplicas": max_replicas, "scaleDownDelay": "10m"},
        },
    }


def _listening(
    api_client: client.ApiClient, scale_sets: ScaleSetService, name: str, max_replicas: int, timeout: float
) -> bool:
    """A new scale-set pool, once its listener holds a poll (the next offer is heard at once)."""
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, _scale_set_pool(name, max_replicas)
    )
    return poll_until(
        lambda: (
            scale_sets.scale_set(f"bench-{name}") is not None and scale_sets.polling(f"bench-{name}") >= 1
        ),
        timeout,
    )


def _assigned(api_client: client.ApiClient, name: str) -> int:
    pool = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PLURAL, name
    )
    return int(((pool.get("status") or {}).get("scaleSet") or {}).get("assignedJobs") or 0)


def jobs_to_pods(
    jobs: int, burst: int, parts: Iterable[str], log_dir: Path, say: Callable[[str], None]
) -> PodResult:
    result = PodResult(jobs=jobs, burst=burst)
    parts = set(parts)
    with contextlib.ExitStack() as stack:
        plane = ControlPlane()
        stack.callback(plane.stop)
        plane.start()
        fake = stack.enter_context(FakeGitHub(scopes=["bench-org/repo-0"], tokens=[PAT]))
        scale_sets = service(fake, poll_wait=POLL_WAIT)
        api_client = _api_client(plane.kubeconfig)
        stack.callback(api_client.close)
        prepare_cluster(api_client)
        operator = OperatorProcess(
            operator_kubeconfig(plane), fake.url, log_dir / "operator-scale-sets.log", namespaces=[NAMESPACE]
        )
        stack.callback(operator.stop)
        operator.start()
        operator.wait_ready()
        stack.enter_context(RunnerSimulator(api_client, fake, NAMESPACE, workers=8))
        watch = PodWatch(api_client).start()
        stack.callback(watch.stop)
        if "latency" in parts and jobs:
            if not _listening(api_client, scale_sets, "latency", max(jobs, 1), 120):
                result.notes.append("the latency pool's listener never held a poll")
                return result
            say(f"  latency: offering {jobs} jobs one after another")
            for number in range(1, jobs + 1):
                offered = time.monotonic()
                scale_sets.offer_job("bench-latency")
                seen = watch.wait("latency", number, 60)
                if seen is None:
                    result.notes.append(f"job {number}: no pod within 60 s")
                    break
                result.latencies.append(seen - offered)
            if result.latencies:
                ordered = sorted(result.latencies)
                result.p50, result.p95 = percentile(ordered, 50), percentile(ordered, 95)
                result.max = ordered[-1]
        if "burst" in parts and burst:
            if not _listening(api_client, scale_sets, "burst", burst, 120):
                result.notes.append("the burst pool's listener never held a poll")
                return result
            say(f"  burst: offering {burst} jobs at once")
            cpu = operator.cpu_seconds()
            offered = time.monotonic()
            for _ in range(burst):
                scale_sets.offer_job("bench-burst")
            if poll_until(lambda: _assigned(api_client, "burst") >= burst, 120, interval=0.2):
                result.burst_assigned_seconds = time.monotonic() - offered
            seen = watch.wait("burst", burst, 300)
            result.burst_pods = watch.count("burst")
            result.operator_cpu_burst = operator.cpu_seconds() - cpu
            if seen is None:
                result.notes.append(f"only {result.burst_pods} of {burst} pods within 300 s")
            else:
                result.burst_seconds = seen - offered
        result.operator_peak_rss_mib = operator.peak_rss_bytes() / 2**20
    return result


# ------------------------------------------------------------------------------ report


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}{unit}"


def _verdict(value: float | None, limit: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= limit else f"MISSED ({value / limit:.1f}x)"


def table(idles: list[IdleResult], pods: PodResult | None) -> str:
    lines = ["| figure | value | target |", "| --- | ---: | --- |"]
    for r in idles:
        what = f"{r.sessions} idle sessions, {r.mode}"
        cpu = _verdict(r.cpu_percent, TARGET_CPU_PERCENT)
        rss = _verdict(r.rss_delta_mib, TARGET_RSS_MIB)
        steady = _verdict(r.steady_cpu_percent, TARGET_CPU_PERCENT)
        lines += [
            f"| {what}: CPU (% of a core, {r.window:.0f} s) | {_fmt(r.cpu_percent, ' %')} | "
            f"<= {TARGET_CPU_PERCENT:g} %: {cpu} |",
            f"| {what}: CPU per poll turnover | {_fmt(r.cpu_ms_per_poll, ' ms')} | |",
            f"| {what}: CPU at the steady {r.sessions / POLL_WAIT:g} polls/s | "
            f"{_fmt(r.steady_cpu_percent, ' %')} | <= {TARGET_CPU_PERCENT:g} %: {steady} |",
            f"| {what}: RSS change | {_fmt(r.rss_delta_mib, ' MiB', 1)} "
            f"({_fmt(r.rss_before_mib, '', 0)} -> {_fmt(r.rss_after_mib, ' MiB', 0)}) | "
            f"<= +{TARGET_RSS_MIB:g} MiB: {rss} |",
            f"| {what}: threads | {r.threads} | |",
            f"| {what}: all held a poll after | {_fmt(r.all_held_after, ' s', 1)} | |",
            f"| {what}: polls / requests answered in the window | {r.polls_in_window} / "
            f"{r.requests_in_window} | |",
        ]
    if pods is not None and pods.latencies:
        lines += [
            f"| job offered -> runner pod, p50 ({len(pods.latencies)} jobs) | {_fmt(pods.p50, ' s')} | "
            f"<= {TARGET_P50:g} s: {_verdict(pods.p50, TARGET_P50)} |",
            f"| job offered -> runner pod, p95 / max | {_fmt(pods.p95, ' s')} / {_fmt(pods.max, ' s')} | |",
        ]
    if pods is not None and pods.burst:
        limit = TARGET_BURST_SECONDS * pods.burst / 500  # the target's rate (500 in 15 s)
        lines += [
            f"| {pods.burst} jobs at once -> {pods.burst} pods | {_fmt(pods.burst_seconds, ' s', 1)} "
            f"({pods.burst_pods} pods) | <= {limit:g} s: {_verdict(pods.burst_seconds, limit)} |",
            f"| {pods.burst} jobs at once -> all assigned in the pool's status | "
            f"{_fmt(pods.burst_assigned_seconds, ' s', 1)} | |",
            f"| operator CPU during the burst | {_fmt(pods.operator_cpu_burst, ' s')} | |",
        ]
    return "\n".join(lines)


@dataclass
class Options:
    parts: list[str]
    modes: list[str]
    sessions: int
    scopes: int
    window: float
    jobs: int
    burst: int
    history: bool
    out: Path


def parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_sets", description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="100 sessions, 5 s window, 10 jobs, burst 100")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {','.join(PARTS)}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"idle sessions held by {','.join(MODES)}")
    parser.add_argument("--sessions", type=int, default=None, help="idle sessions (1000)")
    parser.add_argument("--scopes", type=int, default=10, help="organizations the pools spread over")
    parser.add_argument("--window", type=float, default=None, help="idle CPU window, seconds (60)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs offered one after another (50)")
    parser.add_argument("--burst", type=int, default=None, help="jobs offered at once (500)")
    parser.add_argument("--no-history", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        raise SystemExit(child(args.child, args.url, args.sessions, args.scopes))
    short = args.short

    def pick(given: Any, full: Any, brief: Any) -> Any:
        return given if given is not None else (brief if short else full)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Options(
        parts=[p for p in args.parts.split(",") if p],
        modes=[m for m in args.modes.split(",") if m],
        sessions=pick(args.sessions, 1000, 100),
        scopes=args.scopes,
        window=pick(args.window, 60.0, 5.0),
        jobs=pick(args.jobs, 50, 10),
        burst=pick(args.burst, 500, 100),
        history=not args.no_history,
        out=args.out or RESULTS / f"scale-sets-{stamp}.json",
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    idles = []
    if "idle" in opts.parts:
        for mode in opts.modes:
            say(f"idle sessions: {opts.sessions} held by {mode}, {opts.window:g} s window")
            idles.append(idle(mode, opts.sessions, opts.scopes, opts.window, say))
    pods = None
    if {"latency", "burst"} & set(opts.parts):
        say("jobs to pods: control plane, fake GitHub, simulator and the operator")
        pods = jobs_to_pods(
            opts.jobs if "latency" in opts.parts else 0,
            opts.burst if "burst" in opts.parts else 0,
            opts.parts,
            opts.out.parent,
            say,
        )
    print(table(idles, pods))
    for note in [n for r in idles for n in r.notes] + (pods.notes if pods else []):
        print(f"note: {note}")
    load = {
        "parts": opts.parts,
        "sessions": opts.sessions if idles else None,
        "scopes": opts.scopes,
        "window": opts.window,
        "poll_wait": POLL_WAIT,
        "jobs": pods.jobs if pods else None,
        "burst": pods.burst if pods else None,
    }
    figures: dict[str, Any] = {}
    for r in idles:
        figures |= {
            f"idle_{r.mode}_cpu_percent": r.cpu_percent,
            f"idle_{r.mode}_steady_cpu_percent": r.steady_cpu_percent,
            f"idle_{r.mode}_cpu_ms_per_poll": r.cpu_ms_per_poll,
            f"idle_{r.mode}_rss_delta_mib": r.rss_delta_mib,
            f"idle_{r.mode}_threads": r.threads,
        }
    if pods is not None:
        figures |= {
            "job_to_pod_p50_s": pods.p50,
            "job_to_pod_p95_s": pods.p95,
            "burst_all_pods_s": pods.burst_seconds,
            "burst_operator_cpu_s": pods.operator_cpu_burst,
        }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": history.machine(),
        "load": load,
        "idle": [asdict(r) for r in idles],
        "pods": asdict(pods) if pods else None,
    }
    opts.out.write_text(json.dumps(document, indent=2))
    print(f"wrote {opts.out}")
    if pods is not None and pods.latencies:
        path = plots.latency(
            opts.out.with_suffix(".latency.png"),
            {"job offered -> runner pod": pods.latencies},
            title="scale-set pool: job offered -> runner pod (bench's pod watch)",
        )
        print(f"wrote {path}")
    if opts.history:
        history.append("scale_sets", load, {k: v for k, v in figures.items() if v is not None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
