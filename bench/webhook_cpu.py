"""``python -m bench.webhook_cpu``: CPU per webhook delivery with many pools in the cache.

No API server and no GitHub: the operator's informer caches are filled in-process through
the informers' own event path (``cache._put`` then the ADDED handlers, as a watch event
does), with ``--pools`` RunnerPools (default 1,000) in 10 namespaces, ``--autoscaling`` of
them (default 100) following demand, spread over 10 organizations and 50 repositories;
the others have a fixed ``replicas``. Then the receiver path runs ``--deliveries`` times,
each a ``queued`` job of another repository, on this thread:

* **match**: what the receiver does before any write: check the HMAC signature
  (``verification.Verifier``), parse the JSON body and the job, claim the delivery id, find
  the pools the job counts for (``DemandWriter.matching_pools``);
* **record**: all of that plus ``record_job``'s write path against a no-op Kube (its GET
  answers the cached pool, its PATCH answers nothing): what a delivery costs apart from
  the API server's round trips.

``--own-secrets``: every autoscaling repository pool names its own webhook Secret (one per
repository, as one tenant per repository would), and each delivery is signed with its
repository's and sent to that Secret's URL (``own_secret_route``): the Secret's key is
checked (the Secret reads answered by the no-op Kube, cached as in the operator).

Also the poller's round over the same cache (``poll targets``: which repositories to ask
GitHub about, for which pools; no request is sent), and the CPU and the memory
(``tracemalloc``, what stays allocated) of filling the pool cache with the ADDED events,
since the cache now parses each pool as it arrives.

CPU is ``time.process_time`` over all deliveries (no other thread runs), divided by their
number. ``--profile`` prints pyinstrument's profile of the match path (top entries).
Prints a table and writes JSON to bench/results/. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import platform
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.informer import ADDED

from runnerpool import api, naming
from runnerpool.demand.deliveries import DeliveryLog
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import HEADER, sign
from runnerpool.demand.verification import Verifier
from runnerpool.demand.writer import DemandWriter
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.jobs import parse_delivery
from runnerpool.runtime.kube import SECRETS, Kube, Resource
from runnerpool.secret_reads import SecretReads
from runnerpool.settings import GitHubSettings
from runnerpool.watches import POOLS, PoolCache

API_URL = "https://api.github.com"
SECRET = b"bench webhook secret"
NAMESPACES = 10
ORGS = 10
REPOS = 50
RESULTS = Path(__file__).parent / "results"


def repository(number: int) -> str:
    return f"org-{number % REPOS % ORGS}/repo-{number % REPOS}"


def tenant_secret(repo: str) -> bytes:
    return f"webhook secret of {repo}".encode()


def own_secret_route(repo_number: int, pools: int, autoscaling: int) -> tuple[str, str]:
    """``(namespace, Secret)`` of the URL that repository ``repo_number``'s own-secret pool
    takes deliveries at, as ``pool_object`` lays pools out: the first autoscaling repository
    pool of that repository."""
    every = max(1, pools // max(1, autoscaling))
    scaling = repo_number % REPOS
    while scaling < ORGS:
        scaling += REPOS
    return f"team-{scaling * every % NAMESPACES}", f"hooks-{scaling % REPOS}"


def pool_object(index: int, scaling: int | None, own_secrets: bool = False) -> dict[str, Any]:
    """A pool as the API server returns it once the operator has converged it.

    ``scaling``: the number of an autoscaling pool (``None``: fixed replicas); the first
    ``ORGS`` of them are one organization pool each, the others repository pools, which
    name their repository's webhook Secret with ``own_secrets``.
    """
    scope: dict[str, Any]
    if scaling is not None and scaling < ORGS:
        scope = {"organization": f"org-{scaling}", "autoscaling": {"maxReplicas": 20}}
    elif scaling is not None:
        scaling_spec: dict[str, Any] = {"maxReplicas": 20}
        if own_secrets:
            scaling_spec["webhookSecretRef"] = {"name": f"hooks-{scaling % REPOS}"}
        scope = {"repository": repository(scaling), "autoscaling": scaling_spec}
    else:
        scope = {"repository": repository(index), "replicas": 1}
    now = "2030-01-20T17:00:00Z"
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": now}
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {
            "name": f"pool-{index}",
            "namespace": f"team-{index % NAMESPACES}",
            "uid": f"uid-{index}",
            "resourceVersion": str(1000 + index),
            "generation": 1,
            "finalizers": [naming.POOL_FINALIZER],
            "creationTimestamp": now,
        },
        "spec": {**scope, "labels": ["linux-large"] if index % 3 == 0 else []},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "selector": f"{naming.POOL_LABEL}=pool-{index}",
            "tokenExpiresAt": "2030-01-20T18:00:00Z",
            "runners": {"online": 1, "busy": 0, "offline": 0},
            "conditions": [ready],
        },
    }


def delivery(job_id: int, repository: str) -> bytes:
    owner, _, name = repository.partition("/")
    job = {
        "id": job_id,
        "run_id": 4242,
        "status": "queued",
        "labels": ["self-hosted", "linux"],
        "created_at": "2030-01-20T17:42:00Z",
        "started_at": "2030-01-20T17:42:00Z",
        "runner_name": None,
        "steps": [],
    }
    payload = {
        "action": "queued",
        "workflow_job": job,
        "repository": {"name": name, "full_name": repository, "url": f"{API_URL}/repos/{repository}"},
        "organization": {"login": owner},
    }
    return json.dumps(payload).encode()


class NoOpKube(Kube):
    """GET answers the cached pool (as a fresh read would) or a repository's webhook Secret
    (``hooks-<n>``), every write answers nothing."""

    def __init__(self, informers: PoolCache) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self._informers = informers

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        if resource == SECRETS:
            value = tenant_secret(repository(int(name.removeprefix("hooks-"))))
            data = {"webhook-secret": base64.b64encode(value).decode()}
            return {"metadata": {"name": name, "resourceVersion": "1"}, "data": data}
        found = self._informers.get_pool(namespace or "", name)
        assert found is not None
        return found

    def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def empty_cache() -> PoolCache:
    return PoolCache(client.ApiClient(client.Configuration()), lambda key: None, None)


def _kept_kib(make: Callable[[], object]) -> float:
    """What ``make``'s result keeps allocated (its input copied inside, so only the cache)."""
    tracemalloc.start()
    kept = make()
    size = tracemalloc.get_traced_memory()[0] / 1024
    tracemalloc.stop()
    del kept
    return size


