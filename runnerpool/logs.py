"""Log set-up: plain text for people, one JSON object per line for log pipelines.

Fields passed with ``extra=`` (pool, namespace, action ...) become JSON keys, so a
pipeline can filter one pool's history without parsing messages.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


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


def configure(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The libraries are chatty at INFO (leader election logs every renewal) and PyGithub echoes
    # response bodies, tokens included, at DEBUG.
    for noisy in ("kubernetes", "urllib3", "github", "apscheduler", "leaderelection"):
        logger = logging.getLogger(noisy)
        logger.setLevel(max(logging.WARNING, root.level))
        # PyGithub attaches a handler of its own; with ours on the root every line would print twice.
        logger.handlers.clear()
