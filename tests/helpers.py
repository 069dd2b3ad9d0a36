"""Small helpers shared by the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest
from apscheduler.schedulers.base import BaseScheduler

from runnerpool.scheduling import background_scheduler

T = TypeVar("T")


def started_scheduler(max_workers: int) -> BaseScheduler:
    """A running scheduler for a test that owns it (in the operator, ``scheduler_runnable`` does)."""
    scheduler = background_scheduler(max_workers)
    scheduler.start()
    return scheduler


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, message: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail the test with ``message`` otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout}s waiting for {message} (last value: {last!r})")


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for every practical purpose.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def venv_tool(name: str, install_hint: str) -> str:
    """A linter binary that a pip package puts beside the interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    assert found, f"{name} is required: {install_hint}"
    return found


def operator_help() -> str:
    """``runnerpool-operator --help`` as the installed console script prints it."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from runnerpool.cli import main; sys.exit(main())", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class WallClock:
    """A UTC clock that moves only when the test moves ``now``."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now