def fill(informers: PoolCache, pools: list[dict[str, Any]]) -> PoolCache:
    """Through the informer's event path: the store first, then its ADDED handlers."""
    informer = informers.informer(POOLS, "")
    for obj in pools:
        informer.cache._put(obj)
        informer._fire(ADDED, obj)
    return informers


@dataclass
class Row:
    path: str
    deliveries: int
    cpu_per_delivery_ms: float
    pools_per_delivery: float


Delivery = tuple[bytes, str, Any]  # the body, its X-Hub-Signature-256, its URL's route (or None)


def measure(path: str, deliver: Callable[[Delivery, str], int], bodies: list[Delivery]) -> Row:
    matched = 0
    started = time.process_time()
    for number, body in enumerate(bodies):
        matched += deliver(body, f"{path}-{number}")
    spent = time.process_time() - started
    return Row(path, len(bodies), 1000 * spent / len(bodies), matched / len(bodies))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=1000)
    parser.add_argument("--autoscaling", type=int, default=100)
    parser.add_argument("--deliveries", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="print pyinstrument's profile of match")
    parser.add_argument("--label", default="", help="names the JSON file (e.g. before, after)")
    parser.add_argument(
        "--own-secrets", action="store_true", help="repository pools name their own webhook Secret"
    )
    args = parser.parse_args(argv)

    informers = empty_cache()
    every = max(1, args.pools // max(1, args.autoscaling))
    pools = [
        pool_object(
            i, i // every if i % every == 0 and i // every < args.autoscaling else None, args.own_secrets
        )
        for i in range(args.pools)
    ]
    started = time.process_time()
    fill(informers, copy.deepcopy(pools))
    fill_ms = 1000 * (time.process_time() - started)
    cache_kib = _kept_kib(lambda: fill(empty_cache(), copy.deepcopy(pools)))
    kube = NoOpKube(informers)
    writer = DemandWriter(kube, informers, GitHubSettings(api_url=API_URL).api_url_of)
    verifier = Verifier(lambda: (SECRET,), informers, PoolSecrets(SecretReads(informers, kube)))
    seen = DeliveryLog()

    def receive(signed: Delivery, delivery_id: str, record: bool) -> int:
        body, signature, route = signed
        verdict = verifier(body, signature) if route is None else verifier(body, signature, route)
        assert verdict.accepted
        job = parse_delivery(json.loads(body))
        assert seen.claim(delivery_id)
        if record:
            return writer.record_job(job, verdict)
        return sum(1 for pool in writer.matching_pools(job) if verdict.admits(pool))

    def route_of(n: int) -> Any:
        from runnerpool.demand.verification import Route  # noqa: PLC0415 - not in trees before it

        return Route(*own_secret_route(n, args.pools, args.autoscaling))

    bodies = [(delivery(n + 1, repository(n)), n) for n in range(args.deliveries)]
    signed: list[Delivery] = [
        (
            body,
            sign(tenant_secret(repository(n)), body),
            route_of(n),
        )
        if args.own_secrets
        else (body, sign(SECRET, body), None)
        for body, n in bodies
    ]
    rows = [
        measure("match", lambda body, d: receive(body, d, False), signed),
        measure("record", lambda body, d: receive(body, d, True), signed),
    ]
    github = FakeGitHubClient()
    poller = DemandPoller(
        informers, writer, lambda pool: github, GitHubSettings(api_url=API_URL).api_url_of, interval=30
    )
    rounds = max(1, args.deliveries // 10)
    started = time.process_time()
    targets = sum(len(poller._targets(time.time())) for _ in range(rounds))
    poll_ms = 1000 * (time.process_time() - started) / rounds
    print(
        f"{args.pools} pools ({args.autoscaling} autoscaling), {args.deliveries} deliveries, {HEADER} checked"
        + (" against the pools' own secrets" if args.own_secrets else "")
    )
    print(f"filling the pool cache: {fill_ms:.0f} ms CPU, {cache_kib:.0f} KiB allocated and kept")
    print(f"poll targets: {poll_ms:.3f} ms CPU per poll, {targets // rounds} repositories")
    print(f"{'path':<8} {'CPU/delivery':>14} {'pools/delivery':>15}")
    for row in rows:
        print(f"{row.path:<8} {row.cpu_per_delivery_ms:>11.3f} ms {row.pools_per_delivery:>15.2f}")
    profile = _profile(lambda body, d: receive(body, d, False), signed) if args.profile else ""
    if profile:
        print(profile)
    write_result(
        "webhook_cpu",
        args.label,
        {
            "pools": args.pools,
            "autoscaling": args.autoscaling,
            "own_secrets": args.own_secrets,
            "fill_cpu_ms": fill_ms,
            "poll_targets_cpu_ms": poll_ms,
            "fill_kept_kib": cache_kib,
            "rows": [asdict(row) for row in rows],
            "profile": profile,
        },
    )
    return 0


def write_result(kind: str, label: str | None, fields: dict[str, Any]) -> Path:
    """``bench/results/KIND-LABEL.json`` (LABEL defaults to the time), with the Python and machine."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{kind}-{label or datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(
        json.dumps({**fields, "python": sys.version.split()[0], "machine": platform.machine()}, indent=2)
    )
    print(f"wrote {out}")
    return out


def _profile(deliver: Callable[[Delivery, str], int], bodies: list[Delivery]) -> str:
    from pyinstrument import Profiler  # noqa: PLC0415 - only with --profile

    profiler = Profiler(interval=0.0001)
    with profiler:
        for number, body in enumerate(bodies):
            deliver(body, f"profile-{number}")
    return str(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    raise SystemExit(main())
