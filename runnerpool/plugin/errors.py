"""What the plugin says when it cannot do its job: what failed, and what to change.

Every failure the user can fix (a permission, a missing or wrong credential, GitHub out of
reach) ends as a ``PluginError`` whose message names the fix; ``main`` prints it and exits 1.
Messages never carry a credential: they come from the operator's credential and GitHub
errors, which name keys and HTTP statuses only, and from the API server's refusals.
"""

from __future__ import annotations

import re

from runnerpool.domain import Scope
from runnerpool.github.errors import BadCredentials, GitHubError, NotFound, RateLimited, Unavailable

__all__ = ["TENANT_ROLES", "PluginError", "forbidden", "github_failed"]

#: Where the tenant ClusterRoles live (aggregated into the built-in admin, edit and view).
TENANT_ROLES = "deploy/rbac/tenant_roles.yaml"


class PluginError(Exception):
    """A failure to report in one message; ``main`` prints ``error: <message>`` and exits 1."""


_USER = re.compile(r'User "([^"]+)"')
_SERVICE_ACCOUNT = "system:serviceaccount:"


def _subject(server_message: str) -> str:
    """``--user=NAME`` or ``--serviceaccount=NS:NAME`` for the one the API server refused."""
    found = _USER.search(server_message)
    if found is None:
        return "--user=YOU"
    user = found.group(1)
    if user.startswith(_SERVICE_ACCOUNT):
        return f"--serviceaccount={user.removeprefix(_SERVICE_ACCOUNT)}"
    return f"--user={user}"


def _grant(verb: str, resource: str, namespace: str | None, subject: str) -> str:
    """Which role grants ``verb`` on ``resource``, and the RoleBinding that hands it out."""
    role = "view" if verb in ("get", "list", "watch") and resource != "secrets" else "edit"
    if namespace is None:
        bind = (
            f"kubectl create clusterrolebinding runnerpool-{role} --clusterrole={role} {subject} (or pass -n)"
        )
    else:
        bind = f"kubectl create rolebinding runnerpool-{role} --clusterrole={role} {subject} -n {namespace}"
    if resource == "secrets":
        return (
            "the credential Secret holds the pool's GitHub credential, so only the built-in edit "
            "and admin ClusterRoles grant it (view and runnerpool-operator-tenant-view do not, on "
            f"purpose): {bind}"
        )
    return (
        f"the built-in {role} ClusterRole grants it (it aggregates runnerpool-operator-tenant-{role} "
        f"from {TENANT_ROLES}): {bind}"
    )


def forbidden(verb: str, resource: str, namespace: str | None, server_message: str) -> PluginError:
    """The API server refused ``verb`` on ``resource``: say which permission and who grants it."""
    place = f'in namespace "{namespace}"' if namespace else "in all namespaces"
    return PluginError(
        f"not allowed to {verb} {resource} {place} ({server_message.strip()}); "
        + _grant(verb, resource, namespace, _subject(server_message))
    )


def github_failed(err: GitHubError, *, api_url: str, scope: Scope, secret: str) -> PluginError:
    """A GitHub call failed: which credential or address to look at."""
    if isinstance(err, Unavailable):
        return PluginError(
            f"cannot reach GitHub at {api_url} ({err.message}); check the address (the pool's "
            "spec.githubApiUrl, or --github-api-url for pools on the operator's default), a proxy "
            "(HTTPS_PROXY) and the network"
        )
    if isinstance(err, BadCredentials):
        return PluginError(
            f"GitHub refused the credential in Secret {secret} ({err.message}); put a working "
            "personal access token (key 'token') or GitHub App keys into the Secret"
        )
    if isinstance(err, NotFound):
        return PluginError(
            f"GitHub at {api_url} does not know {scope} ({err.message}); check the pool's scope "
            f"and that the credential in Secret {secret} can see it"
        )
    if isinstance(err, RateLimited):
        wait = f" for {err.retry_after:.0f}s" if err.retry_after is not None else ""
        return PluginError(
            f"GitHub rate-limits the credential in Secret {secret}{wait} ({err.message}); "
            "try again later (the operator shares this budget)"
        )
    return PluginError(f"GitHub at {api_url} answered {err.reason}: {err.message}")
