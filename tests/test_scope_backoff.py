"""``ScopeBackoff``: while a scope backs off, its last failure is what the caller sees again."""

from __future__ import annotations

import pytest

from runnerpool.github.budget import FIRST_BACKOFF, ScopeBackoff
from runnerpool.github.errors import GitHubError, RateLimited
from runnerpool.scaleset.errors import ScaleSetError, error_for


def failed_with(err: GitHubError) -> GitHubError | None:
    now = [1000.0]
    backoff = ScopeBackoff(cap=60, clock=lambda: now[0])
    backoff.failed("scope", err)
    now[0] += 0.5
    return backoff.refusal("scope")


def test_an_unexpected_scale_set_refusal_comes_back_with_the_wait() -> None:
    """The Actions service answers an unlisted 4xx (say 400 on removing a runner): a drain of a
    scale-set pool then reports it, with the wait, instead of raising TypeError."""
    again = failed_with(error_for("DELETE agents/{id}", 400, b'{"typeName":"SomeOtherException"}'))
    assert isinstance(again, ScaleSetError)
    assert (again.status, again.type_name, again.message) == (
        400,
        "SomeOtherException",
        "DELETE agents/{id}: HTTP 400 (SomeOtherException)",
    )
    assert again.retry_after == pytest.approx(FIRST_BACKOFF - 0.5)


def test_a_rate_limit_keeps_its_bucket_and_githubs_wait() -> None:
    again = failed_with(RateLimited("limited", bucket="core", retry_after=30, status=403))
    assert isinstance(again, RateLimited)
    assert (again.bucket, again.status) == ("core", 403)
    assert again.retry_after == pytest.approx(29.5)
