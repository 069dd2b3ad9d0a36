"""The operator's threads share two glibc arenas (``runnerpool.launch.limit_malloc_arenas``):
resident memory then follows what the operator holds, not how many threads it runs.

Counted in a fresh interpreter (arenas are per process and never given back), with eight
threads alive at once that each allocate, as the operator's workers, watches and pod
creates do; ``malloc_info`` lists one ``<heap>`` per arena.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_COUNT_ARENAS = """
import ctypes, sys, tempfile, threading
from runnerpool.launch import limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas()
barrier = threading.Barrier(8)
blocks = []
def allocate():
    blocks.append(bytearray(64 * 1024))  # below the mmap threshold: from the thread's arena
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
with tempfile.TemporaryFile() as out:
    stream = ctypes.c_void_p(libc.fdopen(out.fileno(), b"w"))
    libc.malloc_info(0, stream)
    libc.fflush(stream)
    out.seek(0)
    print(out.read().decode().count("<heap nr="))
"""


def _python(code: str, *args: str, **env: str) -> str:
    """What ``code`` prints in a fresh interpreter, ``MALLOC_ARENA_MAX`` unset unless ``env`` sets it."""
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    command = [sys.executable, "-c", code, *args]
    return subprocess.run(command, env=environ, capture_output=True, text=True, check=True).stdout.strip()


def test_the_operators_threads_share_two_arenas() -> None:
    assert int(_python(_COUNT_ARENAS, "unlimited")) > 2  # glibc's rule: one a thread, up to 8 a core
    assert int(_python(_COUNT_ARENAS, "limited")) <= 2


def test_a_cap_in_the_environment_is_left_as_the_user_set_it() -> None:
    code = "from runnerpool.launch import limit_malloc_arenas; print(limit_malloc_arenas())"
    assert _python(code, MALLOC_ARENA_MAX="4") == "False"
