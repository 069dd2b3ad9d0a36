"""The Actions service connection: where scale-set calls go and the admin token they carry.

GitHub hands it out in exchange for a runner registration token, the same exchange
``config.sh`` makes: ``POST {api}/actions/runner-registration`` with ``Authorization:
RemoteAuth <registration token>`` and ``{"url": <config URL>, "runner_event": "register"}``
answers ``{"url": <Actions service URL>, "token": <admin token>}``. The admin token is a JWT;
its ``exp`` says when to trade again, which happens a minute before (the Go client's margin),
so no call goes out with a token about to lapse. One the service refuses (401) before then, as
GitHub does with a revoked one, is traded again at once (``renew``). The exchange itself
retries 401/403 as the Go client does (a registration token just minted may not be known
everywhere yet).

The registration token comes from a callable: the REST client's path
(``from_rest``, ``GitHubClient.registration_token``, PAT or App alike) or anything a test or
the operator injects. Neither token is ever logged or put into a message.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runnerpool.domain import Scope
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import RegistrationToken
from runnerpool.scaleset.errors import error_for, malformed
from runnerpool.scaleset.wire import Wire

__all__ = ["API_VERSION", "ActionsConnection", "Admin", "from_rest", "token_expiry"]

#: Every Actions service call names this version (``?api-version=``).
API_VERSION = "6.0-preview"
#: Trade for a new admin token this long before the current one expires.
REFRESH_MARGIN = 60.0

RegistrationTokens = Callable[[], RegistrationToken]


def from_rest(client: GitHubClient, scope: Scope) -> RegistrationTokens:
    """Registration tokens through the REST client the pool already has."""
    return lambda: client.registration_token(scope)


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, read without verifying it (the service verifies it); None
    when the token is not a JWT with a numeric ``exp``."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


@dataclass(frozen=True)
class Admin:
    """The current service URL and admin token; ``repr`` leaves the token out."""

    service_url: str
    token: str = field(repr=False)
    expires_at: float

    def url(self, path: str, **query: str | int) -> str:
        """``{service}/{path}?...&api-version=6.0-preview``, values escaped."""
        base = self.service_url.rstrip("/") + "/" + path.lstrip("/")
        return base + "?" + urllib.parse.urlencode({**query, "api-version": API_VERSION})


class ActionsConnection:
    """One scope's connection; thread-safe, traded again when the admin token nears expiry."""

    def __init__(
        self,
        api_url: str,
        config_url: str,
        registration_token: RegistrationTokens,
        wire: Wire,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        #: The web URL of the repository, organization or enterprise (``Scope.html_url``).
        self.config_url = config_url
        self._registration_token = registration_token
        self._wire = wire
        self._clock = clock
        self._lock = threading.Lock()
        self._admin: Admin | None = None

    def admin(self) -> Admin:
        """The connection to use now, traded for first when none or about to expire."""
        with self._lock:
            admin = self._admin
            if admin is None or self._clock() + REFRESH_MARGIN >= admin.expires_at:
                admin = self._admin = self._trade()
            return admin

    def renew(self, refused: Admin) -> Admin:
        """A new admin token in place of ``refused``, one the service answered 401 to before it
        expired (GitHub revokes admin tokens); threads that saw the same refusal trade once."""
        with self._lock:
            if self._admin is None or self._admin is refused:
                self._admin = self._trade()
            return self._admin

    def _trade(self) -> Admin:
        what = "POST /actions/runner-registration"
        registration = self._registration_token()
        answer = self._wire.send(
            "POST",
            f"{self.api_url}/actions/runner-registration",
            what=what,
            headers={"Authorization": f"RemoteAuth {registration.token}", "Content-Type": "application/json"},
            body={"url": self.config_url, "runner_event": "register"},
            also_retry=(401, 403),
        )
        if not 200 <= answer.status_code < 300:
            raise error_for(what, answer.status_code, answer.content)
        try:
            data: Any = answer.json()
        except ValueError:
            raise malformed(what, "body is not JSON") from None
        url = data.get("url") if isinstance(data, dict) else None
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url or not isinstance(token, str) or not token:
            raise malformed(what, "no service url or no token in the answer")
        expires_at = token_expiry(token)
        if expires_at is None:
            raise malformed(what, "the admin token is not a JWT with an expiry")
        return Admin(url, token, expires_at)
