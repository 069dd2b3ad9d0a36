"""``python -m bench.foreign_secrets``: what Secrets that are not the operator's cost its memory.

A cluster's namespaces hold many Secrets no pool names (other applications' certificates,
passwords, image pull Secrets). The operator must not pay memory for them: its Secret cache
holds only the Secrets it owns and the credential Secrets pools name (``runnerpool.watches``).
This bench proves it the way the operator runs: its console script as its own process
(``testworld.simulator.OperatorProcess``, logged in as deploy/'s ServiceAccount), a real local
control plane, the fake GitHub.

1. ``--namespaces`` watched namespaces (default 2), each with a credential Secret and one pool
   (``replicas: 0``: no pod is needed to hold a token); wait until every pool's token Secret
   holds a token. RSS **before**: the median of the samples over the last ``--settle`` seconds
   of a quiet window.
2. Create ``--secrets`` unrelated Secrets (default 20,000; ``--size`` bytes of data each,
   default 4 KiB of random bytes) spread over the watched namespaces, from 16 threads.
3. A sentinel that every version of the operator sees only after it has seen the foreign
   Secrets' events, where it watches them at all: each pool's token Secret is deleted, and the
   operator makes it again (one Secret watch per namespace delivers events in order; a version
   that caches every Secret processed all the foreign ones before the deletion). Then the same
   quiet window: RSS **after**. Target: after - before <= 5 MiB.

Also the operator's ``runnerpool_cache_objects`` gauge per watch, where it exports one (the
Secrets its cache holds: 2 per namespace, the token and the credential Secret), its peak RSS
(``VmHWM``), and the time the creates took. ``--operator-source DIR`` runs the operator from
another checkout (``PYTHONPATH``: e.g. main's worktree, for a before figure); the bench itself
runs from this one. Prints a table, writes JSON and an RSS/CPU plot to bench/results/. A
measurement, not a test: nothing fails on a missed target (tests/test_informers.py asserts that
the cache holds no foreign Secret).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from bench import plots
from bench.run import RESULTS, _api_client
from bench.sampler import ProcessSampler
from runnerpool import api, naming
from testworld.demo import install_crd
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import operator_kubeconfig
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess
from testworld.wait import poll_until

PAT = "ghp_bench000000000000000000000000000000"
REPO = "bench-org/secrets"
TARGET_MIB = 5.0
CREATE_THREADS = 16
CACHE_METRIC = "runnerpool_cache_objects"


@dataclass
class Result:
    secrets: int
    size_bytes: int
    namespaces: int
    operator_source: str
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0
    peak_rss_mib: float = 0.0
    create_seconds: float = 0.0
    #: ``runnerpool_cache_objects`` by watch before and after (empty: not exported).
    cache_before: dict[str, float] = field(default_factory=dict)
    cache_after: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def delta_mib(self) -> float:
        return self.rss_after_mib - self.rss_before_mib


def cache_objects(metrics: str) -> dict[str, float]:
    """``runnerpool_cache_objects{watch=...}`` from a /metrics text, by watch."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith(CACHE_METRIC + "{"):
            labels, _, value = line.rpartition(" ")
            watch = labels.partition('watch="')[2].partition('"')[0]
            found[watch] = float(value)
    return found


def _namespace(index: int) -> str:
    return f"bench-secrets-{index}"


def _pool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {"name": name},
        "spec": {"repository": REPO, "replicas": 0},
    }


