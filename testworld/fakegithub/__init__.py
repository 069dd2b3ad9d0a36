"""A fake GitHub REST API for the operator's process-level tests and the demo.

It implements only what the operator uses (self-hosted runners, registration
tokens, App installation tokens, ``/rate_limit``), but those faithfully: shapes
and status codes from GitHub's OpenAPI description, pagination, ETags, rate
limits, plus fault injection for the failures the real service produces.
"""

from testworld.fakegithub.server import FakeGitHub
from testworld.fakegithub.state import (
    AuthRejectedError,
    FakeGitHubError,
    Installation,
    InstallationToken,
    RateWindow,
    RegistrationRejectedError,
    RegistrationToken,
    RequestRecord,
    Scope,
    UnknownRunnerError,
    UnknownScopeError,
)

__all__ = [
    "AuthRejectedError",
    "FakeGitHub",
    "FakeGitHubError",
    "Installation",
    "InstallationToken",
    "RateWindow",
    "RegistrationRejectedError",
    "RegistrationToken",
    "RequestRecord",
    "Scope",
    "UnknownRunnerError",
    "UnknownScopeError",
]
