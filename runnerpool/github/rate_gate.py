"""No request with a credential GitHub has rate-limited, until GitHub's wait is over.

GitHub's rules for a client it rate-limits ("Best practices for using the REST API", "Handle
rate limit errors appropriately"): wait until ``retry-after`` (or, with ``x-ratelimit-remaining:
0``, until ``x-ratelimit-reset``); for a secondary limit that names no time, wait at least a
minute and back off exponentially; and keep making requests while limited and "your
integration may be banned". The limit is the credential's, not one repository's.

The operator's jobs each had their own backoff (a runner manager per scope, the demand poller
per repository, a token pool per pool), so a credential limited on one repository went on
asking for the others, and a secondary limit without ``retry-after`` was asked again every
minute, forever. So each client (one per credential Secret, API URL and connection:
``runnerpool.github.credentials``) closes here on any rate-limit answer: until the wait is over
its calls are refused before they are sent, with the seconds left as ``retry_after`` (every
caller already backs off by it). A secondary limit without a time waits
``SECONDARY_RATE_LIMIT_WAIT`` (a minute), doubling with each such answer in a row up to
``MAX_SECONDARY_WAIT``; any answered call starts the doubling again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from runnerpool.github.errors import RateLimited

__all__ = ["MAX_SECONDARY_WAIT", "SECONDARY_RATE_LIMIT_WAIT", "RateLimitGate"]

#: GitHub asks clients that hit a secondary limit without a ``retry-after`` to wait at least a
#: minute, then longer with each limit in a row.
SECONDARY_RATE_LIMIT_WAIT = 60.0
#: The longest such wait (a minute doubled four times).
MAX_SECONDARY_WAIT = 960.0


class RateLimitGate:
    """One credential's: closed from a rate-limit answer until GitHub's wait is over."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._until = 0.0
        self._untimed = 0
        self._last: RateLimited | None = None

    def refusal(self) -> RateLimited | None:
        """While closed: the last limit again (its reason and message, so conditions do not
        flap), with the seconds left as ``retry_after``; ``None`` when a call may go."""
        with self._lock:
            left, last = self._until - self._clock(), self._last
        if last is None or left <= 0:
            return None
        return RateLimited(last.message, reason=last.reason, retry_after=left, status=last.status)

    def limited(self, err: RateLimited) -> RateLimited:
        """Close on ``err``; returns it with the wait set (GitHub's, or the doubling one)."""
        with self._lock:
            if err.retry_after is None:
                self._untimed += 1
                wait = min(SECONDARY_RATE_LIMIT_WAIT * 2.0 ** min(self._untimed - 1, 32), MAX_SECONDARY_WAIT)
            else:
                wait = err.retry_after
            self._until = max(self._until, self._clock() + wait)
            self._last = err
        return RateLimited(err.message, reason=err.reason, retry_after=wait, status=err.status)

    def answered(self) -> None:
        """A call went through: the next untimed limit waits a minute again."""
        with self._lock:
            self._untimed = 0
