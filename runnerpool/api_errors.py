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
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

__all__ = ["ApiStatus", "describe", "is_namespace_terminating", "status_of"]

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


def describe(err: BaseException) -> str:
    """One line for a log: the API's reason and message for API errors, else ``Type: text``."""
    if isinstance(err, ApiException):
        status = status_of(err)
        text = f"{status.code} {status.reason}".strip()
        return f"{text}: {status.message}" if status.message else text
    return f"{type(err).__name__}: {err}"


def is_namespace_terminating(err: BaseException) -> bool:
    """A create refused because its namespace is being deleted (403, or 409 on some paths)."""
    if not isinstance(err, ApiException) or err.status not in (403, 409):
        return False
    status = status_of(err)
    causes = status.details.get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == _NAMESPACE_TERMINATING_CAUSE for c in causes):
        return True
    return _NAMESPACE_TERMINATING_TEXT in status.message
