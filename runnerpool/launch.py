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

After the stop path has run, a thread can still sit in a call that GitHub or the API server
does not answer (the HTTP clients' read timeouts and retries add up to minutes), and the
interpreter would wait for it at exit: a pod outliving its SIGTERM until the kubelet kills
it.  Such stragglers get ``STRAGGLER_GRACE`` seconds; then the process logs which ones and
exits with its status anyway (``os._exit``: nothing they hold needs finishing, the Lease is
already released and every write they could still make is repeated by the next leader).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds the stopped process waits for threads still in a call before it exits without them.
STRAGGLER_GRACE = 5.0


def main() -> int:
    faulthandler.enable()
    early: list[int] = []

    def remember(signum: int, frame: FrameType | None) -> None:
        del frame
        early.append(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, remember)
    from runnerpool import cli  # noqa: PLC0415 - the slow imports, once the handler is in place

    return _exit_without_stragglers(cli.main(early_signals=early))


def _stragglers() -> list[threading.Thread]:
    """The threads the interpreter joins at exit: non-daemon ones, and the workers of every
    ``concurrent.futures`` thread pool (APScheduler's), daemon or not (they inherit the flag
    from the scheduler's daemon thread, yet ``concurrent.futures`` joins them at exit)."""
    from concurrent.futures import thread as pool_threads  # noqa: PLC0415 - only on the way out

    workers = set(getattr(pool_threads, "_threads_queues", {}))
    main = threading.main_thread()
    return [
        t for t in threading.enumerate() if t is not main and t.is_alive() and (not t.daemon or t in workers)
    ]


def _exit_without_stragglers(code: int) -> int:
    deadline = time.monotonic() + STRAGGLER_GRACE
    for thread in _stragglers():
        thread.join(max(0.0, deadline - time.monotonic()))
    left = _stragglers()
    if not left:
        return code
    logging.getLogger(__name__).warning(
        "%d thread(s) still busy after the stop, exiting without them: %s",
        len(left),
        ", ".join(t.name for t in left),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
