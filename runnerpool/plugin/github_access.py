"""A pool's GitHub, reached as the operator reaches it: its credential Secret, its API URL.

The Secret is read with the user's permissions and turned into a client by the operator's own
``runnerpool.github.credentials`` (PAT or GitHub App, github.com or GHES), so a Secret the
operator cannot use fails here with the operator's message. The API URL is the pool's
``spec.githubApiUrl``, else the operator's default, which the plugin cannot read from the
cluster: ``--github-api-url`` (or ``RUNNERPOOL_GITHUB_API_URL``) gives it for pools on a GHES
default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from runnerpool import api
from runnerpool.domain import Scope, pool_key
from runnerpool.github.credentials import ClientCache, CredentialError, client_from_secret_data
from runnerpool.github.errors import GitHubError
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import ClientOptions
from runnerpool.github.types import Runner
from runnerpool.plugin.cluster import Cluster
from runnerpool.plugin.errors import PluginError, github_failed
from runnerpool.runners.listing import pool_runners

__all__ = ["USER_AGENT", "PoolGitHub"]

USER_AGENT = "kubectl-runnerpool"
#: A person waits for the answer: fail after one quick retry rather than the operator's two.
_OPTIONS = ClientOptions(timeout=10, retries=1, user_agent=USER_AGENT)

T = TypeVar("T")


@dataclass(frozen=True)
class PoolGitHub:
    """The pool's GitHub client, and what to name when a call fails."""

    github: GitHubClient
    scope: Scope
    api_url: str
    secret: str

    @classmethod
    def of(cls, cluster: Cluster, pool: api.RunnerPool, url: str) -> PoolGitHub:
        """``url``: the pool's API URL, resolved (``GitHubSettings.api_url_of``)."""
        secret = pool.spec.credential_secret_name
        cache = ClientCache(
            cluster.secret_data,
            factory=lambda data, base_url: client_from_secret_data(data, base_url, _OPTIONS),
            read_config_map=cluster.config_map_data,
        )
        try:
            # The pool's CA bundle and proxy, as the operator uses them (docs/ghes-and-proxies.md).
            github = cache.get(pool.namespace, secret, url, pool.spec.connection)
        except CredentialError as err:
            raise PluginError(
                f"the pool's credential Secret (spec.credentialSecretName) is not usable: {err.message}"
            ) from None
        return cls(github, pool.scope, url, pool_key(pool.namespace, secret))

    def call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except GitHubError as err:
            raise github_failed(err, api_url=self.api_url, scope=self.scope, secret=self.secret) from None

    def pool_runners(self, pool: api.RunnerPool) -> list[Runner]:
        """One listing of the scope; the pool's runners out of it (its ``<namespace>/<pool>`` label)."""
        return pool_runners(
            self.call(lambda: self.github.list_runners(self.scope)), pool.namespace, pool.name
        )
