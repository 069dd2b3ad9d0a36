"""GitHub behind ``responses``, shared by the tests that need runners on the other side.

``RunnerEndpoint`` serves one scope's runner listing (its ``name`` filter included) and
deletion the way GitHub does: ``per_page`` capped at 100, ``Link`` pages, an ``ETag`` per page
and a bodiless 304 for a matching ``If-None-Match``, 204/404/422 for deletes, and optional
``x-ratelimit-*`` headers.
Shapes follow tests/data/github (GitHub's REST description).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client

from runnerpool.github.credentials import ClientCache, client_from_secret_data
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import ClientOptions
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.kube import Kube
from tests.pools import LiveReader

__all__ = [
    "API",
    "FAST",
    "RunnerEndpoint",
    "RunnerGroupsEndpoint",
    "fast_client_factory",
    "gh",
    "github",
    "runner_json",
    "secret_reader",
]

API = "https://api.github.com"

#: No waits anywhere: no backoff between transport retries, no request spacing.
FAST = ClientOptions(timeout=5, backoff_factor=0, seconds_between_requests=None, seconds_between_writes=None)


def gh(path: str, tail: str = "") -> re.Pattern[str]:
    """PyGithub spells the default port out (``api.github.com:443``); match either form."""
    return re.compile(r"https://api\.github\.com(:443)?" + re.escape(path) + tail + r"(\?.*)?$")


def fast_client_factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
    return client_from_secret_data(data, base_url, FAST)


def secret_reader(api_client: client.ApiClient) -> Callable[[str, str], dict[str, str] | None]:
    """Credential Secrets read live and decoded, as the operator's informer-backed reader does."""
    reader = LiveReader(api_client)

    def read(namespace: str, name: str) -> dict[str, str] | None:
        secret = reader.get_secret(namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    return read


def live_clients(api_client: client.ApiClient, cache: type[ClientCache] = ClientCache) -> ClientCache:
    return cache(secret_reader(api_client), factory=fast_client_factory)


def runner_managers(api_client: client.ApiClient) -> Iterator[RunnerManagers]:
    """The real runner managers on ``live_clients`` (they deregister for the finalizer); their
    rounds run only when a test calls ``sync()``. For a fixture: ``yield from``."""
    managers = RunnerManagers(
        LiveReader(api_client),
        live_clients(api_client),
        KubePods(Kube(api_client)),
        lambda key: None,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started
    )
    yield managers
    managers.stop_all()


def runner_json(
    id_: int, name: str, labels: list[str], *, busy: bool = False, status: str = "online"
) -> dict[str, Any]:
    return {
        "id": id_,
        "name": name,
        "os": "linux",
        "status": status,
        "busy": busy,
        "ephemeral": True,
        "labels": [{"id": i, "name": label, "type": "custom"} for i, label in enumerate(labels)],
    }


@pytest.fixture
def github() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@dataclass
class RunnerEndpoint:
    """One scope's runners; ``scope_path`` is ``/orgs/<org>`` or ``/repos/<owner>/<repo>``."""

    mock: responses.RequestsMock
    scope_path: str = "/orgs/octo-org"
    page_size: int = 100
    runners: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Runners that took a job since they were listed: their delete answers 422.
    busy_on_delete: set[int] = field(default_factory=set)
    #: Runners GitHub removed since they were listed (an ephemeral one after its job): 404.
    gone_on_delete: set[int] = field(default_factory=set)
    #: (remaining, limit, reset) sent as x-ratelimit-* on every answer.
    rate_limit: tuple[int, int, int] | None = None
    #: (page, status) per listing request, in order.
    listed: list[tuple[int, int]] = field(default_factory=list)
    #: (runner id, status) per delete request, in order.
    deleted: list[tuple[int, int]] = field(default_factory=list)
    #: Request headers of every listing request.
    list_headers: list[Mapping[str, str]] = field(default_factory=list)
    #: Called with the page number after each listing answer: runners that come and go
    #: while a listing's pages are read.
    after_page: Callable[[int], None] | None = None
    #: (name, status) per lookup of one runner by name (``?name=``, not a listing), in order.
    looked_up: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = f"{self.scope_path}/actions/runners"
        self.mock.add_callback(responses.GET, gh(base), callback=self._list)
        self.mock.add_callback(responses.DELETE, gh(base, r"/\d+"), callback=self._delete)

    def add(
        self, id_: int, name: str, labels: list[str], *, busy: bool = False, status: str = "online"
    ) -> None:
        self.runners[id_] = runner_json(id_, name, labels, busy=busy, status=status)

    def _headers(self) -> dict[str, str]:
        if self.rate_limit is None:
            return {}
        remaining, limit, reset = self.rate_limit
        return {
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-limit": str(limit),
            "x-ratelimit-reset": str(reset),
            "x-ratelimit-resource": "core",
        }

    def _list(self, request: Any) -> tuple[int, dict[str, str], str]:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.url).query)
        page = int(query.get("page", ["1"])[0])
        asked = query.get("per_page", ["30"])[0]
        # GitHub caps per_page at 100; page_size lets a test get pages from a few runners.
        per_page = min(int(asked), 100, self.page_size)
        ordered = [self.runners[i] for i in sorted(self.runners)]
        named = query.get("name", [None])[0]
        if named is not None:  # GitHub's filter: the runners of that name (any case)
            ordered = [runner for runner in ordered if runner["name"].lower() == named.lower()]
        body = json.dumps(
            {"total_count": len(ordered), "runners": ordered[(page - 1) * per_page : page * per_page]}
        )
        headers = {**self._headers(), "ETag": f'W/"{hashlib.sha256(body.encode()).hexdigest()[:20]}"'}
        if page * per_page < len(ordered):
            headers["Link"] = (
                f'<{API}{self.scope_path}/actions/runners?per_page={asked}&page={page + 1}>; rel="next"'
            )
        status = 304 if request.headers.get("If-None-Match") == headers["ETag"] else 200
        if named is not None:
            self.looked_up.append((named, status))
        else:
            self.list_headers.append(dict(request.headers))
            self.listed.append((page, status))
            if self.after_page is not None:
                self.after_page(page)
        return (
            (status, headers, "")
            if status == 304
            else (status, {**headers, "content-type": "application/json"}, body)
        )

    def _delete(self, request: Any) -> tuple[int, dict[str, str], str]:
        runner_id = int(request.url.rsplit("/", 1)[1])
        runner = self.runners.get(runner_id)
        if runner is None or runner_id in self.gone_on_delete:
            status, body = 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        elif runner["busy"] or runner_id in self.busy_on_delete:
            status = 422
            body = {
                "message": f'Bad request - Runner "{runner["name"]}" is still running a job"',
                "documentation_url": "https://docs.github.com/rest/actions/self-hosted-runners",
            }
        else:
            del self.runners[runner_id]
            self.deleted.append((runner_id, 204))
            return 204, self._headers(), ""
        self.deleted.append((runner_id, status))
        return status, {**self._headers(), "content-type": "application/json"}, json.dumps(body)


