"""A fake GitHub REST API for the operator's process-level tests and the demo.

It implements only what the operator and the test world use (self-hosted
runners, registration tokens, App installation tokens, ``/rate_limit``, workflow
runs and jobs), but those faithfully: shapes and status codes from GitHub's
OpenAPI description, pagination, ETags, rate limits, plus fault injection for the
failures the real service produces.  Runner processes (the config.sh/run.sh
stand-ins in ``testworld/runner_image``) register and take jobs through the
protocol described in `testworld.fakegithub.actions`.
"""

from testworld.fakegithub.server import FakeGitHub
from testworld.fakegithub.state import (
    AuthRejectedError,
    FakeGitHubError,
    Installation,
    InstallationToken,
    ListenerError,
    RateWindow,
    RegistrationRejectedError,
    RegistrationToken,
    RequestRecord,
    Scope,
    UnknownJobError,
    UnknownRunnerError,
    UnknownScopeError,
)

__all__ = [
    "AuthRejectedError",
    "FakeGitHub",
    "FakeGitHubError",
    "Installation",
    "InstallationToken",
    "ListenerError",
    "RateWindow",
    "RegistrationRejectedError",
    "RegistrationToken",
    "RequestRecord",
    "Scope",
    "UnknownJobError",
    "UnknownRunnerError",
    "UnknownScopeError",
]
