"""Keeps secrets out of PyGithub's own request log; installed by the transport that uses it."""

from __future__ import annotations

import logging

__all__ = ["install"]


class _RedactBodies(logging.Filter):
    """Keep response bodies out of PyGithub's DEBUG request log.

    ``github.Requester`` logs every response body at DEBUG; for the registration-token and
    installation-token endpoints that body is a secret. The request line and status stay.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 9:
            record.args = (*args[:5], "(request body redacted)", args[6], args[7], "(response body redacted)")
        return True


def install() -> None:
    """Idempotent: the filter goes on ``github.Requester`` once per process."""
    requester_log = logging.getLogger("github.Requester")
    if not any(isinstance(f, _RedactBodies) for f in requester_log.filters):
        requester_log.addFilter(_RedactBodies())
