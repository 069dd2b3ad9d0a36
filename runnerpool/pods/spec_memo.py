"""A memo of something a pool's spec alone decides, kept per pool and per extra key.

Parsed pools are frozen and new per resourceVersion (``runnerpool.reads``): the reconciler, the
runner managers and the webhook's matching ask with the parses of different versions, and every
status write makes another, so a memo by identity alone missed every other time. This one
compares the remembered spec by identity first, then by value (pydantic's ``==``, about 1 µs).

Written by hand rather than with ``functools.lru_cache``: the key must be the pool's name (a
bounded set, one entry each) while the hit test is the spec's equality, and an LRU keyed by the
spec would hash a whole pydantic model on every call (they are not hashable either).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from runnerpool import api

__all__ = ["SpecMemo"]

T = TypeVar("T")

#: Entries kept before the memo starts again: pools deleted long ago cost one computation each.
_SIZE = 20_000


class SpecMemo(Generic[T]):
    """``get(pool, extra, compute)``: ``compute()``'s value for the pool's current spec."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str, Hashable], tuple[api.RunnerPoolSpec, T]] = {}
        self._lock = threading.Lock()

    def get(self, pool: api.RunnerPool, extra: Hashable, compute: Callable[[], T]) -> T:
        """``extra``: whatever else ``compute`` reads (a default image, an API URL), or ``()``."""
        key = (pool.namespace, pool.name, extra)
        with self._lock:
            known = self._known.get(key)
        if known is not None and (known[0] is pool.spec or known[0] == pool.spec):
            return known[1]
        value = compute()
        with self._lock:
            if len(self._known) >= _SIZE:
                self._known.clear()
            self._known[key] = (pool.spec, value)
        return value

    def clear(self) -> None:
        """Forget everything (tests that count computations start from nothing)."""
        with self._lock:
            self._known.clear()
