"""The short benchmark inside ``make test``: the counts of ten pools' life, not its seconds.

``python -m bench.run`` measures times, which a noisy machine moves; the counts below (API
writes per pool to converge, none in a quiet window, GitHub requests per pool, listings per
scope while pools are deleted, the pod creates one big pool has in flight at once) are the same
on any machine, so a change that adds a write or
a GitHub request to every pool fails here instead of showing up later as a slower benchmark.
The seconds go to the benchmark's history (bench/README.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench import run

POOLS = 10
#: One pool this big sends its creates in batches of 1+2+4+8+16+32, then one more in the window
#: of ``--pod-create-concurrency`` (64).
BURST = 64


def test_ten_pools_converge_stay_quiet_and_go_with_the_writes_and_requests_they_need(tmp_path: Path) -> None:
    opts = run.parse(
        [
            f"--sizes={POOLS}",
            "--no-github-hour",
            "--time-scale=60",  # a token lives a minute: no refill while ten pools converge
            "--resync-period=5",  # the quiet window: 10 s
            "--deletion",
            # Converging and deleting ten pools takes seconds; a stuck run must end inside the
            # test's timeout with what it left behind (result.notes), not be killed silently.
            "--deletion-timeout=60",
            "--converge-timeout=120",
            f"--out={tmp_path}",
        ]
    )
    size = run.SizeRun(POOLS, opts, tmp_path / "logs", print)
    result = size.run()
    assert result.converged, result.notes

    writes = Counter(result.converge_writes)
    print({k: v for k, v in vars(result).items() if k != "series"})
    # Per pool: its finalizer, its token Secret, its pod, the token fill, two status writes.
    assert writes["patch runnerpools"] == POOLS, "one finalizer patch per pool"
    assert writes["create pods"] == POOLS, "one pod per replica"
    # A pass that runs before the cache shows the Secret its last pass made repeats the create,
    # refused with 409 (nothing changes; the pass reads it by name). Under a loaded machine more
    # than one pool's pass races its cache (CI saw 12 of 10): at most once per pool, not per pass.
    assert POOLS <= writes["create secrets"] <= 2 * POOLS, "one token Secret per pool"
    # Plus the shared credential Secret's protection, patched with its resourceVersion: the first
    # passes of pools that run at once on the four workers may each try it, and all but one get 409.
    assert writes["patch secrets"] <= POOLS + 1 + 4, "one token fill per pool"
    assert writes["patch runnerpools/status"] <= 2 * POOLS, "at most 'starting' and 'ready' per pool"
    per_pool = ("runnerpools", "runnerpools/status", "secrets", "pods")
    # Six a pool, the credential's protection, and the same refused tries of it as above: a
    # loaded CI run saw 63 (20 status writes, 13 Secret patches), each bound above met.
    assert sum(result.converge_writes_by_kind.get(kind, 0) for kind in per_pool) <= 6 * POOLS + 1 + 4, writes

    assert result.audit_writes == 0, f"a converged pool writes nothing: {result.audit_write_detail}"

    assert result.deletion_deregistered is not None, f"every runner deregistered: {result.notes}"
    assert result.deletion_gone is not None, f"every pool gone: {result.notes}"


def test_one_big_pool_creates_its_pods_concurrently_and_each_once(tmp_path: Path) -> None:
    """Slow-start batches (runnerpool.pods.slow_start): the API server sees many of the pool's
    pod creates in flight at once, yet no pod is created twice (the creates' expectations)."""
    opts = run.parse(
        [
            "--sizes=1",
            f"--replicas={BURST}",
            "--converge-only",
            "--no-github-hour",
            "--converge-timeout=240",
            f"--out={tmp_path}",
        ]
    )
    result = run.SizeRun(1, opts, tmp_path / "logs", print).run()
    assert result.converged, result.notes

    print({k: v for k, v in vars(result).items() if k != "series"})
    assert result.converge_writes["create pods"] == BURST, "one create per replica, none twice"
    assert result.all_pods_exist is not None, "every runner pod was created"
    # Served one after the other, the peak is 1; a batch of 32 overlaps at the server.
    assert result.peak_pod_creates is not None and result.peak_pod_creates >= 8, result.peak_pod_creates
