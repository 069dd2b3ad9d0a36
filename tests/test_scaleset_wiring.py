"""The operator's settings reach the Actions service calls of scale-set pools (issue 34)."""

from __future__ import annotations

from runnerpool.scale_set_pools import scale_set_policy
from runnerpool.scaleset.wire import Policy
from runnerpool.settings import GitHubSettings


def test_the_github_timeout_and_answer_cap_bound_the_service_calls_but_not_the_long_poll() -> None:
    policy = scale_set_policy(GitHubSettings(timeout=7, max_response_bytes=123_456))
    assert (policy.timeout, policy.max_response_bytes) == (7.0, 123_456)
    assert policy.poll_timeout == Policy().poll_timeout > 50.0, "the service holds a poll about 50 s"
