"""When to fetch the next registration token: pure functions, so tests need no clock or sleep.

Two situations, two policies:

* After a success the token is refreshed ``margin`` before it expires. A token lasts an hour;
  the margin is what a pod that reads the Secret just before the refresh has left to run
  ``config.sh``.
* After a failure the policy depends on whether waiting helps. GitHub being down or rate
  limiting us clears up by itself, so retry soon with capped exponential backoff (and never
  before GitHub's own ``retry-after``). Bad credentials, a missing scope or a broken Secret
  need a human; retrying often would only burn rate limit, but retrying at all means a fix
  is picked up without restarting the operator.

Either way a failed refresh is retried while the token it replaces still has time left
(``before_expiry``): a backoff that outgrows the margin would let the token expire first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from runnerpool.github.errors import GitHubError, RateLimited, Unavailable

__all__ = [
    "RetryPolicy",
    "before_expiry",
    "counts_as_try",
    "is_transient",
    "next_run_after_failure",
    "next_run_after_success",
]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff numbers, grouped so the updater and tests can swap them in one piece.

    Transient: 5 s doubling to 5 min. Five seconds rides out a single GitHub hiccup without
    hammering it; by the seventh attempt (about 5 min in total) a longer outage is likely, and
    five minutes still refreshes well within a 30-minute margin. Permanent: 2 min doubling to
    5 min, slow enough not to matter for the rate limit (at most 30 calls an hour per pool)
    and quick enough that someone fixing a Secret sees the result while still looking.
    Jitter spreads pools sharing one credential so they do not retry in lockstep.
    """

    transient_initial: timedelta = timedelta(seconds=5)
    transient_max: timedelta = timedelta(minutes=5)
    permanent_initial: timedelta = timedelta(minutes=2)
    permanent_max: timedelta = timedelta(minutes=5)
    #: Shortest wait after a success; stops a tight loop if GitHub hands out a token that
    #: already expires within the margin.
    min_refresh: timedelta = timedelta(minutes=1)
    #: Padding on top of GitHub's rate-limit reset, which has one-second resolution.
    reset_padding: timedelta = timedelta(seconds=1)
    #: Shortest retry a token's coming expiry can shorten a backoff to: halving the time left
    #: would otherwise retry in a tight loop in the token's last seconds.
    min_retry: timedelta = timedelta(seconds=5)


DEFAULT_POLICY = RetryPolicy()


def is_transient(error: BaseException) -> bool:
    """Failures that clear up without anyone changing anything.

    Other modules mark their own exception types with a ``transient = True`` class attribute
    rather than being imported here.
    """
    return isinstance(error, (Unavailable, RateLimited)) or getattr(error, "transient", False) is True


def next_run_after_success(
    expires_at: datetime,
    now: datetime,
    margin: timedelta,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> datetime:
    """Refresh ``margin`` before expiry, but never sooner than ``policy.min_refresh``."""
    return max(expires_at - margin, now + policy.min_refresh)


def _backoff(attempt: int, initial: timedelta, cap: timedelta, rng: random.Random) -> timedelta:
    """Exponential backoff with "equal jitter": uniformly between half and all of the step.

    Half the step is kept so a run of bad luck cannot collapse the wait to nearly nothing.
    """
    exponent = min(max(attempt, 1) - 1, 32)
    step = min(initial * (2**exponent), cap)
    half: timedelta = step / 2
    return half + half * rng.random()


def next_run_after_failure(
    attempt: int,
    error: BaseException,
    rng: random.Random,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> timedelta:
    """Delay before retry number ``attempt`` (1 for the first retry) after ``error``.

    GitHub's ``retry_after`` wins when it is longer: asking again before a rate limit resets
    only extends the lock-out for secondary limits.
    """
    if is_transient(error):
        delay = _backoff(attempt, policy.transient_initial, policy.transient_max, rng)
    else:
        delay = _backoff(attempt, policy.permanent_initial, policy.permanent_max, rng)
    retry_after = error.retry_after if isinstance(error, GitHubError) else None
    if retry_after is not None:
        delay = max(delay, timedelta(seconds=retry_after) + policy.reset_padding)
    return delay


def before_expiry(
    delay: timedelta,
    now: datetime,
    expires_at: datetime | None,
    margin: timedelta,
    policy: RetryPolicy = DEFAULT_POLICY,
) -> timedelta:
    """``delay`` (a retry's), shortened so the retry comes while the current token is still good.

    The token in the Secret (``expires_at``, ``None`` when the job has not filled it yet) is
    refreshed ``margin`` before it expires, so a retry's backoff can outgrow what it has left:
    with a 2-minute margin and GitHub rate limiting, retries at 20, 40, 60, 85 and 146 s let
    the token expire while the refresh waited, and pods were made with it. So the retry comes
    at the latest when half the margin is left, and once less is left, halfway to the expiry;
    but never sooner than ``policy.min_retry``. A retry before a rate limit's ``retry_after``
    asks GitHub nothing: the client's rate gate refuses it unsent (``GitHubError.held_back``).
    Once the token has expired, there is nothing left to save: the backoff stands.
    """
    if expires_at is None or expires_at <= now:
        return delay
    left = expires_at - now
    latest = max(left - margin / 2, left / 2, policy.min_retry)
    return min(delay, latest)


def counts_as_try(err: Exception) -> bool:
    """Whether a failure was a try that backs off: not when the client refused the call unsent
    (``GitHubError.held_back``: a rate-limit wait not over, a host held slow). Counted, such
    refusals while GitHub rate limits a credential doubled the backoff with every retry that
    came a little before the wait was over, until it outgrew the token's remaining life (and
    a JIT pool's pods waited as long for their configs)."""
    return not (isinstance(err, GitHubError) and err.held_back)
