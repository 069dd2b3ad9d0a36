"""Files the repository keeps generated (CRD, dashboard, receiver policy): write, or check only.

A generator's ``--check`` compares the committed file with what it would write and prints a
diff and the command to run, so a stale file fails the tests with what to do about it.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path


def write_or_check(path: Path, wanted: str, *, check: bool, command: str) -> int:
    """0 when written (or, with ``check``, already up to date); 1 when ``check`` finds it stale."""
    if check:
        current = path.read_text() if path.exists() else ""
        if current == wanted:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=str(path),
            tofile="generated",
            n=2,
        )
        sys.stderr.write("".join(diff))
        sys.stderr.write(f"\n{path} is stale: run `{command}` and commit the result\n")
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(wanted)
    return 0
