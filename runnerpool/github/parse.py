"""GitHub's documented answers turned into ``runnerpool.github.types``, or ``MalformedResponse``.

Validated here, field by field, so that a half-understood answer fails loudly at the client
instead of as a ``None`` deep in a caller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from runnerpool.github.errors import MalformedResponse
from runnerpool.github.types import JitConfig, RegistrationToken, Runner, RunnerGroup, header

__all__ = [
    "next_link",
    "parse_jitconfig",
    "parse_member",
    "parse_runner",
    "parse_runner_group",
    "parse_time",
    "parse_token",
    "structured",
]

_LINK_RE = re.compile(r'<(?P<url>[^>]+)>\s*;\s*rel="(?P<rel>[^"]+)"')


def parse_time(value: Any, what: str) -> datetime:
    if not isinstance(value, str):
        raise MalformedResponse(f"{what}: expires_at missing or not a string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedResponse(f"{what}: expires_at is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise MalformedResponse(f"{what}: expires_at has no time zone")
    return parsed.astimezone(UTC)


def parse_token(data: Any, what: str) -> RegistrationToken:
    if not isinstance(data, dict):
        raise MalformedResponse(f"{what}: expected a JSON object")
    token = data.get("token")
    if not isinstance(token, str) or not token:
        raise MalformedResponse(f"{what}: token missing or empty")
    return RegistrationToken(token=token, expires_at=parse_time(data.get("expires_at"), what))


def parse_jitconfig(data: Any, what: str) -> JitConfig:
    """``generate-jitconfig``'s 201: ``{"runner": {...}, "encoded_jit_config": "..."}``."""
    if not isinstance(data, dict):
        raise MalformedResponse(f"{what}: expected a JSON object")
    encoded = data.get("encoded_jit_config")
    if not isinstance(encoded, str) or not encoded:
        raise MalformedResponse(f"{what}: encoded_jit_config missing or empty")
    runner = parse_runner(data.get("runner"), what)
    return JitConfig(runner_id=runner.id, encoded=encoded)


def parse_runner(item: Any, what: str) -> Runner:
    if not isinstance(item, dict):
        raise MalformedResponse(f"{what}: runner entry is not an object")
    runner_id = item.get("id")
    name = item.get("name")
    status = item.get("status")
    busy = item.get("busy")
    labels = item.get("labels")
    if not isinstance(runner_id, int) or isinstance(runner_id, bool):
        raise MalformedResponse(f"{what}: runner id missing or not an integer")
    if not isinstance(name, str) or not isinstance(status, str) or not isinstance(busy, bool):
        raise MalformedResponse(f"{what}: runner {runner_id} lacks name, status or busy")
    if not isinstance(labels, list):
        raise MalformedResponse(f"{what}: runner {runner_id} labels is not a list")
    names: list[str] = []
    for label in labels:
        label_name = label.get("name") if isinstance(label, dict) else None
        if not isinstance(label_name, str):
            raise MalformedResponse(f"{what}: runner {runner_id} has a label without a name")
        names.append(label_name)
    return Runner(id=runner_id, name=name, status=status, busy=busy, labels=tuple(names))


def parse_runner_group(item: Any, what: str) -> RunnerGroup:
    """GitHub documents ``id`` as a number; a group id is a whole one."""
    if not isinstance(item, dict):
        raise MalformedResponse(f"{what}: runner group entry is not an object")
    group_id, name, visibility, default = (item.get(k) for k in ("id", "name", "visibility", "default"))
    if isinstance(group_id, float) and group_id.is_integer():
        group_id = int(group_id)
    if not isinstance(group_id, int) or isinstance(group_id, bool):
        raise MalformedResponse(f"{what}: runner group id missing or not an integer")
    if not isinstance(name, str) or not isinstance(visibility, str):
        raise MalformedResponse(f"{what}: runner group {group_id} lacks name or visibility")
    allows_public = item.get("allows_public_repositories") is not False
    return RunnerGroup(
        id=group_id,
        name=name,
        visibility=visibility,
        default=default is True,
        allows_public=allows_public,
        inherited=item.get("inherited") is True,
    )


def parse_public(item: Any, what: str) -> bool:
    """Whether a repository object says the repository is public (``visibility``, or on a
    server without it ``private``); ``internal`` is not public."""
    if not isinstance(item, dict):
        raise MalformedResponse(f"{what}: the repository is not an object")
    visibility, private = item.get("visibility"), item.get("private")
    if isinstance(visibility, str):
        return visibility == "public"
    if isinstance(private, bool):
        return not private
    raise MalformedResponse(f"{what}: the repository says neither its visibility nor whether it is private")


def parse_member(item: Any, what: str, key: str) -> str:
    """One repository (``full_name``) or organization (``login``) a runner group admits."""
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, str) or not value:
        raise MalformedResponse(f"{what}: an entry without {key}")
    return value


def next_link(headers: Mapping[str, Any]) -> str | None:
    link = header(headers, "link")
    if not link:
        return None
    for match in _LINK_RE.finditer(link):
        if match.group("rel") == "next":
            return match.group("url")
    return None


def structured(body: str) -> Any:
    """Read a body as PyGithub would: JSON, or non-JSON text wrapped as ``{"data": text}``.

    Text that starts like JSON but does not parse is a broken answer, not an HTML error page,
    so it raises (``_call`` turns that into ``MalformedResponse``).
    """
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        if body.lstrip().startswith(("{", "[")):
            raise
        return {"data": body}
