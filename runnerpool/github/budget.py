"""How long a scope's runner manager waits before its next listing.

The rule, also in docs/github-api-budget.md:

* Normally: the interval (``--runner-sync-interval``, one minute by default).
* GitHub asked us to wait (a rate-limit or ``retry-after`` answer): at least that long.
* Fewer than ``LOW_BUDGET_FRACTION`` (10 %) of the credential's window left: stretch the
  interval so that the listings of every scope using this credential spend at most half of
  what is left before the window resets. The other half stays for what cannot wait:
  deregistering runners of deleted pools, replacing finished pods, registration tokens.
  With ``remaining`` requests left, ``reset_in`` seconds to go, ``scopes`` scopes listing with
  this credential and ``pages`` requests per listing (a worst case: unchanged pages cost
  nothing), the wait is ``reset_in * scopes * pages / (remaining / 2)``, at least the
  interval and at most until the reset.
* Nothing left: wait for the reset.

Slowing down before GitHub says no keeps the budget for the calls that protect users (a
finalizer's deletes), instead of discovering the limit with a 403 in the middle of one.

Calls made on demand (a deleted pool's finalizer deregistering its runners, requeued by the
reconciler as often as its work queue allows) follow ``ScopeBackoff``: after a failed call
on a scope, none on that scope until ``FIRST_BACKOFF`` seconds have passed, doubling per
failure up to the interval, and never before GitHub's ``retry-after`` or rate-limit reset. A
pool deleted during a 15 s outage used to make 30 calls in it; now it tries at 0, 1, 3 and 7 s
(each try: one request and the client's two transport retries), however often it is asked.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Hashable

from runnerpool.github.errors import GitHubError
from runnerpool.github.types import RUNNERS_PER_PAGE, RateLimit

__all__ = ["FIRST_BACKOFF", "LOW_BUDGET_FRACTION", "ScopeBackoff", "listing_cost", "next_listing_delay"]

#: Seconds without a call on a scope after its first failure (then 2, 4, ... up to the cap).
FIRST_BACKOFF = 1.0

LOW_BUDGET_FRACTION = 0.10
#: Share of the remaining budget the listings may use once it is low.
LISTING_SHARE = 0.5
#: Past the reset, GitHub's clock and ours may disagree by a moment.
RESET_SLACK = 1.0


def listing_cost(runners: int) -> int:
    """Requests one full listing takes when every page has changed."""
    return max(1, math.ceil(runners / RUNNERS_PER_PAGE))


def next_listing_delay(
    interval: float,
    budget: RateLimit | None,
    now: float,
    *,
    pages: int = 1,
    scopes: int = 1,
    retry_after: float | None = None,
) -> float:
    """Seconds until the next listing; ``now`` and ``budget.reset`` are Unix times."""
    delay = max(interval, retry_after or 0.0)
    if budget is None or budget.limit <= 0 or budget.remaining >= budget.limit * LOW_BUDGET_FRACTION:
        return delay
    until_reset = max(0.0, budget.reset - now) + RESET_SLACK
    if budget.remaining <= 0:
        return max(delay, until_reset)
    spread = until_reset * max(1, scopes) * max(1, pages) / (budget.remaining * LISTING_SHARE)
    return max(delay, min(spread, until_reset))


class ScopeBackoff:
    """Per scope: how long after a failed call the next one may go (thread-safe).

    ``cap``: the longest wait a plain failure earns (the listing interval: an outage is never
    probed less often than the listing would); GitHub's own wait (``retry_after``, which the
    client derives from ``Retry-After`` or ``x-ratelimit-reset``) may be longer. ``clock`` in
    seconds (Unix time or monotonic: only differences count).
    """

    def __init__(self, cap: float, clock: Callable[[], float]) -> None:
        self._cap = max(cap, FIRST_BACKOFF)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[Hashable, int] = {}
        self._until: dict[Hashable, float] = {}
        self._last: dict[Hashable, GitHubError] = {}

    def left(self, key: Hashable) -> float:
        """Seconds before ``key`` may be asked again (0: now)."""
        with self._lock:
            until = self._until.get(key)
        return 0.0 if until is None else max(0.0, until - self._clock())

    def failed(self, key: Hashable, err: GitHubError) -> float:
        """Note a failed call; returns the seconds before the next one may go."""
        with self._lock:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            wait = min(self._cap, FIRST_BACKOFF * 2.0 ** min(failures - 1, 32))
            wait = max(wait, err.retry_after or 0.0)
            self._until[key] = self._clock() + wait
            self._last[key] = err
            return wait

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)
            self._until.pop(key, None)
            self._last.pop(key, None)

    def refusal(self, key: Hashable) -> GitHubError | None:
        """While ``key`` backs off: its last failure again (same class, reason and message,
        so conditions and events do not flap), with the seconds left as ``retry_after``."""
        left = self.left(key)
        with self._lock:
            last = self._last.get(key)
        if last is None or left <= 0:
            return None
        # A copy, not the class called again: a subclass may take other arguments (a scale
        # set refusal's ``type_name``), and building one anew raised TypeError mid-drain.
        again = copy.copy(last)
        again.retry_after = left
        return again
