"""``python -m bench.webhook_load``: the webhook receiver over real HTTP, loaded, at 1,000 pools.

* **full path** (the headline, first): the receiver over a real API server
  (``bench.webhook_full``), ``--full-rate`` signed deliveries per second (200), each verified,
  parsed, written into its pool's ``status.demand`` and answered once written; with the API
  requests per delivery and the API server's and etcd's CPU per delivery beside the
  receiver's. ``--receiver-only`` skips it, ``--full-only`` runs only it. Every run adds one
  row to ``bench/history.jsonl`` (``bench.history``; ``--no-history`` not).

The rest measures the receiver alone:
The receiver (``WebhookServer``, as the operator starts it, default limits) listens on
127.0.0.1 in this process, over the cache ``bench.webhook_cpu`` builds (``--pools`` pools,
``--autoscaling`` of them following demand, a no-op Kube whose PATCH answers at once), so a
delivery costs what it costs the operator apart from the API server's round trip. Then:

* **load**: a client *process* (so that its CPU is not counted; ``--processes`` for more)
  sends signed ``queued`` deliveries at ``--rate`` per second for ``--seconds``, one new
  connection each (as GitHub does), from ``--clients`` threads, each on its own slots of an
  even schedule (on 2 shared cores, 4 client processes left the server less CPU and made
  the tail longer, not shorter). Answer time
  is from the moment the request is sent until the whole answer is read; ``sustained`` is
  answered deliveries (200) over the time until the last answer. CPU per delivery is this
  process's CPU (every thread: the server's I/O and worker threads, the writer) over the
  run, divided by the deliveries. Repeated ``--repeat`` times: the machine is shared, so the
  table shows the best and the median run.
* **rejected**: the same load of *forged* deliveries (a well-formed ``X-Hub-Signature-256``
  that no secret makes, the cheapest forgery to send and the dearest to refuse): each must
  get 401, and CPU per rejected delivery is measured as for the accepted ones. With
  ``--own-secrets`` the repository pools name their own Secrets and both loads go to those
  pools' URLs (``/webhook/<namespace>/<secret>``, signed with the pool's secret or forged);
  without, to ``/webhook``. ``--forge-to-cluster`` sends the forged ones to ``/webhook``
  even then: the receiver before per-secret URLs parsed such a body to find its pools.
* **half-open**: 200 connections send headers and half a body, then nothing. After 1 s
  and after ``--hold`` seconds (15): the threads this process holds and one normal
  delivery's answer time (1 s in, every stalled connection is still open; the server drops
  them after its read timeout, 10 s by default); the RSS; and every line written to stderr
  meanwhile that is not one JSON object of the operator's log (the log is set to ``json``;
  then the 200 connections are closed by the client and stderr is read once more).

The same script measures the server of any checkout: run it with ``PYTHONPATH`` set to an
older tree's root (``before``) and to this one (``after``). Prints a table and writes JSON to
bench/results/. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import history
from bench.webhook_cpu import (
    API_URL,
    REPOS,
    SECRET,
    NoOpKube,
    delivery,
    empty_cache,
    fill,
    own_secret_route,
    pool_object,
    repository,
    tenant_secret,
    write_result,
)
from runnerpool import logs
from runnerpool.demand import runner_names
from runnerpool.demand.deliveries import DeliveryLog
from runnerpool.demand.receiver import PATH, WebhookServer
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import sign
from runnerpool.demand.verification import Verifier
from runnerpool.demand.writer import DemandWriter
from runnerpool.secret_reads import SecretReads
from runnerpool.settings import GitHubSettings

HALF_OPEN = 200

#: The full path's (a real API server under the writes), the headline figures (issue 32).
FULL_TARGETS = {
    "sustained_per_s": ("≥ 200 deliveries/s", lambda v: v >= 200),
    "p99_ms": ("p99 ≤ 100 ms", lambda v: v <= 100),
    "cpu_per_delivery_ms": ("≤ 2 ms CPU", lambda v: v <= 2),
}
#: The receiver's alone (a no-op Kube).
TARGETS = {
    "sustained_per_s": ("≥ 500 deliveries/s", lambda v: v >= 500),
    "p99_ms": ("p99 ≤ 50 ms", lambda v: v <= 50),
    "cpu_per_delivery_ms": ("≤ 1 ms CPU", lambda v: v <= 1),
    "cpu_per_rejected_ms": ("≤ 0.5 ms CPU", lambda v: v <= 0.5),
    "threads_after_hold": ("≤ 20 threads", lambda v: v <= 20),
    "delivery_during_half_open_ms": ("≤ 100 ms", lambda v: v <= 100),
}


# ------------------------------------------------------------------ the client process


#: A well-formed signature that no secret makes: a forgery.
FORGED = "sha256=" + "0" * 64


def _send(
    port: int, body: bytes, number: int, signature: str | None = None, path: str = PATH
) -> tuple[int, float]:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "workflow_job",
        "X-GitHub-Delivery": f"load-{os.getpid()}-{number}",
        "X-Hub-Signature-256": signature or sign(SECRET, body),
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    try:
        conn.request("POST", path, body=body, headers=headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status, time.perf_counter() - started
    except OSError:
        return 0, time.perf_counter() - started
    finally:
        conn.close()


def client(args: argparse.Namespace) -> dict[str, Any]:
    """Open-loop: delivery ``n`` is due at ``start_at + n / rate``; this process sends the n
    with ``n % parts == part``, spread over its threads."""
    total = int(args.rate * args.seconds)
    mine = list(range(args.part, total, args.parts))
    bodies = {n: delivery(args.first_job + n, repository(n % REPOS)) for n in mine}
    paths, signatures = {n: PATH for n in mine}, {n: sign(SECRET, bodies[n]) for n in mine}
    if args.own_secrets:
        for n in mine:
            paths[n] = "{}/{}/{}".format(PATH, *own_secret_route(n % REPOS, args.pools, args.autoscaling))
            signatures[n] = sign(tenant_secret(repository(n % REPOS)), bodies[n])
    if args.forge:
        signatures = {n: FORGED for n in mine}
        if args.forge_to_cluster:
            paths = {n: PATH for n in mine}
    results: dict[int, tuple[int, float]] = {}
    ends: list[float] = []

    def run(offset: int) -> None:
        for n in mine[offset :: args.clients]:
            delay = args.start_at + n / args.rate - time.time()
            if delay > 0:
                time.sleep(delay)
            results[n] = _send(args.client, bodies[n], args.first_job + n, signatures[n], paths[n])
        ends.append(time.time())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"end": max(ends), "results": list(results.values())}


# ------------------------------------------------------------------ the server side


@dataclass
class LoadRun:
    offered_per_s: float
    deliveries: int
    answered_200: int  # answered with ``expected`` (the name kept for older results)
    sustained_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_per_delivery_ms: float
    #: The status every delivery should get: 200 (signed) or 401 (forged).
    expected: int = 200


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load_run(port: int, args: argparse.Namespace, first_job: int, *, forge: bool = False) -> LoadRun:
    start_at = time.time() + 1.0  # every client process started by then
    command = [sys.executable, "-m", "bench.webhook_load", "--client", str(port)]
    command += ["--rate", str(args.rate), "--seconds", str(args.seconds), "--clients", str(args.clients)]
    command += ["--first-job", str(first_job), "--start-at", str(start_at), "--parts", str(args.processes)]
    command += ["--pools", str(args.pools), "--autoscaling", str(args.autoscaling)]
    command += ["--own-secrets"] if args.own_secrets else []
    command += ["--forge"] if forge else []
    command += ["--forge-to-cluster"] if args.forge_to_cluster else []
    expected = 401 if forge else 200
    cpu = time.process_time()
    procs = [
        subprocess.Popen(
            [*command, "--part", str(part)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        for part in range(args.processes)
    ]
    got = [json.loads(proc.communicate()[0]) for proc in procs]
    spent = time.process_time() - cpu
    results = [tuple(result) for part in got for result in part["results"]]
    ok = [latency for status, latency in results if status == expected]
    total = len(results)
    return LoadRun(
        offered_per_s=args.rate,
        deliveries=total,
        answered_200=len(ok),
        sustained_per_s=len(ok) / (max(part["end"] for part in got) - start_at),
        p50_ms=1000 * _percentile(ok, 0.5) if ok else float("inf"),
        p99_ms=1000 * _percentile(ok, 0.99) if ok else float("inf"),
        max_ms=1000 * max(ok) if ok else float("inf"),
        cpu_per_delivery_ms=1000 * spent / max(1, total),
        expected=expected,
    )


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _not_json(lines: list[str]) -> int:
    bad = 0
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            bad += 1
    return bad


def half_open(port: int, hold: float, first_job: int) -> dict[str, Any]:
    """200 stalled connections: what they hold after ``hold`` s, and what they print."""
    threads_before, rss_before = threading.active_count(), _rss_mib()
    body = delivery(first_job, repository(0))
    head = f"POST {PATH} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with tempfile.TemporaryFile(mode="w+") as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)  # everything written to stderr meanwhile, by anyone
        try:
            stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(HALF_OPEN)]
            for sock in stalled:
                sock.sendall(head + body[: len(body) // 2])
            time.sleep(1)
            threads_peak = threading.active_count()
            _, took_open = _send(port, delivery(first_job + 2, repository(2)), first_job + 2)
            time.sleep(max(0.0, hold - 1))
            threads_after = threading.active_count()
            rss_after = _rss_mib()
            status, took = _send(port, delivery(first_job + 1, repository(1)), first_job + 1)
            for sock in stalled:
                sock.close()
            time.sleep(2)  # what the server prints when they go
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        lines = err.read().splitlines()
    return {
        "threads_before": threads_before,
        "threads_peak": threads_peak,
        "threads_after_hold": threads_after,
        "delivery_during_half_open_status": status,
        "delivery_during_half_open_ms": 1000 * took,
        "delivery_one_second_in_ms": 1000 * took_open,
        "rss_before_mib": rss_before,
        "rss_with_half_open_mib": rss_after,
        "stderr_lines": len(lines),
        "stderr_lines_not_json": _not_json(lines),
    }


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads is None:
        return {}
    from runnerpool.webserver import Limits  # noqa: PLC0415 - not in trees before it

    return {"limits": Limits(threads=args.threads)}


def _verdict(key: str, value: float, targets: dict[str, Any] = TARGETS) -> str:
    text, ok = targets[key]
    return f"{'met' if ok(value) else 'MISSED'} ({text})"


def full_path_runs(args: argparse.Namespace, pools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--repeat`` loads at ``--full-rate`` through the receiver over a real API server
    (``bench.webhook_full``), each with the API requests its writes cost per delivery."""
    from bench.webhook_full import cpu_seconds, full_path  # noqa: PLC0415 - needs the envtest binaries

    offered = argparse.Namespace(**{**vars(args), "rate": args.full_rate, "own_secrets": False})
    runs: list[dict[str, Any]] = []
    with full_path(pools) as (cache, kube, plane):
        writer = DemandWriter(
            kube, cache, GitHubSettings(api_url=API_URL).api_url_of, runners=runner_names.by_name
        )
        verifier = Verifier(lambda: (SECRET,), cache, None)
        server = WebhookServer(
            0, verifier, writer.record_job, host="127.0.0.1", deliveries=DeliveryLog(), **_limits(args)
        )
        server.start()
        try:
            for n in range(args.repeat):
                before, plane_cpu = kube.requests.copy(), cpu_seconds(plane)
                run = load_run(server.port, offered, 2_000_000_000 + n * 1_000_000)
                spent = kube.requests - before
                per = {what: count / max(1, run.deliveries) for what, count in sorted(spent.items())}
                plane_ms = 1000 * (cpu_seconds(plane) - plane_cpu) / max(1, run.deliveries)
                runs.append({**asdict(run), "api_requests_per_delivery": per, "apiserver_cpu_ms": plane_ms})
        finally:
            server.stop()
    return runs


