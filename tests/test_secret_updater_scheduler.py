"""The refresh and retry decisions, as pure functions of time, attempt and error."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import BadCredentials, MalformedResponse, NotFound, RateLimited, Unavailable
from secret_updater.timing import (
    RetryPolicy,
    before_expiry,
    is_transient,
    next_run_after_failure,
    next_run_after_success,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy()


class _Fixed(random.Random):
    """``random()`` always returns one value, to pin jitter at its bounds."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def test_refresh_margin_before_expiry() -> None:
    expires = NOW + timedelta(hours=1)
    assert next_run_after_success(expires, NOW, timedelta(minutes=30)) == NOW + timedelta(minutes=30)
    assert next_run_after_success(expires, NOW, timedelta(minutes=5)) == NOW + timedelta(minutes=55)


def test_refresh_never_loops_on_a_short_lived_token() -> None:
    # GitHub may hand back a token that already expires within the margin.
    expires = NOW + timedelta(minutes=10)
    assert next_run_after_success(expires, NOW, timedelta(minutes=30)) == NOW + POLICY.min_refresh
    assert (
        next_run_after_success(NOW - timedelta(hours=1), NOW, timedelta(minutes=30))
        == NOW + POLICY.min_refresh
    )


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (Unavailable("x"), True),
        (RateLimited("x", retry_after=1), True),
        (BadCredentials("x"), False),
        (NotFound("x"), False),
        (MalformedResponse("x"), False),
        (CredentialError.missing("x"), False),
        (RuntimeError("x"), False),
    ],
)
def test_classification(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


def test_transient_backoff_doubles_to_five_minutes_with_jitter() -> None:
    low, high = _Fixed(0.0), _Fixed(0.999999)
    steps = [5, 10, 20, 40, 80, 160, 300, 300, 300]
    for attempt, step in enumerate(steps, start=1):
        lo = next_run_after_failure(attempt, Unavailable("x"), low).total_seconds()
        hi = next_run_after_failure(attempt, Unavailable("x"), high).total_seconds()
        assert lo == pytest.approx(step / 2)
        assert hi == pytest.approx(step, rel=1e-5)
    # Huge attempt counts do not overflow.
    assert next_run_after_failure(10_000, Unavailable("x"), low) == timedelta(minutes=5) / 2


def test_permanent_failures_retry_slowly_but_keep_retrying() -> None:
    rng = random.Random(7)
    for attempt in range(1, 20):
        delay = next_run_after_failure(attempt, BadCredentials("x"), rng)
        assert timedelta(minutes=1) <= delay <= timedelta(minutes=5)
    assert next_run_after_failure(1, CredentialError.missing("x"), _Fixed(0.999999)) <= timedelta(minutes=2)


def test_rate_limit_reset_wins_when_longer() -> None:
    err = RateLimited("x", retry_after=1800)
    assert next_run_after_failure(1, err, _Fixed(0.5)) == timedelta(seconds=1801)
    short = RateLimited("x", retry_after=1)
    assert next_run_after_failure(8, short, _Fixed(0.0)) == timedelta(seconds=150)


def test_jitter_spreads_pools() -> None:
    rng = random.Random(1)
    delays = {next_run_after_failure(3, Unavailable("x"), rng) for _ in range(20)}
    assert len(delays) > 10


def test_a_retry_comes_while_the_token_it_replaces_is_still_good() -> None:
    margin = timedelta(minutes=2)

    def bounded(delay_s: float, left_s: float) -> float:
        expires = NOW + timedelta(seconds=left_s)
        return before_expiry(timedelta(seconds=delay_s), NOW, expires, margin).total_seconds()

    assert bounded(146, 120) == 60, "at the latest when half the margin is left"
    assert bounded(20, 120) == 20, "a backoff that fits stands"
    assert bounded(300, 30 * 60) == 300, "long before the expiry, the backoff stands"
    assert bounded(146, 40) == 20, "with less left, halfway to the expiry"
    assert bounded(146, 6) == POLICY.min_retry.total_seconds(), "but no tight loop at the end"
    assert bounded(146, -1) == 146, "an expired token has nothing left to save"
    assert before_expiry(timedelta(seconds=146), NOW, None, margin) == timedelta(seconds=146), "none yet"
