"""What one reconcile pass wrote, as a typed record.

Each write the reconciler (and its pod step) makes is one :class:`Write`. Control flow asks
the record (``Write.SECRET_CREATED in writes``, ``writes.count(Write.POD_CREATED)``), and the
pass's log line shows the values: the words stay the ones the log has always shown.
"""

from __future__ import annotations

import enum

__all__ = ["Write", "Writes"]


class Write(enum.StrEnum):
    FINALIZER_ADDED = "update finalizer"
    FINALIZER_REMOVED = "update finalizer removed"
    CREDENTIALS_PROTECTED = "protect credential secret"
    SECRET_CREATED = "create secret"
    SECRET_METADATA = "update secret metadata"
    TOKEN_EMPTIED = "update secret (token removed)"
    JIT_SECRET_CREATED = "create secret (a pod's JIT config)"
    JIT_SECRET_EMPTIED = "update secret (JIT config removed)"
    POD_CREATED = "create pod"
    PODS_DELETED = "delete pod"
    BUDGET_CREATED = "create poddisruptionbudget"
    BUDGET_UPDATED = "update poddisruptionbudget"
    BUDGET_DELETED = "delete poddisruptionbudget (the namespace has no pool left)"
    LEGACY_BUDGET_DELETED = "delete poddisruptionbudget (per pool, of an earlier version)"
    ACCOUNT_CREATED = "create serviceaccount"
    ACCOUNT_UPDATED = "update serviceaccount"
    ACCOUNT_DELETED = "delete serviceaccount (containerMode is no longer kubernetes)"
    ROLE_BINDING_CREATED = "create rolebinding"
    ROLE_BINDING_UPDATED = "update rolebinding"
    ROLE_BINDING_DELETED = "delete rolebinding (containerMode is no longer kubernetes)"
    STATUS = "update status"
    POOL_ANNOTATED = "update runnerpool annotations"


_CREATES = frozenset(
    {
        Write.SECRET_CREATED,
        Write.JIT_SECRET_CREATED,
        Write.POD_CREATED,
        Write.BUDGET_CREATED,
        Write.ACCOUNT_CREATED,
        Write.ROLE_BINDING_CREATED,
    }
)


class Writes:
    """The writes of one pass, in order."""

    def __init__(self) -> None:
        self._done: list[Write] = []

    def add(self, write: Write, times: int = 1) -> None:
        self._done.extend([write] * times)

    def count(self, write: Write) -> int:
        return self._done.count(write)

    def __contains__(self, write: object) -> bool:
        return write in self._done

    def __len__(self) -> int:
        return len(self._done)

    def as_log(self) -> list[str]:
        """The writes as the pass's log line lists them (repeats kept: three pods, three words)."""
        return [str(write) for write in self._done]

    @property
    def action(self) -> str:
        if Write.FINALIZER_REMOVED in self._done:
            return "delete"
        if any(write in _CREATES for write in self._done):
            return "create"
        return "update" if self._done else "noop"
