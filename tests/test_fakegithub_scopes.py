"""The fake GitHub's enterprise runners and runner groups: GitHub's shapes and codes (checked
against the description's extract), and the operator's own client talking to them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from github import Auth

from runnerpool.domain import Scope
from runnerpool.github.groups import RepositoryNotAllowed, RunnerGroups
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.github.types import DeleteOutcome
from tests.github_mocks import FAST
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.schema import validate

SPEC: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "github" / "openapi-enterprise-groups.json").read_text()
)
PAT = "ghp_enterprise_admin"


def _schema(path: str, method: str, status: int) -> dict[str, Any] | None:
    response = SPEC["paths"][path][method]["responses"][str(status)]
    content = response.get("content", {}).get("application/json")
    return None if content is None else content["schema"]


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=["enterprises/big-corp", "octo-org"]) as server:
        yield server


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as http:
        http.headers["Authorization"] = f"token {PAT}"
        yield http


def _checked(answer: requests.Response, path: str, method: str, status: int) -> Any:
    assert answer.status_code == status, answer.text
    schema = _schema(path, method, status)
    if schema is None:
        assert answer.content == b""
        return None
    body = answer.json()
    errors = validate(body, schema)
    assert not errors, "; ".join(errors[:10])
    return body


def test_enterprise_runners_in_githubs_shapes(fake: FakeGitHub, session: requests.Session) -> None:
    base = f"{fake.url}/enterprises/big-corp/actions/runners"
    token = _checked(
        session.post(f"{base}/registration-token"),
        "/enterprises/{enterprise}/actions/runners/registration-token",
        "post",
        201,
    )
    assert len(token["token"]) == 29
    runner_id = fake.register_runner("enterprises/big-corp", "big-1", ["gpu"])
    listed = _checked(session.get(base), "/enterprises/{enterprise}/actions/runners", "get", 200)
    assert [r["name"] for r in listed["runners"]] == ["big-1"]
    path = "/enterprises/{enterprise}/actions/runners/{runner_id}"
    assert _checked(session.get(f"{base}/{runner_id}"), path, "get", 200)["id"] == runner_id
    _checked(session.delete(f"{base}/{runner_id}"), path, "delete", 204)
    assert session.delete(f"{base}/{runner_id}").status_code == 404
    assert fake.runners("enterprises/big-corp") == []


def test_runner_groups_and_who_may_use_them(fake: FakeGitHub, session: requests.Session) -> None:
    fake.add_runner_group("octo-org", "GPU", visibility="selected", members=["octo-org/ml"])
    fake.add_runner_group("enterprises/big-corp", "Shared", visibility="selected", members=["octo-org"])

    org = _checked(
        session.get(f"{fake.url}/orgs/octo-org/actions/runner-groups"),
        "/orgs/{org}/actions/runner-groups",
        "get",
        200,
    )
    assert [(g["id"], g["name"], g["default"]) for g in org["runner_groups"]] == [
        (1, "Default", True),
        (2, "GPU", False),
    ]
    assert org["runner_groups"][1]["selected_repositories_url"].endswith("/runner_groups/2/repositories")
    repos = _checked(
        session.get(f"{fake.url}/orgs/octo-org/actions/runner-groups/2/repositories"),
        "/orgs/{org}/actions/runner-groups/{runner_group_id}/repositories",
        "get",
        200,
    )
    assert [r["full_name"] for r in repos["repositories"]] == ["octo-org/ml"]
    enterprise = _checked(
        session.get(f"{fake.url}/enterprises/big-corp/actions/runner-groups"),
        "/enterprises/{enterprise}/actions/runner-groups",
        "get",
        200,
    )
    shared = enterprise["runner_groups"][1]
    orgs = _checked(
        session.get(f"{fake.url}/enterprises/big-corp/actions/runner-groups/{shared['id']}/organizations"),
        "/enterprises/{enterprise}/actions/runner-groups/{runner_group_id}/organizations",
        "get",
        200,
    )
    assert [o["login"] for o in orgs["organizations"]] == ["octo-org"]
    assert session.get(f"{fake.url}/orgs/octo-org/actions/runner-groups/99/repositories").status_code == 404
    assert session.get(f"{fake.url}/orgs/nobody/actions/runner-groups").status_code == 404


def test_an_app_installation_is_refused_on_enterprise_endpoints(
    fake: FakeGitHub, session: requests.Session
) -> None:
    fake.add_installation(42)
    minted = fake.api_installation_token(42, "7", {})
    assert minted is not None
    answer = session.get(
        f"{fake.url}/enterprises/big-corp/actions/runners", headers={"Authorization": f"token {minted.token}"}
    )
    assert answer.status_code == 403
    assert answer.json()["message"] == "Resource not accessible by integration"
    assert session.get(f"{fake.url}/enterprises/big-corp/actions/runners").status_code == 200, "a PAT may"


def test_the_operators_client_against_the_fake(fake: FakeGitHub) -> None:
    fake.add_runner_group("octo-org", "GPU", visibility="selected", members=["octo-org/ml"])
    github = PyGithubClient.from_auth(Auth.Token(PAT), fake.url, FAST)
    big = Scope(enterprise="big-corp")

    assert github.registration_token(big).token
    runner_id = fake.register_runner("enterprises/big-corp", "big-1")
    assert [r.name for r in github.list_runners(big)] == ["big-1"]
    assert github.delete_runner(big, runner_id) is DeleteOutcome.DELETED

    groups = RunnerGroups()
    org = Scope(organization="octo-org")
    assert groups.check(github, org, "gpu", ["octo-org/ml"]).id == 2
    with pytest.raises(RepositoryNotAllowed):
        groups.check(github, org, "GPU", ["octo-org/web"])
    asked = [r.endpoint for r in fake.requests if "runner-group" in r.endpoint]
    assert asked == [
        "actions/list-self-hosted-runner-groups-for-org",
        "actions/list-repo-access-to-self-hosted-runner-group-in-org",
    ], "the second check came from the cache"


def test_a_group_closed_to_public_repositories_refuses_a_pool_serving_a_public_one(fake: FakeGitHub) -> None:
    """GitHub's default for a runner group is "Allow public repositories" off: the jobs of a
    public repository never reach its runners, which would sit idle while those jobs queue."""
    fake.add_runner_group("octo-org", "closed")
    fake.add_runner_group("octo-org", "open", allows_public=True)
    fake.make_public("octo-org/site")
    github = PyGithubClient.from_auth(Auth.Token(PAT), fake.url, FAST)
    groups, org = RunnerGroups(), Scope(organization="octo-org")

    with pytest.raises(RepositoryNotAllowed) as refused:
        groups.check(github, org, "closed", ["octo-org/app", "octo-org/site"])
    assert "octo-org/site is public" in refused.value.message
    assert "octo-org/app" not in refused.value.message, "a private one is fine"
    assert groups.check(github, org, "open", ["octo-org/site"]).name == "open"
    assert groups.check(github, org, "closed", ["octo-org/app"]).name == "closed"

    reads = [r for r in fake.requests if r.endpoint == "repos/get"]
    assert len(reads) == 2, "each repository's visibility read once, then cached"