@dataclass
class RunnerGroupsEndpoint:
    """One organization's or enterprise's runner groups (``scope_path`` ``/orgs/<org>`` or
    ``/enterprises/<slug>``), in the description's shapes (tests/data/github/*runner-group*):
    ``per_page`` capped at 100, ``Link`` pages, an ``ETag`` per page and a bodiless 304 for a
    matching ``If-None-Match``; members of a ``selected`` group under ``/repositories``
    (organization) or ``/organizations`` (enterprise); 404 for an unknown group. Each group
    has "Allow public repositories" off (GitHub's default), so a check reads the repositories
    a pool serves (``GET /repos/{owner}/{repo}``): private unless in ``public``."""

    mock: responses.RequestsMock
    scope_path: str = "/orgs/octo-org"
    #: name -> (id, visibility, members: full names or organization logins)
    groups: dict[str, tuple[int, str, list[str]]] = field(default_factory=dict)
    #: (path, status) of every request for groups and members, in order.
    answered: list[tuple[str, int]] = field(default_factory=list)
    #: The public repositories (``owner/name``); the others are private.
    public: set[str] = field(default_factory=set)
    #: (path, status) of every read of a repository.
    repositories_read: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = f"{self.scope_path}/actions/runner-groups"
        self.mock.add_callback(responses.GET, gh(base), callback=self._groups)
        self.mock.add_callback(
            responses.GET, gh(base, r"/\d+/(repositories|organizations)"), callback=self._members
        )
        self.mock.add_callback(responses.GET, gh("/repos/", r"[^/]+/[^/?]+"), callback=self._repository)

    @property
    def _enterprise(self) -> bool:
        return self.scope_path.startswith("/enterprises/")

    def add(self, name: str, id_: int, visibility: str = "all", members: list[str] | None = None) -> None:
        self.groups[name] = (id_, visibility, list(members or []))

    def _group_json(self, name: str, id_: int, visibility: str) -> dict[str, Any]:
        url = f"{API}{self.scope_path}/actions/runner_groups/{id_}"
        out: dict[str, Any] = {
            "id": id_,
            "name": name,
            "visibility": visibility,
            "default": id_ == 1,
            "runners_url": f"{url}/runners",
            "allows_public_repositories": False,
            "restricted_to_workflows": False,
            "selected_workflows": [],
            "workflow_restrictions_read_only": False,
        }
        if visibility == "selected":
            member = "organizations" if self._enterprise else "repositories"
            out[f"selected_{member}_url"] = f"{url}/{member}"
        return out

    def _groups(self, request: Any) -> tuple[int, dict[str, str], str]:
        items = [
            self._group_json(name, i, v)
            for name, (i, v, _m) in sorted(self.groups.items(), key=lambda g: g[1][0])
        ]
        return self._page(request, "runner_groups", items)

    def _members(self, request: Any) -> tuple[int, dict[str, str], str]:
        path = urllib.parse.urlsplit(request.url).path
        group_id = int(path.rsplit("/", 2)[1])
        found = next((m for i, _v, m in self.groups.values() if i == group_id), None)
        if found is None:
            self.answered.append((path, 404))
            return (
                404,
                {},
                json.dumps({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
            )
        if self._enterprise:
            items = [{"login": login, "id": n, "url": f"{API}/orgs/{login}"} for n, login in enumerate(found)]
            return self._page(request, "organizations", items)
        items = [{"id": n, "name": full.split("/")[1], "full_name": full} for n, full in enumerate(found)]
        return self._page(request, "repositories", items)

    def _repository(self, request: Any) -> tuple[int, dict[str, str], str]:
        path = urllib.parse.urlsplit(request.url).path
        full = path.removeprefix("/repos/")
        public = full in self.public
        body = json.dumps(
            {"full_name": full, "private": not public, "visibility": "public" if public else "private"}
        )
        etag = f'W/"{hashlib.sha256(body.encode()).hexdigest()[:20]}"'
        status = 304 if request.headers.get("If-None-Match") == etag else 200
        self.repositories_read.append((path, status))
        if status == 304:
            return 304, {"ETag": etag}, ""
        return 200, {"ETag": etag, "content-type": "application/json"}, body

    def _page(self, request: Any, key: str, items: list[dict[str, Any]]) -> tuple[int, dict[str, str], str]:
        split = urllib.parse.urlsplit(request.url)
        query = urllib.parse.parse_qs(split.query)
        page = int(query.get("page", ["1"])[0])
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        body = json.dumps({"total_count": len(items), key: items[(page - 1) * per_page : page * per_page]})
        headers = {"ETag": f'W/"{hashlib.sha256(body.encode()).hexdigest()[:20]}"'}
        if page * per_page < len(items):
            headers["Link"] = f'<{API}{split.path}?per_page={per_page}&page={page + 1}>; rel="next"'
        status = 304 if request.headers.get("If-None-Match") == headers["ETag"] else 200
        self.answered.append((split.path, status))
        if status == 304:
            return 304, headers, ""
        return 200, {**headers, "content-type": "application/json"}, body
