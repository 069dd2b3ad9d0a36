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

**The service URL is checked before anything is sent to it** (``ServiceHosts``). It comes from
an answer, and a tenant who sets ``spec.proxy`` and ``spec.githubServerTLS`` can answer for
api.github.com itself: an unchecked URL let it aim the operator's pod at any address, an
internal ``http://`` service included (``noProxy`` sends it there directly), and read the
status code back from the pool's conditions. So the URL must be ``https`` on GitHub's Actions
service: a host under ``actions.githubusercontent.com`` (what github.com answers:
``https://pipelines.actions.githubusercontent.com/<id>``, ``pipelinesghubeus<N>....``), for a
pool on GHE.com (``<subdomain>.ghe.com``, data residency) a host under its own
``actions.<subdomain>.ghe.com``, the pool's own GitHub (a GHES serves it on its own host,
``https://<host>/_services/pipelines/<id>``; the pool's API origin is trusted as it is, so the
test world's ``http`` GitHub works), or a ``--github-api-host``. Anything else is refused as a
malformed answer, unsent. The message session's queue URL (``runnerpool.scaleset.session``)
comes from an answer too and is held to the same rule, and no Actions service request follows a
redirect (``runnerpool.scaleset.wire``).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runnerpool.domain import Scope, web_url_for
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import RegistrationToken
from runnerpool.scaleset.errors import error_for, malformed
from runnerpool.scaleset.wire import Wire, json_body
from runnerpool.tenants import url_host

__all__ = [
    "ACTIONS_SERVICE_DOMAIN",
    "API_VERSION",
    "GHE_COM_DOMAIN",
    "ActionsConnection",
    "Admin",
    "ServiceHosts",
    "from_rest",
    "token_expiry",
]

#: Every Actions service call names this version (``?api-version=``).
API_VERSION = "6.0-preview"
#: Trade for a new admin token this long before the current one expires.
REFRESH_MARGIN = 60.0

#: github.com's Actions service: the URLs its answers name are on hosts under this domain.
ACTIONS_SERVICE_DOMAIN = "actions.githubusercontent.com"
#: GHE.com (GitHub Enterprise Cloud with data residency): each enterprise's GitHub is on
#: ``<subdomain>.ghe.com`` and its Actions service under ``actions.<subdomain>.ghe.com``
#: (GitHub's "Network details for GHE.com"; actions/scaleset takes any ``*.ghe.com`` as hosted).
GHE_COM_DOMAIN = "ghe.com"

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


#: At most this much of a refused host goes into a message (a condition's, in the end).
_SHOWN = 128


def _origin(url: str) -> tuple[str, str]:
    """Scheme and ``HOST:PORT`` (the port spelled out), lower case."""
    return urllib.parse.urlsplit(url).scheme.lower(), url_host(url)


def _actions_domains(web_url: str) -> tuple[str, ...]:
    """The domains GitHub's Actions service may be under for a pool whose GitHub is at
    ``web_url``: github.com's, and for a GHE.com pool its own enterprise's (only its own: another
    enterprise's subdomain is no more the pool's GitHub than any other host)."""
    host = (urllib.parse.urlsplit(web_url).hostname or "").lower()
    subdomain = host.removesuffix("." + GHE_COM_DOMAIN)
    if subdomain == host or not subdomain or "." in subdomain:
        return (ACTIONS_SERVICE_DOMAIN,)
    return ACTIONS_SERVICE_DOMAIN, f"actions.{host}"


@dataclass(frozen=True)
class ServiceHosts:
    """Where one pool's Actions service may be (the module docstring says why it is checked).

    ``api_url``: the pool's GitHub API, already allowed (``runnerpool.tenants.GitHubHosts``);
    its origin and its web origin are the pool's own GitHub. ``hosts``: ``--github-api-host``'s
    ``HOST:PORT`` values, for an installation whose Actions service lives elsewhere."""

    api_url: str
    hosts: frozenset[str] = frozenset()

    def problem(self, url: str) -> str | None:
        """Why ``url`` is not the pool's Actions service (``None``: it is); names the host only."""
        try:
            parsed = urllib.parse.urlsplit(url)
        except ValueError:  # an unclosed IPv6 bracket, say
            return "the Actions service URL is not a URL"
        web_url = web_url_for(self.api_url)
        if _origin(url) in {_origin(self.api_url), _origin(web_url)}:
            return None  # the pool's own GitHub, as its REST calls reach it
        if parsed.scheme.lower() != "https":
            return "the Actions service URL is not https"
        host = (parsed.hostname or "").lower()
        domains = _actions_domains(web_url)
        github = any(host == domain or host.endswith("." + domain) for domain in domains)
        if (github and url_host(url) == f"{host}:443") or url_host(url) in self.hosts:
            return None
        services = ", ".join(f"*.{domain}" for domain in domains)
        return (
            f"the Actions service URL's host {url_host(url)[:_SHOWN]} is not GitHub's Actions service "
            f"({services}, the pool's GitHub host, or a --github-api-host)"
        )

    def checked(self, what: str, url: str) -> str:
        """``url`` when it is the pool's Actions service; raises ``MalformedResponse`` else."""
        problem = self.problem(url)
        if problem is not None:
            raise malformed(what, f"{problem}; not called")
        return url


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
        hosts: Iterable[str] = (),
    ) -> None:
        """``hosts``: ``--github-api-host``'s ``HOST:PORT`` values (``ServiceHosts``)."""
        self.api_url = api_url.rstrip("/")
        #: The web URL of the repository, organization or enterprise (``Scope.html_url``).
        self.config_url = config_url
        #: Where the service URLs that answers name may point (checked before any call).
        self.service_hosts = ServiceHosts(self.api_url, frozenset(hosts))
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
            raise error_for(what, answer.status_code, answer.content, answer.headers)
        try:
            data: Any = json_body(answer.content)
        except ValueError:
            raise malformed(what, "body is not JSON") from None
        url = data.get("url") if isinstance(data, dict) else None
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url or not isinstance(token, str) or not token:
            raise malformed(what, "no service url or no token in the answer")
        self.service_hosts.checked(what, url)
        expires_at = token_expiry(token)
        if expires_at is None:
            raise malformed(what, "the admin token is not a JWT with an expiry")
        return Admin(url, token, expires_at)
