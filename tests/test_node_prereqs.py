"""A machine that cannot run the test node is told what is missing and how to get it, at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testworld.node import prereqs, seal


def test_missing_root_and_runc_are_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs.os, "geteuid", lambda: 1000)
    real_which = prereqs.which
    monkeypatch.setattr(prereqs, "which", lambda command: None if command == "runc" else real_which(command))

    found = prereqs.problems()

    assert any(p.startswith("not root") for p in found), found
    assert "runc is not installed: apt-get install -y --no-install-recommends runc" in found


def test_the_seal_refuses_to_start_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs, "problems", lambda: ["overlayfs is not available to containerd: load it"])

    with pytest.raises(seal.SealError, match="cannot start on this machine:\n  - overlayfs is not available"):
        seal.run_sealed(["true"])


def test_this_machine_has_everything_the_node_needs() -> None:
    assert prereqs.problems() == []


def test_one_node_lock_per_machine_whatever_binary_cache_a_run_uses(tmp_path: Path) -> None:
    """The node's cgroup subtree is per machine; a lock per cache would let two nodes run."""

    def lock_path(cache: Path) -> str:
        env = {**os.environ, "RUNNERPOOL_ENVTEST_CACHE": str(cache)}
        code = "from testworld.node import seal; print(seal.NODE_LOCK)"
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    assert lock_path(tmp_path / "a") == lock_path(tmp_path / "b")
