"""What a Kubernetes API error says, without the HTTP headers the client puts in ``str(err)``.

``ApiException.__str__`` prints the status line, every response header and the raw
body: noisy, and headers are nothing a reader of the operator's log needs.  The body
is a ``metav1.Status`` whose ``reason`` (``NotFound``, ``Forbidden``, ``Conflict``...)
and ``message`` say what went wrong; these helpers read it, and answer the two
questions the reconciler asks of an error: "is the object simply gone?" and "is its
namespace being deleted?" (both end a reconcile quietly instead of counting as errors).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

__all__ = [
    "ApiStatus",
    "OneLineErrors",
    "describe",
    "fold_api_error_text",
    "is_namespace_terminating",
    "is_refusal",
    "log_failure",
    "one_line",
    "one_line_errors_from",
    "status_of",
]

#: ``metav1.StatusCause`` reason the NamespaceLifecycle admission plugin gives.
_NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"
#: The message of that refusal: "unable to create new content in namespace X because it is
#: being terminated" (older servers send no cause, only this text).
_NAMESPACE_TERMINATING_TEXT = "because it is being terminated"


@dataclass(frozen=True)
class ApiStatus:
    """The parts of a ``metav1.Status`` body worth logging or deciding on."""

    code: int
    reason: str
    message: str
    details: dict[str, Any]


def status_of(err: ApiException) -> ApiStatus:
    """The error's Status body; falls back to the HTTP status line when there is none."""
    body: Any = None
    raw = err.body
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    if isinstance(raw, str) and raw:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    if not isinstance(body, dict):
        body = {}
    details = body.get("details")
    return ApiStatus(
        code=int(body.get("code") or err.status or 0),
        reason=str(body.get("reason") or err.reason or ""),
        message=str(body.get("message") or ""),
        details=details if isinstance(details, dict) else {},
    )


#: Longest description a log line carries: an API message is a sentence, not a page.
MAX_DESCRIPTION = 500


def describe(err: BaseException, redact: Callable[[str], str] | None = None) -> str:
    """One line for a log: what went wrong, never HTTP headers, a body dump or a traceback.

    A Kubernetes API error gives its status code, reason and the API's message
    (``404 NotFound: runnerpools "x" not found``); an error that classifies itself with
    ``reason`` and ``message`` (the GitHub and credential errors) gives those; anything else
    ``Type: text``. Always one line, at most ``MAX_DESCRIPTION`` characters. ``redact`` takes a
    secret out of the text *before* it is cut: a secret cut in two would no longer be found.
    """
    if isinstance(err, ApiException):
        status = status_of(err)
        text = f"{status.code} {status.reason}".strip()
        text = f"{text}: {status.message}" if status.message else text
    else:
        reason, message = getattr(err, "reason", None), getattr(err, "message", None)
        if isinstance(reason, str) and isinstance(message, str) and reason and message:
            text = f"{reason}: {message}"
        else:
            text = f"{type(err).__name__}: {err}"
    return one_line(text if redact is None else redact(text))


def one_line(text: str) -> str:
    """``text`` with its line breaks folded into spaces, cut at ``MAX_DESCRIPTION``."""
    folded = " ".join(text.split())
    return folded if len(folded) <= MAX_DESCRIPTION else folded[: MAX_DESCRIPTION - 3] + "..."


#: ``ApiException.__str__`` as it lands in messages others format: "(404)\nReason: Not Found\n
#: HTTP response headers: ...\nHTTP response body: {...}".
_API_EXCEPTION_TEXT = re.compile(
    r"\((?P<code>\d+)\)\s*Reason: (?P<reason>[^\n]*)\n"
    r"(?:HTTP response headers: [^\n]*\n?)?"
    r"(?:HTTP response body: (?P<body>.*))?",
    re.DOTALL,
)


def fold_api_error_text(text: str) -> str:
    """A message with an ``ApiException`` printed into it, with that part as ``describe`` puts it."""
    found = _API_EXCEPTION_TEXT.search(text)
    if found is None:
        return text
    err = ApiException(status=int(found["code"]), reason=found["reason"].strip())
    err.body = (found["body"] or "").strip()
    return text[: found.start()] + describe(err)


def log_failure(logger: logging.Logger, level: int, msg: str, *args: object, err: BaseException) -> None:
    """``msg % args``, a colon and ``describe(err)`` at ``level``; the traceback at DEBUG only."""
    logger.log(level, f"{msg}: %s", *args, describe(err))
    logger.debug(f"{msg}: traceback", *args, exc_info=err)


class OneLineErrors(logging.Filter):
    """Folds a library's error records into one line: what ``describe`` says of the exception
    instead of its traceback, and the reason and message of an ``ApiException`` printed into
    the message instead of its headers and body. The traceback goes to ``trace_to`` at DEBUG.
    """

    def __init__(self, trace_to: logging.Logger) -> None:
        super().__init__()
        self._trace_to = trace_to

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        exc_info = record.exc_info
        if exc_info and exc_info[1] is not None:
            self._trace_to.debug("%s: traceback", one_line(text), exc_info=exc_info)
            text = f"{text}: {describe(exc_info[1])}"
        record.msg, record.args = one_line(fold_api_error_text(text)), None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def one_line_errors_from(*logger_names: str, trace_to: logging.Logger) -> None:
    """Fold the error records of these (library) loggers into one line each; idempotent."""
    for name in logger_names:
        target = logging.getLogger(name)
        if not any(isinstance(f, OneLineErrors) for f in target.filters):
            target.addFilter(OneLineErrors(trace_to))


#: Status codes of a write the cluster refuses as asked: a quota (403), an admission policy or
#: webhook (400, 403, 422).
_REFUSALS = frozenset({400, 403, 422})


def is_refusal(err: BaseException) -> bool:
    """A write the cluster refused as asked (``_REFUSALS``), which asking again the same way
    will not change, not a server error or a namespace being deleted."""
    return isinstance(err, ApiException) and err.status in _REFUSALS and not is_namespace_terminating(err)


def is_namespace_terminating(err: BaseException) -> bool:
    """A create refused because its namespace is being deleted (403, or 409 on some paths)."""
    if not isinstance(err, ApiException) or err.status not in (403, 409):
        return False
    status = status_of(err)
    causes = status.details.get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == _NAMESPACE_TERMINATING_CAUSE for c in causes):
        return True
    return _NAMESPACE_TERMINATING_TEXT in status.message


#: The authorizer's refusal (RBAC's words: ``User "..." cannot create resource "secrets" ...``).
_ACCESS_DENIED = re.compile(r'\bcannot [a-z]+ resource "')


def is_access_denied(err: BaseException) -> bool:
    """A 403 from the API server's authorizer: the operator may not do this there (its access
    to the namespace taken away, say), not a quota or an admission policy refusing this one
    request, which answer 403 too."""
    if not isinstance(err, ApiException) or err.status != 403:
        return False
    return _ACCESS_DENIED.search(status_of(err).message) is not None