def _print_full(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, float]:
    """The headline table; answers the best figures for the history."""
    print(
        f"FULL PATH (real API server): {args.pools} pools ({args.autoscaling} autoscaling), "
        f"{args.full_rate:.0f}/s offered for {args.seconds:.0f} s, {len(runs)} runs"
    )
    print(f"{'row':<40} {'best':>10} {'median':>10}  target")
    best: dict[str, float] = {}
    for title, key, higher, fmt in _FULL_ROWS:
        values = [run[key] for run in runs]
        best[key] = max(values) if higher else min(values)
        verdict = _verdict(key, best[key], FULL_TARGETS) if key in FULL_TARGETS else ""
        shown = fmt.format(best[key]), fmt.format(statistics.median(values))
        print(f"{title:<40} {shown[0]:>10} {shown[1]:>10}  {verdict}")
    for what in sorted({what for run in runs for what in run["api_requests_per_delivery"]}):
        values = [run["api_requests_per_delivery"].get(what, 0.0) for run in runs]
        best[f"api_{what}_per_delivery"] = min(values)
        title = f"API {what.replace('_', ' ')} per delivery"
        print(f"{title:<40} {min(values):>10.3f} {statistics.median(values):>10.3f}")
    print(f"answered 200 in every run: {all(run['answered_200'] == run['deliveries'] for run in runs)}")
    return best


