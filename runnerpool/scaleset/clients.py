"""Per pool, the scale set client to use: built on the REST client the pool already has.

Why a cache: a scale-set pool's listener, its JIT Secrets and its deletion all talk to the
same Actions service with the same admin token; trading a registration token for a new admin
token on every call would cost a REST call each (the budget the scale set mode is meant to
spare). One ``ScaleSetClient`` per (namespace, credential Secret, API URL, scope, connection)
is kept, so two pools of one scope and credential share theirs.

Its ``ActionsConnection`` gets registration tokens from the REST client that
``runnerpool.github.credentials.ClientCache`` gives for the pool (``connection.from_rest``),
and registers with the scope's web URL (``Scope.html_url`` of ``web_url_for(api_url)``), the
URL ``config.sh --url`` takes. The REST client is asked for on every ``get``: when the
credential Secret's content changes, ``ClientCache`` builds a new REST client, and this cache
then drops the scale set client built on the old one (its admin token was traded with the old
credential), as ``ClientCache`` drops its own. A Secret that cannot be turned into a client
raises ``CredentialError`` every time, as ``ClientCache.get`` does.

The Actions service URL an answer names must be GitHub's (``connection.ServiceHosts``): the
cache's ``hosts`` are ``--github-api-host``'s, where an installation's service may also live.

The Actions service calls take the pool's connection as its REST calls do: the REST client's
``route`` (``spec.githubServerTLS``'s CA bundle and ``spec.proxy``, ``runnerpool.github.route``)
is given to the client's ``Wire``. ``ClientCache`` makes a new REST client when the route
changes, so a changed route makes a new scale set client as well. The operator's ``wire``
carries its ``--github-timeout`` and ``--github-max-response-bytes`` (``Policy``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from runnerpool.domain import Connection, PoolRef, Scope, api_url_key, web_url_for
from runnerpool.github.credentials import teardown_client
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.route import Route
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.connection import ActionsConnection, from_rest
from runnerpool.scaleset.wire import Wire

__all__ = ["MAX_CLIENTS", "RestClients", "ScaleSetClients", "config_url"]

#: At most this many scale set clients are kept, the least recently used dropped first.
MAX_CLIENTS = 4096


class RestClients(Protocol):
    """The slice of ``ClientCache`` used: the pool's REST client."""

    def get(
        self,
        namespace: str,
        secret_name: str,
        base_url: str | None = None,
        connection: Connection | None = None,
    ) -> GitHubClient: ...


@runtime_checkable
class _Routed(Protocol):
    """A REST client that says which CA bundle and proxy its calls take (``PyGithubClient``)."""

    @property
    def route(self) -> Route: ...


def config_url(pool: PoolRef) -> str:
    """The URL the scale set registers with: the scope's web page on the pool's GitHub."""
    return pool.scope.html_url(web_url_for(pool.api_url))


_Key = tuple[str, str, str, Scope, Connection | None]


def _key(pool: PoolRef) -> _Key:
    return (
        pool.namespace,
        pool.credential_secret_name,
        api_url_key(pool.api_url),
        pool.scope,
        pool.connection,
    )


@dataclass(frozen=True)
class _Entry:
    rest: GitHubClient
    client: ScaleSetClient


class ScaleSetClients:
    """Thread-safe; ``wire``: makes the transport of each new client (tests inject a clock or
    sleeps through it); ``hosts``: ``--github-api-host``'s ``HOST:PORT`` values."""

    def __init__(
        self,
        rest: RestClients,
        *,
        wire: Callable[[], Wire] = Wire,
        max_entries: int = MAX_CLIENTS,
        hosts: Iterable[str] = (),
    ) -> None:
        self._rest = rest
        self._wire = wire
        self._hosts = tuple(hosts)
        self._max = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, pool: PoolRef, *, tearing_down: bool = False) -> ScaleSetClient:
        """The pool's client; raises what ``ClientCache.get`` raises for its Secret.

        ``tearing_down``: for deleting a deleted pool's scale set, built on the last REST client
        that worked for the pool when its Secret or connection config is gone
        (``credentials.teardown_client``: a namespace being deleted takes them along)."""
        if tearing_down:
            rest = teardown_client(self._rest, pool)
        else:
            rest = self._rest.get(pool.namespace, pool.credential_secret_name, pool.api_url, pool.connection)
        key = _key(pool)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.rest is rest:
                self._entries.move_to_end(key)
                return entry.client
            wire = self._wire()
            if isinstance(rest, _Routed):
                wire.take_route(rest.route)
            connection = ActionsConnection(
                pool.api_url, config_url(pool), from_rest(rest, pool.scope), wire, hosts=self._hosts
            )
            client = ScaleSetClient(connection, wire)
            self._entries[key] = _Entry(rest, client)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)  # in-flight calls keep their client alive
            return client
