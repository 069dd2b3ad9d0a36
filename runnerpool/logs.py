"""Log set-up: plain text for people, one JSON object per line for log pipelines.

Fields passed with ``extra=`` (pool, namespace, action ...) become JSON keys, so a
pipeline can filter one pool's history without parsing messages. Every line logged while the
operator works for one pool also carries ``pool`` (``namespace/name``), and inside a reconcile
its ``reconcileID`` (``runnerpool.log_context``): the lines of libraries and helpers too, which
know nothing of the pool they work for. Text lines show them as ``pool=... reconcileID=...``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

from runnerpool import log_context

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class WorkContext(logging.Filter):
    """Stamps the pool and reconcile the logging code works for on each record it lets through.

    On the handler, so it runs in the thread that logs (where the context is) for the records of
    every logger. A field the call passed itself (``extra={"pool": ...}``) is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in log_context.fields().items():
            if name not in record.__dict__:
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = super().format(record)
        return f"{line} {extras}" if extras else line


def handler(fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """The operator's log handler: one line per record, in ``fmt``, to ``stream`` (stderr)."""
    found = logging.StreamHandler(stream or sys.stderr)
    found.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    found.addFilter(WorkContext())
    return found


def configure(fmt: str = "text", level: str = "INFO") -> None:
    root = logging.getLogger()
    root.handlers[:] = [handler(fmt)]
    root.setLevel(level.upper())
    # The libraries are chatty at INFO (leader election logs every renewal) and PyGithub echoes
    # response bodies, tokens included, at DEBUG.
    for noisy in ("kubernetes", "urllib3", "github", "apscheduler", "leaderelection"):
        logger = logging.getLogger(noisy)
        logger.setLevel(max(logging.WARNING, root.level))
        # PyGithub attaches a handler of its own; with ours on the root every line would print twice.
        logger.handlers.clear()
