"""Run ``runnerpool-operator`` under pyinstrument, every thread of it.

``python bench/profile_operator.py OUT.html -- OPERATOR-ARGS...`` (the bench does this with
``--profile``).  pyinstrument samples only the thread that started it, and the operator's
work happens in its worker, informer and token threads, so every ``Thread.run`` gets a
profiler of its own and the sessions are combined at exit.  Threads still running at exit
(daemons) are read from their profiler's running session, which pyinstrument has no public
call for.

Besides the HTML (or text, if OUT ends in ``.txt``) and the session (``OUT.pyisession``, for
``pyinstrument --load``) it writes ``OUT.top.txt``: self time per
function over all threads, without the time spent blocked in waits (lock acquires, sleeps,
selects, socket reads), which is what a wall-clock profiler of mostly-waiting threads is
otherwise full of.  That list is the closest pyinstrument gets to "where the CPU went".
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyinstrument import Profiler
from pyinstrument.frame import Frame
from pyinstrument.renderers import ConsoleRenderer, HTMLRenderer
from pyinstrument.session import Session

#: Built-in calls whose self time is a thread blocked, not working.
BLOCKING = frozenset(
    {
        "acquire",
        "sleep",
        "select",
        "poll",
        "epoll.poll",
        "wait",
        "recv",
        "recv_into",
        "read",
        "accept",
        "_wait_for_tstate_lock",
        "lock.acquire",
        "_SSLSocket.read",
        "socket.recv_into",
        "socket.accept",
        "SimpleQueue.get",
    }
)
#: Python functions (name, file) whose own time is waiting: Condition.wait's timed acquire.
BLOCKING_PYTHON = frozenset({("wait", "threading.py"), ("select", "selectors.py")})
INTERVAL = 0.001

_running: list[tuple[Profiler, str]] = []
_finished: list[Session] = []
_guard = threading.Lock()


def _profiled_run(original: Any) -> Any:
    def run(self: threading.Thread) -> None:
        profiler = Profiler(interval=INTERVAL, async_mode="disabled")
        profiler.start()
        with _guard:
            _running.append((profiler, self.name))
        try:
            original(self)
        finally:
            with _guard:
                _running.remove((profiler, self.name))
            _finished.append(profiler.stop())

    return run


def _still_running(profiler: Profiler) -> Session | None:
    active = profiler._active_session  # no public way to read a session another thread runs
    if active is None:
        return None
    return Session(
        frame_records=list(active.frame_records),
        start_time=active.start_time,
        duration=time.time() - active.start_time,
        min_interval=active.interval,
        max_interval=active.interval,
        sample_count=len(active.frame_records),
        target_description=active.target_description,
        start_call_stack=active.start_call_stack,
        cpu_time=0.0,
        sys_path=sys.path,
        sys_prefixes=Session.current_sys_prefixes(),
    )


def _is_blocking(frame: Frame) -> bool:
    path = frame.file_path or ""
    if (frame.function, Path(path).name) in BLOCKING_PYTHON:
        return True
    return path.startswith("<built-in>") and (
        frame.function in BLOCKING or frame.function.rsplit(".", 1)[-1] in BLOCKING
    )


def top_self_time(root: Frame | None, limit: int = 30) -> list[tuple[float, str]]:
    """Self time per function (file:line), biggest first, blocking built-ins left out."""
    totals: defaultdict[str, float] = defaultdict(float)
    stack = [root] if root is not None else []
    while stack:
        frame = stack.pop()
        stack.extend(frame.children)
        owner = frame.parent  # pyinstrument keeps a frame's own time in a synthetic "[self]" child
        if not frame.is_synthetic or owner is None or _is_blocking(owner):
            continue
        totals[f"{owner.function}  {owner.file_path_short}:{owner.line_no}"] += frame.time
    return sorted(((seconds, where) for where, seconds in totals.items()), reverse=True)[:limit]


def write(out: Path, sessions: list[Session], cpu_seconds: float) -> None:
    combined = sessions[0]
    for session in sessions[1:]:
        combined = Session.combine(combined, session)
    combined.cpu_time = cpu_seconds
    out.parent.mkdir(parents=True, exist_ok=True)
    combined.save(out.with_name(out.name + ".pyisession"))  # re-render: pyinstrument --load=...
    if out.suffix == ".txt":
        out.write_text(ConsoleRenderer(unicode=False, color=False, show_all=False).render(combined))
    else:
        out.write_text(HTMLRenderer().render(combined))
    lines = [
        f"self time per function over {len(sessions)} threads, blocking waits left out "
        f"(process CPU {cpu_seconds:.2f} s)"
    ]
    lines += [f"{seconds:8.3f} s  {where}" for seconds, where in top_self_time(combined.root_frame(False))]
    out.with_name(out.name + ".top.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: profile_operator.py OUT.html|OUT.txt -- OPERATOR-ARGS...", file=sys.stderr)
        return 2
    out, operator_args = Path(argv[0]), argv[2:]
    threading.Thread.run = _profiled_run(threading.Thread.run)  # type: ignore[method-assign]
    from runnerpool import cli  # noqa: PLC0415 - after the patch, so its threads are profiled

    main_profiler = Profiler(interval=INTERVAL, async_mode="disabled")
    main_profiler.start()
    try:
        return cli.main(operator_args)
    finally:
        sessions = [main_profiler.stop(), *_finished]
        with _guard:
            sessions += [s for s in (_still_running(p) for p, _ in _running) if s is not None]
        write(out, sessions, time.process_time())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
