"""Which enterprises, organizations and repositories the pools of which namespaces may name.

One ``--allow`` flag per rule, repeatable::

    --allow 'NAMESPACE_GLOB=KIND:GLOB[,KIND:GLOB...]'

``KIND`` is ``enterprise``, ``org`` or ``repo`` (``repo:OWNER/NAME``). Globs are shell-style
(``*``, ``?``, ``[...]``); namespaces match case-sensitively (they are lower-case anyway),
GitHub names case-insensitively, as GitHub treats them. For example::

    --allow 'team-a=org:acme,repo:acme-labs/tools'
    --allow 'team-*=repo:acme/team-*'
    --allow 'platform=enterprise:big-corp,org:*'

A pool may register where any rule whose namespace glob matches its namespace allows it:
an ``org:`` entry covers the organization's pools and those of each of its repositories
(meows' organization rule), a ``repo:`` entry one repository's pools, an ``enterprise:``
entry the enterprise's pools. **No ``--allow`` at all allows every pool everything** (the
behaviour before allow-lists existed); once there is one, a namespace that no rule names may
register nowhere.

Kept free of everything but the shared vocabulary so that the settings can parse the flag.
"""

from __future__ import annotations

import fnmatch
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from runnerpool.domain import Scope

__all__ = [
    "ALLOW_FLAG",
    "DEFAULT_GITHUB_HOSTS",
    "GITHUB_HOST_FLAG",
    "AllowList",
    "AllowRule",
    "GitHubHosts",
    "parse_allow_rule",
    "parse_github_host",
    "url_host",
]

ALLOW_FLAG = "--allow"

_KINDS = {"enterprise": "enterprise", "org": "organization", "repo": "repository"}
#: What a glob may hold: GitHub's name characters plus the glob's own.
_NAME_GLOB = re.compile(r"^[A-Za-z0-9._*?\[\]!-]+$")
_NAMESPACE_GLOB = re.compile(r"^[a-z0-9.*?\[\]!-]+$")


@dataclass(frozen=True)
class AllowRule:
    """One ``--allow`` value: a namespace glob and the scopes its pools may name."""

    namespaces: str
    #: (kind, glob) with kind ``enterprise``, ``organization`` or ``repository``; globs lower-cased.
    scopes: tuple[tuple[str, str], ...]

    def applies_to(self, namespace: str) -> bool:
        return fnmatch.fnmatchcase(namespace, self.namespaces)

    def allows(self, scope: Scope) -> bool:
        name = scope.name.lower()
        for kind, glob in self.scopes:
            if kind == scope.kind and fnmatch.fnmatchcase(name, glob):
                return True
            owner = name.partition("/")[0]
            if kind == "organization" and scope.repository is not None and fnmatch.fnmatchcase(owner, glob):
                return True
        return False

    def __str__(self) -> str:
        short = {v: k for k, v in _KINDS.items()}
        return f"{self.namespaces}=" + ",".join(f"{short[k]}:{g}" for k, g in self.scopes)


def parse_allow_rule(text: str) -> AllowRule:
    """``--allow``'s parser: ``ValueError`` (argparse shows it) says what is wrong."""
    namespaces, sep, rest = text.strip().partition("=")
    if not sep or not namespaces:
        raise ValueError(f"{text!r}: expected NAMESPACE_GLOB=KIND:GLOB[,KIND:GLOB...], e.g. team-a=org:acme")
    if not _NAMESPACE_GLOB.match(namespaces):
        raise ValueError(f"{text!r}: {namespaces!r} is not a namespace glob (a-z, 0-9, '-', '.', *, ?, [])")
    scopes: list[tuple[str, str]] = []
    for item in rest.split(","):
        kind, colon, glob = item.strip().partition(":")
        if not colon or kind not in _KINDS:
            raise ValueError(
                f"{text!r}: {item.strip()!r} must be enterprise:GLOB, org:GLOB or repo:OWNER/NAME"
            )
        parts = glob.split("/")
        if len(parts) != (2 if kind == "repo" else 1) or not all(_NAME_GLOB.match(p) for p in parts):
            form = "OWNER/NAME (each a glob)" if kind == "repo" else "one name or glob, without '/'"
            raise ValueError(f"{text!r}: {item.strip()!r}: {kind}: takes {form}")
        scopes.append((_KINDS[kind], glob.lower()))
    return AllowRule(namespaces=namespaces, scopes=tuple(scopes))


