"""One registration token per scope and credential, shared by every pool that needs one.

A registration token lets any runner join its repository or organization, so the
pools of one scope do not each need their own: the first job that finds no token
fresh enough asks GitHub, the others take the same one.  A new pool in a scope that
already has a token gets it at once, without a request, and a scope costs two token
requests an hour however many pools it has.  The credential is part of the key, so
a pool never receives a token obtained with another namespace's credentials.

GitHub's failure is shared too, for ``FAILURE_SHARED``: the pools of a scope are due
together (they share one token's expiry), and while GitHub answered 502 or refused a revoked
PAT each of them asked in turn: a hundred requests in a burst for one answer. Each pool still
backs off on it as on its own try; their later retries, spread by the backoff's jitter, share
an answer only when they fall within ``FAILURE_SHARED`` of one another.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from datetime import datetime, timedelta

from runnerpool.github.errors import GitHubError
from runnerpool.github.types import RegistrationToken

#: How long GitHub's failure to give a scope's token answers for the other pools of the scope:
#: the pools that waited for the request, and those due with them, which follow within
#: milliseconds; shorter than the shortest backoff (2.5 s), so a retry always asks GitHub.
FAILURE_SHARED = timedelta(seconds=2)


class SharedTokens:
    def __init__(self, margin: timedelta, clock: Callable[[], datetime]) -> None:
        self._margin = margin
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[Hashable, RegistrationToken] = {}
        self._fetching: dict[Hashable, threading.Lock] = {}
        self._failed: dict[Hashable, tuple[GitHubError, datetime]] = {}

    def get(self, key: Hashable, fetch: Callable[[], RegistrationToken]) -> RegistrationToken:
        """A token with more than the refresh margin left; ``fetch`` runs once per key at a time."""
        with self._lock:
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:
            cached = self._fresh(key)
            if cached is not None:
                return cached
            self._raise_failed(key)
            try:
                token = fetch()
            except GitHubError as err:
                now = self._clock()
                with self._lock:
                    self._failed = {k: failed for k, failed in self._failed.items() if failed[1] > now}
                    self._failed[key] = (err, now + FAILURE_SHARED)
                raise
            with self._lock:
                self._failed.pop(key, None)
                self._tokens[key] = token
                self._drop_expired()
            return token

    def _raise_failed(self, key: Hashable) -> None:
        """GitHub's answer to the key's last request, again, while it is shared."""
        with self._lock:
            failed = self._failed.get(key)  # an expired one goes at the next failure's pruning
        if failed is not None and failed[1] > self._clock():
            raise copy.copy(failed[0])  # a copy: one raised object per thread's traceback

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