def _token_secret(core: client.CoreV1Api, namespace: str) -> Any:
    try:
        return core.read_namespaced_secret(naming.token_secret_name("pool"), namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


class Bench:
    def __init__(self, args: argparse.Namespace, log_dir: Path) -> None:
        self.args = args
        self.log_dir = log_dir
        self.result = Result(
            secrets=args.secrets,
            size_bytes=args.size,
            namespaces=args.namespaces,
            operator_source=str(args.operator_source or "this checkout"),
        )
        self.namespaces = [_namespace(i) for i in range(args.namespaces)]
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", file=sys.stderr, flush=True)

    def run(self) -> tuple[Result, dict[str, Any]]:
        with contextlib.ExitStack() as stack:
            plane = ControlPlane()
            stack.callback(plane.stop)
            plane.start()
            fake = stack.enter_context(FakeGitHub(scopes=[REPO], tokens=[PAT]))
            self.api = _api_client(plane.kubeconfig)
            stack.callback(self.api.close)
            self.core = client.CoreV1Api(self.api)
            install_crd(self.api)
            self._pools()
            if self.args.operator_source:
                os.environ["PYTHONPATH"] = str(Path(self.args.operator_source).resolve())
            operator = OperatorProcess(
                operator_kubeconfig(plane),
                fake.url,
                self.log_dir / "operator.log",
                namespaces=self.namespaces,
            )
            stack.callback(operator.stop)
            operator.start()
            sampler = ProcessSampler(operator.pid).start()
            stack.callback(sampler.stop)
            operator.wait_ready()
            sampler.mark("ready")
            self._wait(self._tokens_everywhere, "every pool's token", self.args.timeout)
            self.result.rss_before_mib = self._quiet(sampler, "before")
            self.result.cache_before = cache_objects(operator.metrics())
            sampler.mark("creates")
            self.result.create_seconds = self._create_foreign()
            sampler.mark("created")
            self.say(f"created {self.args.secrets} Secrets in {self.result.create_seconds:.1f}s")
            self._sentinel()
            sampler.mark("sentinel")
            self.result.rss_after_mib = self._quiet(sampler, "after")
            self.result.cache_after = cache_objects(operator.metrics())
            self.result.peak_rss_mib = operator.peak_rss_bytes() / 2**20
            sampler.stop()
            return self.result, sampler.as_json()

    def _pools(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        for namespace in self.namespaces:
            self.core.create_namespace({"metadata": {"name": namespace}})
            self.core.create_namespaced_secret(
                namespace,
                {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": PAT}},
            )
            custom.create_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, _pool("pool")
            )

    def _tokens_everywhere(self) -> bool:
        for namespace in self.namespaces:
            secret = _token_secret(self.core, namespace)
            if secret is None or not (secret.data or {}).get(naming.TOKEN_SECRET_KEY):
                return False
        return True

    def _wait(self, predicate: Any, what: str, timeout: float) -> None:
        if not poll_until(predicate, timeout, 0.2):
            raise SystemExit(
                f"gave up waiting for {what} after {timeout:.0f}s (operator log in {self.log_dir})"
            )

    def _quiet(self, sampler: ProcessSampler, phase: str) -> float:
        """The median RSS over the last ``--settle`` seconds of a window twice that long."""
        settle = self.args.settle
        started = time.perf_counter() - sampler.zero
        threading.Event().wait(2 * settle)
        window = [s.rss_mib for s in sampler.samples if s.t >= started + settle]
        rss = statistics.median(window) if window else sampler.samples[-1].rss_mib
        self.say(f"RSS {phase}: {rss:.1f} MiB (median of {len(window)} samples)")
        return rss

    def _create_foreign(self) -> float:
        blob = base64.b64encode(os.urandom(self.args.size)).decode()
        started = time.monotonic()
        failures: list[str] = []

        def create(index: int) -> None:
            namespace = self.namespaces[index % len(self.namespaces)]
            body = {"metadata": {"name": f"foreign-{index:05d}"}, "type": "Opaque", "data": {"blob": blob}}
            try:
                answer = self.core.create_namespaced_secret(namespace, body, _preload_content=False)
                answer.read()  # the whole answer, unparsed: the connection goes back to the pool clean
                answer.release_conn()
            except ApiException as err:
                failures.append(f"{namespace}/foreign-{index:05d}: {err.status}")

        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            for done, _ in enumerate(pool.map(create, range(self.args.secrets)), 1):
                if done % 5000 == 0:
                    self.say(f"{done} Secrets created")
        if failures:
            self.result.notes.append(f"{len(failures)} creates failed, first: {failures[0]}")
        return time.monotonic() - started

    def _sentinel(self) -> None:
        """Delete every pool's token Secret and wait until the operator has made each again."""
        before = {ns: _token_secret(self.core, ns).metadata.uid for ns in self.namespaces}
        for namespace in self.namespaces:
            self.core.delete_namespaced_secret(naming.token_secret_name("pool"), namespace)

        def remade() -> bool:
            for namespace, uid in before.items():
                secret = _token_secret(self.core, namespace)
                if secret is None or secret.metadata.uid == uid:
                    return False
            return True

        self._wait(remade, "the token Secrets to be made again", self.args.timeout)


def table(result: Result) -> str:
    verdict = "met" if result.delta_mib <= TARGET_MIB else "MISSED"
    cached = ", ".join(f"{k} {v:g}" for k, v in sorted(result.cache_after.items())) or "not exported"
    rows = [
        ("foreign Secrets created", f"{result.secrets} x {result.size_bytes} B", ""),
        ("creates took", f"{result.create_seconds:.1f} s", ""),
        ("operator RSS before", f"{result.rss_before_mib:.1f} MiB", ""),
        ("operator RSS after", f"{result.rss_after_mib:.1f} MiB", ""),
        ("RSS change", f"{result.delta_mib:+.1f} MiB", f"<= {TARGET_MIB:g} MiB ({verdict})"),
        ("operator peak RSS", f"{result.peak_rss_mib:.1f} MiB", ""),
        ("objects in the cache after", cached, ""),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"operator from {result.operator_source}, {result.namespaces} watched namespaces"]
    lines += [f"{name:<{width}}  {value:>22}  {target}".rstrip() for name, value, target in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secrets", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=4096, help="bytes of data per Secret")
    parser.add_argument("--namespaces", type=int, default=2)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of the quiet window's second half")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--operator-source", type=Path, help="run the operator from this checkout")
    parser.add_argument("--label", default="", help="names the result files (e.g. before, after)")
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"foreign_secrets-{args.label or stamp}"
    RESULTS.mkdir(exist_ok=True)
    log_dir = RESULTS / f"{name}-logs"
    result, resources = Bench(args, log_dir).run()
    out = RESULTS / f"{name}.json"
    report = {
        "when": stamp,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "target_mib": TARGET_MIB,
        "result": {**asdict(result), "delta_mib": result.delta_mib},
        "series": {"resources": resources},
        "operator_logs": str(log_dir),
    }
    out.write_text(json.dumps(report, indent=2))
    png = plots.resources(
        out.with_suffix(".png"),
        resources["samples"],
        title=f"operator process, {result.secrets} foreign Secrets of {result.size_bytes} B",
        marks=resources["marks"],
    )
    print(table(result))
    for note in result.notes:
        print(f"  {note}")
    print(f"results: {out}")
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
