"""``make demo`` keeps working: it converges, deregisters, cleans up and exits 0 by itself.

Inside the test session the machine's one node is the session's, so the demo must say
why it cannot have one and fall back to the runner simulator: the path a newcomer without
root or overlayfs takes.  ``make demo`` itself runs it on the node.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DEMO_TIMEOUT = 120


def test_demo_runs_to_the_end_and_leaves_nothing_behind() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "testworld.demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    out = done.stdout
    assert "The test node cannot start here: this already runs in a sealed world" in out, out
    assert "Running with the runner simulator playing the pods instead." in out
    assert "True (RunnersReady)" in out
    assert "pool deleted; 0 of its runners left on the fake GitHub (2 deregistered)" in out
    assert "operator stopped (SIGTERM), exit code 0" in out
    assert out.rstrip().endswith("done: everything stopped and removed")
    folders = [Path(p) for p in re.findall(r"(?:its files in|removed) (/\S+)", out)]
    assert len(folders) == 2, out
    assert not any(folder.exists() for folder in folders), folders
