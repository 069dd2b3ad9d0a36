"""One registration token per scope and credential, shared by every pool that needs one.

A registration token lets any runner join its repository or organization, so the
pools of one scope do not each need their own: the first job that finds no token
fresh enough asks GitHub, the others take the same one.  A new pool in a scope that
already has a token gets it at once, without a request, and a scope costs two token
requests an hour however many pools it has.  The credential is part of the key, so
a pool never receives a token obtained with another namespace's credentials.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from datetime import datetime, timedelta

from runnerpool.github.types import RegistrationToken


class SharedTokens:
    def __init__(self, margin: timedelta, clock: Callable[[], datetime]) -> None:
        self._margin = margin
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[Hashable, RegistrationToken] = {}
        self._fetching: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, fetch: Callable[[], RegistrationToken]) -> RegistrationToken:
        """A token with more than the refresh margin left; ``fetch`` runs once per key at a time."""
        with self._lock:
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:
            cached = self._fresh(key)
            if cached is not None:
                return cached
            token = fetch()
            with self._lock:
                self._tokens[key] = token
                self._drop_expired()
            return token

    def _fresh(self, key: Hashable) -> RegistrationToken | None:
        with self._lock:
            cached = self._tokens.get(key)
        if cached is not None and cached.expires_at - self._clock() > self._margin:
            return cached
        return None

    def _drop_expired(self) -> None:
        now = self._clock()
        for key in [k for k, t in self._tokens.items() if t.expires_at <= now]:
            del self._tokens[key]
            self._fetching.pop(key, None)
