"""Reading the API server's audit log while the server is still writing it.

kube-apiserver appends one JSON event per line and flushes whenever it likes, so
a reader can find the last line half written.  Only lines that end in a newline
are events; the rest is the next event still on its way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def complete_events(path: Path, offset: int = 0) -> Iterator[dict[str, Any]]:
    """Each fully written event from ``offset`` on.

    Nothing is yielded when the log does not exist yet (the server has answered
    nothing).  A partial last line is left for the next read.
    """
    if not path.exists():
        return
    with path.open("rb") as log:
        log.seek(offset)
        for line in log:
            if not line.endswith(b"\n"):
                return
            if line.strip():
                yield json.loads(line)


def end_of_complete_events(path: Path) -> int:
    """Offset after the last fully written event: where a reader of only newer events starts.

    Reads back from the end only as far as the last newline, so marking a large
    log costs one small read.
    """
    if not path.exists():
        return 0
    with path.open("rb") as log:
        end = log.seek(0, 2)
        while end > 0:
            start = max(0, end - 4096)
            log.seek(start)
            chunk = log.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0