_ROWS = [
    ("sustained deliveries/s", "sustained_per_s", True, "{:.0f}"),
    ("answer p50 ms", "p50_ms", False, "{:.1f}"),
    ("answer p99 ms", "p99_ms", False, "{:.1f}"),
    ("CPU per delivery ms", "cpu_per_delivery_ms", False, "{:.3f}"),
]
#: The full path's own rows.
_FULL_ROWS = [
    *_ROWS,
    ("API server + etcd CPU per delivery ms", "apiserver_cpu_ms", False, "{:.3f}"),
]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--autoscaling", type=int, default=100)
    parser.add_argument("--rate", type=float, default=500, help="offered deliveries per second")
    parser.add_argument(
        "--full-rate", type=float, default=200, help="offered per second on the full path (real API server)"
    )
    parser.add_argument(
        "--receiver-only", action="store_true", help="skip the full path (no API server needed)"
    )
    parser.add_argument("--full-only", action="store_true", help="only the full path")
    parser.add_argument("--no-history", action="store_true", help="add no row to bench/history.jsonl")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--processes", type=int, default=1, help="client processes")
    parser.add_argument("--clients", type=int, default=32, help="threads per client process")
    parser.add_argument("--threads", type=int, help="the server's worker threads (default: its own)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hold", type=float, default=15, help="seconds the half-open connections stay")
    parser.add_argument("--label", default="", help="names the JSON file (e.g. before, after)")
    parser.add_argument(
        "--own-secrets", action="store_true", help="repository pools name their own webhook Secret"
    )
    parser.add_argument(
        "--forge-to-cluster",
        action="store_true",
        help="with --own-secrets, send the forged deliveries to /webhook (what a tree before the "
        "per-secret URLs parsed to find the pools' secrets)",
    )
    parser.add_argument("--forge", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--first-job", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.client:
        print(json.dumps(client(args)))
        return 0

    logs.configure("json", "WARNING")
    informers = empty_cache()
    every = max(1, args.pools // max(1, args.autoscaling))
    pools = [
        pool_object(
            i, i // every if i % every == 0 and i // every < args.autoscaling else None, args.own_secrets
        )
        for i in range(args.pools)
    ]
    full = [] if args.receiver_only else full_path_runs(args, pools)
    headline = _print_full(args, full) if full else {}
    if args.full_only:
        _finish(args, full, headline, {})
        return 0
    fill(informers, copy.deepcopy(pools))
    kube = NoOpKube(informers)
    writer = DemandWriter(kube, informers, GitHubSettings(api_url=API_URL).api_url_of)
    # As the receiver component builds it: the cluster-wide secret and the pools' own.
    verifier = Verifier(lambda: (SECRET,), informers, PoolSecrets(SecretReads(informers, kube)))
    server = WebhookServer(0, verifier, writer.record_job, host="127.0.0.1", deliveries=DeliveryLog())
    server.start()
    try:
        runs = [load_run(server.port, args, 1 + n * 1_000_000) for n in range(args.repeat)]
        rejected = [
            load_run(server.port, args, 500_000_000 + n * 1_000_000, forge=True) for n in range(args.repeat)
        ]
        stalled = half_open(server.port, args.hold, 900_000_000)
    finally:
        server.stop()
    logging.shutdown()

    def best(key: str, higher: bool = False) -> float:
        values = [getattr(run, key) for run in runs]
        return max(values) if higher else min(values)

    def median(key: str) -> float:
        return float(statistics.median(getattr(run, key) for run in runs))

    module = sys.modules[WebhookServer.__module__]
    print(
        f"{args.pools} pools ({args.autoscaling} autoscaling), {args.rate:.0f}/s offered for "
        f"{args.seconds:.0f} s, {args.processes} client processes x {args.clients} threads, "
        f"{args.threads or 'default'} server threads, {args.repeat} runs; "
        f"server from {Path(module.__file__ or '').parent.parent.parent}"
    )
    print(f"{'row':<40} {'best':>10} {'median':>10}  target")
    for title, key, higher, fmt in _ROWS:
        value = best(key, higher)
        verdict = _verdict(key, value) if key in TARGETS else ""
        print(f"{title:<40} {fmt.format(value):>10} {fmt.format(median(key)):>10}  {verdict}")
    print(f"answered 200 in every run: {all(run.answered_200 == run.deliveries for run in runs)}")
    cpu_rejected = min(run.cpu_per_delivery_ms for run in rejected)
    median_rejected = float(statistics.median(run.cpu_per_delivery_ms for run in rejected))
    print(
        f"{'CPU per rejected (forged) delivery ms':<40} {cpu_rejected:>10.3f} {median_rejected:>10.3f}  "
        + _verdict("cpu_per_rejected_ms", cpu_rejected)
    )
    print(f"answered 401 in every run: {all(run.answered_200 == run.deliveries for run in rejected)}")
    for title, key in [
        ("threads, 200 half-open, peak", "threads_peak"),
        (f"threads, 200 half-open, after {args.hold:.0f} s", "threads_after_hold"),
        ("delivery 1 s in (all 200 still open), ms", "delivery_one_second_in_ms"),
        (f"delivery after {args.hold:.0f} s, ms", "delivery_during_half_open_ms"),
        ("RSS before / with them, MiB", "rss_with_half_open_mib"),
        ("stderr lines / not JSON", "stderr_lines_not_json"),
    ]:
        value = stalled[key]
        shown = {
            "rss_with_half_open_mib": f"{stalled['rss_before_mib']:.0f} / {value:.0f}",
            "stderr_lines_not_json": f"{stalled['stderr_lines']} / {value}",
            "delivery_during_half_open_ms": f"{value:.1f} ({stalled['delivery_during_half_open_status']})",
            "delivery_one_second_in_ms": f"{value:.1f}",
        }.get(key, str(value))
        verdict = _verdict(key, value) if key in TARGETS else ""
        print(f"{title:<40} {shown:>21}  {verdict}")
    write_result(
        "webhook_load",
        args.label,
        {
            "pools": args.pools,
            "autoscaling": args.autoscaling,
            "own_secrets": args.own_secrets,
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "server_module": module.__file__,
            "full_path_runs": full,
            "runs": [asdict(run) for run in runs],
            "rejected_runs": [asdict(run) for run in rejected],
            "half_open": stalled,
        },
    )
    receiver = {f"receiver_{key}": best(key, higher) for _, key, higher, _ in _ROWS}
    _finish(args, [], headline, {**receiver, "receiver_cpu_per_rejected_ms": cpu_rejected})
    return 0


def _finish(
    args: argparse.Namespace,
    full: list[dict[str, Any]],
    headline: dict[str, float],
    receiver: dict[str, float],
) -> None:
    """The history row (best of the runs) and, with ``--full-only``, the results file."""
    if full:
        write_result("webhook_load", args.label, {"pools": args.pools, "full_path_runs": full})
    if args.no_history:
        return
    load = {
        "pools": args.pools,
        "autoscaling": args.autoscaling,
        "full_path_per_s": None if args.receiver_only else args.full_rate,
        "receiver_per_s": None if args.full_only else args.rate,
        "seconds": args.seconds,
        "runs": args.repeat,
        "client_threads": args.clients,
    }
    figures = {f"full_{key}": round(value, 3) for key, value in headline.items()}
    history.append("webhook_load", load, {**figures, **{k: round(v, 3) for k, v in receiver.items()}})


if __name__ == "__main__":
    raise SystemExit(main())
