"""The rate-limit gate's rules (the client's use of it: tests/test_github_api.py)."""

from __future__ import annotations

from runnerpool.github.errors import RateLimited
from runnerpool.github.rate_gate import MAX_SECONDARY_WAIT, RateLimitGate
from tests.test_runner_groups import Clock


def _untimed() -> RateLimited:
    return RateLimited("GET /orgs/o/actions/runners: HTTP 403 Forbidden", status=403)


def test_a_burst_of_calls_limited_together_is_one_limit_not_five() -> None:
    """Secondary limits come from concurrency: the answers to the calls in flight when GitHub
    said stop must not stretch a one-minute wait to sixteen."""
    clock = Clock()
    gate = RateLimitGate(clock)
    in_flight = [gate.closes() for _ in range(5)]

    limits = [gate.limited(_untimed(), sent) for sent in in_flight]
    waits = [limit.retry_after for limit in limits]
    assert not any(limit.held_back for limit in limits), "GitHub's own answers: tries"

    assert waits == [60.0] * 5
    clock.now += 60
    assert gate.refusal("core") is None
    assert gate.limited(_untimed(), gate.closes()).retry_after == 120.0, "the next one in a row doubles"


def test_untimed_limits_in_a_row_double_up_to_the_cap_and_any_answer_starts_again() -> None:
    clock = Clock()
    gate = RateLimitGate(clock)
    waits = []
    for _ in range(7):
        wait = gate.limited(_untimed(), gate.closes()).retry_after
        assert wait is not None
        waits.append(wait)
        clock.now += wait
    assert waits == [60, 120, 240, 480, 960, 960, 960] and MAX_SECONDARY_WAIT == 960
    gate.answered()
    assert gate.limited(_untimed(), gate.closes()).retry_after == 60


def test_a_secondary_limit_closes_every_bucket_and_a_primary_one_its_own() -> None:
    clock = Clock()
    gate = RateLimitGate(clock)
    spent = RateLimited(
        "POST .../registration-token", retry_after=30, status=403, bucket="actions_runner_registration"
    )
    gate.limited(spent, gate.closes())
    assert gate.refusal("core") is None
    refused = gate.refusal("actions_runner_registration")
    assert refused is not None and refused.retry_after == 30
    assert refused.held_back, "refused unsent: the token job does not count it as a try"

    gate.limited(_untimed(), gate.closes())
    for bucket in ("core", "actions_runner_registration"):
        assert gate.refusal(bucket) is not None
