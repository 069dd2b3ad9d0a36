"""Which pool, and which reconcile, the running code works for: the fields every log line gets.

A log pipeline that follows one pool needs every line the operator wrote for it, not only the
lines whose message names it; and a reconcile that went wrong is read as one story, which
controller-runtime makes possible with a ``reconcileID`` on every line of a reconcile. Passing
the key to every ``log`` call would couple each module to its caller, so the runtime says what
it works on here, around each unit of work, and ``runnerpool.logs`` stamps it on each record:

* the reconcile workers (``runnerpool.runtime.controller``): ``pool`` and a new ``reconcileID``
  around each reconcile; the reconcile logic itself knows nothing of this;
* the token jobs and the runner managers: ``pool`` around a run's work for one pool.

Context variables, not thread-locals: a value set here is undone when the work ends (APScheduler
and the work queue reuse their threads, and a job must not inherit the previous job's pool),
and code run in a copied context (``contextvars.copy_context``) keeps it. A thread started by
the work does not inherit it: each thread pool's run sets it at its own entry.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["POOL_FIELD", "RECONCILE_ID_FIELD", "fields", "for_pool", "for_reconcile", "runs_for_pool"]

#: The log record attributes (JSON keys) this module provides.
POOL_FIELD = "pool"
RECONCILE_ID_FIELD = "reconcileID"

_pool: ContextVar[str | None] = ContextVar("runnerpool_log_pool", default=None)
_reconcile_id: ContextVar[str | None] = ContextVar("runnerpool_log_reconcile_id", default=None)


class _Keyed(Protocol):
    """A pool's reference (``runnerpool.domain.PoolRef``): what carries a pool key."""

    @property
    def key(self) -> str: ...


S = TypeVar("S")
K = TypeVar("K", bound="str | _Keyed")
P = ParamSpec("P")
R = TypeVar("R")


def new_reconcile_id() -> str:
    """16 hex digits: short enough to read, 64 random bits so that two reconciles never share one."""
    return secrets.token_hex(8)


@contextmanager
def for_pool(key: str) -> Iterator[None]:
    """Lines logged inside carry ``pool`` (``namespace/name``), and no reconcile's id."""
    pool, reconcile = _pool.set(key), _reconcile_id.set(None)
    try:
        yield
    finally:
        _reconcile_id.reset(reconcile)
        _pool.reset(pool)


@contextmanager
def for_reconcile(key: str) -> Iterator[str]:
    """Lines logged inside carry ``pool`` and a ``reconcileID`` of their own; yields the id."""
    reconcile_id = new_reconcile_id()
    pool, reconcile = _pool.set(key), _reconcile_id.set(reconcile_id)
    try:
        yield reconcile_id
    finally:
        _reconcile_id.reset(reconcile)
        _pool.reset(pool)


def runs_for_pool(method: Callable[Concatenate[S, K, P], R]) -> Callable[Concatenate[S, K, P], R]:
    """A method whose first argument is a pool (its key, or a reference with a ``key``) runs
    :func:`for_pool` that pool: one line above a job's entry point."""

    @functools.wraps(method)
    def run(self: S, pool: K, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with for_pool(pool if isinstance(pool, str) else pool.key):
            return method(self, pool, *args, **kwargs)

    return run


def fields() -> dict[str, str]:
    """What the current context says, as log record attributes (empty outside any pool)."""
    found: dict[str, str] = {}
    if (pool := _pool.get()) is not None:
        found[POOL_FIELD] = pool
    if (reconcile_id := _reconcile_id.get()) is not None:
        found[RECONCILE_ID_FIELD] = reconcile_id
    return found
