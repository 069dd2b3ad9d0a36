"""The scale set calls made with the admin token: runner groups, scale sets, JIT configs and
runners (``client.go`` of actions/scaleset), one method per call, typed in and out.

Why synchronous: the operator's controllers are threads, and the scale-set listeners (tasks on
the poll loop since issue 34's benchmark) make these calls on their shared call threads; only
the long poll, the one call made 20 times a second at 1,000 sessions, is awaited on the loop.
Each method is one logical call: its answer is checked against the status the service
documents for it, and anything else becomes a ``GitHubError`` subclass (``errors``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from runnerpool.scaleset.connection import ActionsConnection, Admin
from runnerpool.scaleset.errors import (
    RunnerGroupNotFound,
    ScaleSetError,
    ScaleSetNotFound,
    error_for,
    malformed,
)
from runnerpool.scaleset.types import JitConfig, RunnerGroup, RunnerReference, RunnerScaleSet
from runnerpool.scaleset.wire import Wire, json_body

__all__ = ["AGENTS", "SCALE_SETS", "ScaleSetClient", "parse"]

M = TypeVar("M", bound=BaseModel)

SCALE_SETS = "_apis/runtime/runnerscalesets"
AGENTS = "_apis/distributedtask/pools/0/agents"
_GROUPS = "_apis/runtime/runnergroups/"


def parse(model: type[M], data: Any, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise malformed(what, f"not a {model.__name__}: {exc.error_count()} problems") from None


def _listed(model: type[M], data: Any, what: str) -> list[M]:
    """``{"count": n, "value": [...]}``, the service's list envelope. ``count: 0`` with a null
    or absent ``value`` is an empty list, as GitHub's Go client reads it (it looks at ``count``
    first): refused as malformed, a pool whose scale set is still to be made never got one."""
    value = data.get("value") if isinstance(data, dict) else None
    if value is None and isinstance(data, dict) and data.get("count") == 0:
        return []
    if not isinstance(value, list):
        raise malformed(what, "no value list in the answer")
    return [parse(model, item, what) for item in value]


class ScaleSetClient:
    """One scope's scale set calls; thread-safe (the connection trades tokens under a lock)."""

    def __init__(self, connection: ActionsConnection, wire: Wire) -> None:
        self.connection = connection
        self.wire = wire

    def call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        ok: Collection[int] = (200,),
        body: Any = None,
        query: dict[str, str | int] | None = None,
        not_found: type[ScaleSetError] | None = None,
    ) -> Any:
        """One Actions service call with the admin token; the JSON answer (None for 202/204).
        ``not_found``: the error a 404 means on this path, unless its exception name says more
        (``AgentNotFoundException`` stays ``RunnerNotFound``). A 401 is GitHub refusing the
        admin token (revoked before it expired): the call is made once more with a new one,
        and a second 401 is ``BadCredentials``."""
        admin = self.connection.admin()
        answer = self._send(admin, method, path, what=what, body=body, query=query)
        if answer.status_code == 401:
            admin = self.connection.renew(admin)
            answer = self._send(admin, method, path, what=what, body=body, query=query)
        status = answer.status_code
        if status not in ok:
            error = error_for(what, status, answer.content, answer.headers)
            if status == 404 and not_found is not None and type(error) is ScaleSetError:
                raise not_found(str(error), status=404, type_name=error.type_name)
            raise error
        if status in (202, 204) or not answer.content:
            return None
        try:
            return json_body(answer.content)
        except ValueError:
            raise malformed(what, "body is not JSON") from None

    def _send(
        self,
        admin: Admin,
        method: str,
        path: str,
        *,
        what: str,
        body: Any,
        query: dict[str, str | int] | None,
    ) -> requests.Response:
        return self.wire.send(
            method,
            admin.url(path, **(query or {})),
            what=what,
            headers={"Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"},
            body=body,
        )

    # -- runner groups and scale sets ----------------------------------------------------------

    def runner_group(self, name: str) -> RunnerGroup:
        """The group by name (``default`` is every scope's); ``RunnerGroupNotFound`` if none."""
        what = "GET runnergroups"
        groups = _listed(RunnerGroup, self.call("GET", _GROUPS, what=what, query={"groupName": name}), what)
        if not groups:
            raise RunnerGroupNotFound(f"{what}: no runner group named {name!r}", status=200)
        if len(groups) > 1:
            raise malformed(what, f"{len(groups)} runner groups named {name!r}")
        return groups[0]

    def scale_set(self, runner_group_id: int, name: str) -> RunnerScaleSet | None:
        """The scale set of that name in the group (names are unique within a group), or None."""
        what = "GET runnerscalesets by name"
        query: dict[str, str | int] = {"runnerGroupId": runner_group_id, "name": name}
        found = _listed(RunnerScaleSet, self.call("GET", SCALE_SETS, what=what, query=query), what)
        if len(found) > 1:
            raise malformed(what, f"{len(found)} scale sets named {name!r}")
        return found[0] if found else None

    def scale_set_by_id(self, scale_set_id: int) -> RunnerScaleSet:
        what = "GET runnerscalesets/{id}"
        data = self.call("GET", f"{SCALE_SETS}/{scale_set_id}", what=what, not_found=ScaleSetNotFound)
        return parse(RunnerScaleSet, data, what)

    def create_scale_set(self, wanted: RunnerScaleSet) -> RunnerScaleSet:
        what = "POST runnerscalesets"
        return parse(RunnerScaleSet, self.call("POST", SCALE_SETS, what=what, body=wanted.body()), what)

    def update_scale_set(self, scale_set_id: int, wanted: RunnerScaleSet) -> RunnerScaleSet:
        what = "PATCH runnerscalesets/{id}"
        data = self.call(
            "PATCH", f"{SCALE_SETS}/{scale_set_id}", what=what, body=wanted.body(), not_found=ScaleSetNotFound
        )
        return parse(RunnerScaleSet, data, what)

    def delete_scale_set(self, scale_set_id: int) -> None:
        """204; ``ScaleSetNotFound`` when it is gone already (the caller's deletion is done)."""
        what = "DELETE runnerscalesets/{id}"
        self.call("DELETE", f"{SCALE_SETS}/{scale_set_id}", what=what, ok=(204,), not_found=ScaleSetNotFound)

    # -- runners -------------------------------------------------------------------------------

    def generate_jit_config(self, scale_set_id: int, name: str, work_folder: str = "_work") -> JitConfig:
        """A runner of the scale set and its config (a secret); ``RunnerExists`` for a name in use."""
        what = "POST runnerscalesets/{id}/generatejitconfig"
        data = self.call(
            "POST",
            f"{SCALE_SETS}/{scale_set_id}/generatejitconfig",
            what=what,
            body={"name": name, "workFolder": work_folder},
            not_found=ScaleSetNotFound,
        )
        return parse(JitConfig, data, what)

    def runner(self, runner_id: int) -> RunnerReference:
        """``RunnerNotFound`` when GitHub has no such runner (any more)."""
        what = "GET agents/{id}"
        return parse(RunnerReference, self.call("GET", f"{AGENTS}/{runner_id}", what=what), what)

    def runner_by_name(self, name: str) -> RunnerReference | None:
        what = "GET agents by name"
        found = _listed(RunnerReference, self.call("GET", AGENTS, what=what, query={"agentName": name}), what)
        if len(found) > 1:
            raise malformed(what, f"{len(found)} runners named {name!r}")
        return found[0] if found else None

    def remove_runner(self, runner_id: int) -> None:
        """204; ``JobStillRunning`` while it runs a job (leave it), ``RunnerNotFound`` if gone."""
        self.call("DELETE", f"{AGENTS}/{runner_id}", what="DELETE agents/{id}", ok=(204,))
