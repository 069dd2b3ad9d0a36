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
``runnerpool.github.credentials``) closes here on a rate-limit answer: until the wait is over
its calls are refused before they are sent, with the seconds left as ``retry_after`` (every
caller already backs off by it).

* **Which calls.** A primary limit (``x-ratelimit-remaining: 0``) is one bucket's
  (``x-ratelimit-resource``): registration tokens and JIT configs come out of
  ``actions_runner_registration``, everything else out of ``core``, so a spent registration
  bucket must not stop the deregistration of a deleted pool's runners, nor a spent core budget
  the tokens GitHub would still give. An answer that names no bucket is core's (older GitHub
  Enterprise Servers, which keep no registration bucket either), so a registration call so
  answered closes its own bucket too: else its retries went on being sent through the wait.
  A secondary limit is the credential's: every call waits.
* **How long.** GitHub's time when it names one. A secondary limit without one waits
  ``SECONDARY_RATE_LIMIT_WAIT`` (a minute), doubling with each such limit in a row up to
  ``MAX_SECONDARY_WAIT``. Only a limit met by a call sent after the last one closed the gate
  counts as another in a row: the answers to calls that were in flight together (a burst,
  what trips a secondary limit in the first place) are one limit, not five. Any other answer
  from GitHub starts the doubling again.
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
#: The gate of a secondary limit: every bucket's calls wait on it.
_EVERY_BUCKET = ""


class RateLimitGate:
    """One credential's: closed per bucket from a rate-limit answer until GitHub's wait is over."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}
        self._last: dict[str, RateLimited] = {}
        self._untimed = 0
        self._closes = 0

    def refusal(self, bucket: str) -> RateLimited | None:
        """While a call of ``bucket`` may not go: the last limit again (its reason and message,
        so conditions do not flap), with the seconds left as ``retry_after`` and ``held_back``
        (nothing was sent: not another try); else ``None``."""
        now = self._clock()
        with self._lock:
            open_at, last = 0.0, None
            for gate in (_EVERY_BUCKET, bucket):
                if self._until.get(gate, 0.0) > open_at:
                    open_at, last = self._until[gate], self._last[gate]
        if last is None or open_at <= now:
            return None
        return RateLimited(
            last.message,
            reason=last.reason,
            retry_after=open_at - now,
            status=last.status,
            bucket=last.bucket,
            held_back=True,
        )

    def closes(self) -> int:
        """How many times the gate has closed: taken before a call is sent, given to ``limited``."""
        with self._lock:
            return self._closes

    def limited(self, err: RateLimited, sent_at: int, called: str | None = None) -> RateLimited:
        """Close on ``err`` (a call of bucket ``called`` sent when ``closes()`` said ``sent_at``);
        returns it with the wait set: GitHub's, or for an untimed secondary limit the doubling
        one."""
        gates = {_EVERY_BUCKET} if err.bucket is None else {err.bucket, called or err.bucket}
        with self._lock:
            if err.retry_after is not None:
                wait = err.retry_after
            else:
                if sent_at == self._closes:  # not one of a burst another answer closed on
                    self._untimed += 1
                doublings = max(self._untimed - 1, 0)
                wait = min(SECONDARY_RATE_LIMIT_WAIT * 2.0 ** min(doublings, 32), MAX_SECONDARY_WAIT)
            until = self._clock() + wait
            for gate in gates:
                if until > self._until.get(gate, 0.0):
                    self._until[gate], self._last[gate] = until, err
            self._closes += 1
        return RateLimited(
            err.message, reason=err.reason, retry_after=wait, status=err.status, bucket=err.bucket
        )

    def answered(self) -> None:
        """GitHub answered a call, and not with a limit: the next untimed limit waits a minute."""
        with self._lock:
            self._untimed = 0
