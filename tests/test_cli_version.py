"""``runnerpool-operator --version`` reports the installed version (read only when asked)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version


def test_version_prints_the_installed_version_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from runnerpool.cli import main; sys.exit(main())", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"runnerpool-operator {version('runnerpool-operator')}"
