"""Three minutes of the chaos soak (bench/soak.py) on the real node: no invariant broken.

Two operator replicas, two namespaces with a fixed and an autoscaling pool each, and a
seeded stream of disturbances (jobs by webhook and by polling, scale and template changes,
drains, pod and namespace deletions, kill -9 of the leader, GitHub 5xx/429/hangs); see the
soak's docstring for the invariants. The table is printed whatever the outcome, and the
JSON, the plot and the operators' logs stay in the test's tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench import soak
from testworld.envtest.controlplane import ControlPlane
from testworld.node.node import Node

MINUTES = 3.0
#: The same disturbances on every run; ``SOAK_SEED`` explores others.
SEED = int(os.environ.get("SOAK_SEED", "22"))


@pytest.mark.timeout(480)
def test_three_minutes_of_chaos_break_no_invariant(
    control_plane: ControlPlane,
    node: Node,
    runnerpool_crd: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = soak.soak(
        control_plane, node, soak.Options(minutes=MINUTES, seed=SEED, out=tmp_path / "soak.json")
    )
    with capsys.disabled():
        print("\n" + soak.table(report))
    assert sum(inv["checks"] for inv in report["invariants"].values()) > 0
    assert report["disturbances_by_kind"], "the soak disturbed nothing"
    assert report["violations"] == {}, soak.table(report)