@dataclass(frozen=True)
class AllowList:
    """Every ``--allow`` rule; empty allows all."""

    rules: tuple[AllowRule, ...] = ()

    @classmethod
    def of(cls, rules: Iterable[AllowRule] | None) -> AllowList:
        return cls(tuple(rules or ()))

    @property
    def enforced(self) -> bool:
        return bool(self.rules)

    def allows(self, namespace: str, scope: Scope) -> bool:
        return not self.rules or any(r.applies_to(namespace) and r.allows(scope) for r in self.rules)

    def refusal(self, namespace: str, scope: Scope) -> str | None:
        """Why a pool of ``namespace`` may not register at ``scope`` (``None``: it may): the
        message names the setting to change."""
        if self.allows(namespace, scope):
            return None
        rules = [str(r) for r in self.rules if r.applies_to(namespace)]
        said = (
            "no --allow rule names namespace " + namespace
            if not rules
            else (f"the --allow rules for namespace {namespace} ({'; '.join(rules)}) do not include it")
        )
        kind = {"enterprise": "enterprise", "organization": "org", "repository": "repo"}[scope.kind]
        return (
            f"the operator does not let pools of namespace {namespace} register runners at "
            f"{scope.kind} {scope.name}: {said}; ask the operator's administrators to add "
            f"{kind}:{scope.name} to an --allow rule for this namespace (Helm value allow), or "
            "use a scope the namespace is allowed"
        )


# -- which GitHub hosts pools may name ---------------------------------------------------------

GITHUB_HOST_FLAG = "--github-api-host"
#: github.com's REST API: allowed unless the flag says otherwise.
DEFAULT_GITHUB_HOSTS = ("api.github.com",)
_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$")


def _host_port(hostname: str, port: int | None, scheme: str = "https") -> str:
    return f"{hostname.lower()}:{port or (80 if scheme == 'http' else 443)}"


def parse_github_host(text: str) -> str:
    """``--github-api-host``'s parser: ``HOST`` or ``HOST:PORT`` (no scheme, no path)."""
    value = text.strip().lower()
    if not _HOST.match(value):
        raise ValueError(f"{text!r}: expected HOST or HOST:PORT, e.g. ghe.example.com (no https://, no path)")
    host, _, port = value.partition(":")
    return _host_port(host, int(port) if port else None)


def url_host(url: str) -> str:
    """``HOST:PORT`` of an API URL (the port spelled out), as ``GitHubHosts`` compares them."""
    parsed = urllib.parse.urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    return _host_port(parsed.hostname or "", port, parsed.scheme)


@dataclass(frozen=True)
class GitHubHosts:
    """The hosts a pool's ``spec.githubApiUrl`` may name: the operator sends nothing elsewhere.

    A tenant who could name any host could make the operator call its internal services (and
    read their answers back from its pool's conditions) or hold the operator's shared threads
    with a slow server. ``--github-api-url``'s host is always allowed: pools without a URL of
    their own use it.
    """

    hosts: frozenset[str]

    @classmethod
    def of(cls, hosts: Iterable[str] | None, default_api_url: str) -> GitHubHosts:
        chosen = hosts if hosts is not None else DEFAULT_GITHUB_HOSTS
        return cls(frozenset({*(parse_github_host(h) for h in chosen), url_host(default_api_url)}))

    def allows(self, url: str) -> bool:
        return url_host(url) in self.hosts

    def refusal(self, url: str) -> str | None:
        """Why the operator does not call ``url`` (``None``: it does); names the setting."""
        if self.allows(url):
            return None
        return (
            f"the operator calls only the GitHub API hosts it is given, and {url_host(url)} is not "
            f"one of them ({', '.join(sorted(self.hosts))}): use one of those in spec.githubApiUrl, "
            f"or ask the operator's administrators to add it ({GITHUB_HOST_FLAG}, Helm value "
            "githubApiHosts)"
        )
