"""Where runners register in the fake: an organization, a repository or an enterprise.

Its own module because both the fake's state (`state.py`) and the JSON it shows for jobs
(`jobs.py`) name scopes, and `state.py` imports `jobs.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["Scope", "ScopeKind"]

ScopeKind = Literal["org", "repo", "enterprise"]


@dataclass(frozen=True)
class Scope:
    """An organization (``octo-org``), a repository (``octo/hello``) or an enterprise
    (``enterprises/big-corp``, as config.sh's URL names it).

    GitHub compares names case-insensitively, so `key` is what identifies a
    scope, while `name` keeps the spelling it was created with.
    """

    kind: ScopeKind
    name: str

    @classmethod
    def parse(cls, value: str | Scope) -> Scope:
        """Accept ``org``, ``owner/repo`` or the ``https://github.com/...`` URL config.sh gets."""
        if isinstance(value, Scope):
            return value
        text = value.strip()
        if "://" in text:
            text = urlsplit(text).path
        text = text.strip("/").removesuffix(".git")
        parts = text.split("/")
        if len(parts) == 2 and parts[0] == "enterprises" and parts[1]:
            return cls("enterprise", parts[1])  # GitHub reserves "enterprises" as an owner
        if len(parts) == 1 and parts[0]:
            return cls("org", parts[0])
        if len(parts) == 2 and all(parts):
            return cls("repo", text)
        raise ValueError(f"not an organization or owner/repo: {value!r}")

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.name.lower())

    @property
    def api_path(self) -> str:
        prefixes = {"org": "/orgs/", "repo": "/repos/", "enterprise": "/enterprises/"}
        return prefixes[self.kind] + self.name

    def __str__(self) -> str:
        return self.name
