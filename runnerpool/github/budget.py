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
"""

from __future__ import annotations

import math

from runnerpool.github.types import RUNNERS_PER_PAGE, RateLimit

__all__ = ["LOW_BUDGET_FRACTION", "listing_cost", "next_listing_delay"]

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
