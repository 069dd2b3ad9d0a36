"""The console script's first lines: accept SIGTERM before the slow imports, and leave a
traceback should the interpreter ever die of a fatal error.

Importing the kubernetes client, PyGithub and pydantic takes a second or more (several
under ``python -X dev``).  A SIGTERM in that window (a pod deleted just after it started,
a test stopping the operator early) used to end the process with the default action,
exit status -15, instead of a clean stop.  The handler installed here only remembers the
signal; ``runnerpool.cli.main`` replaces it with the real one and acts on what it
remembered.  What remains is the interpreter's own start-up, before any of our code runs.

``faulthandler`` prints every thread's Python traceback on SIGABRT, SIGSEGV and the like,
so a crash during shutdown says which thread was where instead of only "Aborted".
"""

from __future__ import annotations

import faulthandler
import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def main() -> int:
    faulthandler.enable()
    early: list[int] = []

    def remember(signum: int, frame: FrameType | None) -> None:
        del frame
        early.append(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, remember)
    from runnerpool import cli  # noqa: PLC0415 - the slow imports, once the handler is in place

    return cli.main(early_signals=early)


if __name__ == "__main__":
    raise SystemExit(main())
