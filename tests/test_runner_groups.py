"""Runner groups: GitHub's answers read (``responses``, GitHub's shapes), and the check with its
cache: what a pool is told, and how few requests it costs."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import responses
from github import Auth

from runnerpool.domain import Scope
from runnerpool.github.errors import BadCredentials, MalformedResponse, RateLimited, Unavailable
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.groups import RepositoryNotAllowed, RunnerGroupNotFound, RunnerGroups
from runnerpool.github.pygithub import ENTERPRISE_NEEDS_PAT, MAX_RUNNER_PAGES, PyGithubClient
from runnerpool.github.types import JitRequest, RunnerGroup
from tests.github_mocks import FAST, RunnerGroupsEndpoint, gh

DATA = Path(__file__).parent / "data" / "github"
ORG = Scope(organization="octo-org")
BIG = Scope(enterprise="octo-corp")


def body(name: str) -> Any:
    return json.loads((DATA / name).read_text())["body"]


@pytest.fixture
def mock() -> Any:
    with responses.RequestsMock(assert_all_requests_are_fired=True) as rsps:
        yield rsps


def pat_client() -> PyGithubClient:
    return PyGithubClient.from_auth(Auth.Token("ghp_test"), "https://api.github.com", FAST)


# -- the client ------------------------------------------------------------------------------------


def test_organization_groups_and_their_repositories_in_githubs_shapes(mock: Any) -> None:
    mock.get(gh("/orgs/octo-org/actions/runner-groups"), json=body("org-runner-groups.json"))
    mock.get(
        gh("/orgs/octo-org/actions/runner-groups/2/repositories"),
        json=body("org-runner-group-repositories.json"),
    )
    github = pat_client()

    groups = github.runner_groups(ORG)
    members = github.runner_group_members(ORG, 2)

    assert groups[0] == RunnerGroup(id=1, name="Default", visibility="all", default=True)
    assert (groups[1].name, groups[1].selected) == ("octo-runner-group", True)
    assert members == ["octocat/Hello-World"]
    assert "per_page=100" in mock.calls[0].request.url


def test_enterprise_groups_follow_pages(mock: Any) -> None:
    page = body("enterprise-runner-groups.json")
    first = {**page, "runner_groups": page["runner_groups"][:1]}
    second = {**page, "runner_groups": page["runner_groups"][1:]}
    next_url = "https://api.github.com/enterprises/octo-corp/actions/runner-groups?per_page=100&page=2"
    mock.get(
        re.compile(
            r"https://api\.github\.com(:443)?/enterprises/octo-corp/actions/runner-groups\?.*page=2.*"
        ),
        json=second,
    )
    mock.get(
        gh("/enterprises/octo-corp/actions/runner-groups"),
        json=first,
        headers={"Link": f'<{next_url}>; rel="next"'},
    )

    names = [group.name for group in pat_client().runner_groups(BIG)]

    assert names == [group["name"] for group in page["runner_groups"]]


@pytest.mark.parametrize("listing", ["groups", "members"])
def test_listings_past_a_thousand_entries_are_read_to_their_last_page(listing: str) -> None:
    """A selected group's 1,001st repository cut off would refuse the pool that serves it."""
    names = [f"octo-org/repo-{n:04}" for n in range(1050)]
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        endpoint = RunnerGroupsEndpoint(rsps)
        github = pat_client()
        if listing == "groups":
            for n, name in enumerate(names, start=2):
                endpoint.add(name, n)
            found = [group.name for group in github.runner_groups(ORG)]
        else:
            endpoint.add("Big", 7, "selected", names)
            found = github.runner_group_members(ORG, 7)

    assert found == names
    assert len(endpoint.answered) == 11


def test_a_member_listing_that_never_ends_is_refused_not_cut_short(mock: Any) -> None:
    path = "/orgs/octo-org/actions/runner-groups/7/repositories"

    def endless(request: Any) -> tuple[int, dict[str, str], str]:
        page = int(urllib.parse.parse_qs(urllib.parse.urlsplit(request.url).query).get("page", ["1"])[0])
        link = f'<https://api.github.com{path}?per_page=100&page={page + 1}>; rel="next"'
        repositories = [{"id": page, "name": f"repo-{page}", "full_name": f"octo-org/repo-{page}"}]
        return 200, {"Link": link}, json.dumps({"total_count": 1, "repositories": repositories})

    mock.add_callback(responses.GET, gh(path), callback=endless)

    with pytest.raises(MalformedResponse, match="pagination did not end"):
        pat_client().runner_group_members(ORG, 7)
    assert len(mock.calls) == MAX_RUNNER_PAGES


def test_a_github_app_on_an_enterprise_is_refused_without_a_request(mock: Any) -> None:
    """GitHub lets only a personal access token manage enterprise runners."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - test only
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415 - test only

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    app = Auth.AppAuth(1234, key.decode()).get_installation_auth(42)
    github = PyGithubClient.from_auth(app, "https://api.github.com", FAST)

    for call in (
        lambda: github.registration_token(BIG),
        lambda: github.list_runners(BIG),
        lambda: github.delete_runner(BIG, 7),
        lambda: github.runner_groups(BIG),
        lambda: github.runner_group_members(BIG, 7),
        lambda: github.generate_jitconfig(BIG, JitRequest("pool-abcde", ("ci/pool",))),
    ):
        with pytest.raises(BadCredentials) as caught:
            call()
        assert caught.value.reason == ENTERPRISE_NEEDS_PAT
        assert "personal access token" in caught.value.message
    assert len(mock.calls) == 0, "no installation token minted, no runner endpoint asked"


def test_enterprise_runners_with_a_pat(mock: Any) -> None:
    mock.post(
        gh("/enterprises/octo-corp/actions/runners/registration-token"),
        json=body("enterprise-registration-token.json"),
        status=201,
    )
    mock.get(gh("/enterprises/octo-corp/actions/runners"), json=body("enterprise-runners.json"))
    mock.delete(gh("/enterprises/octo-corp/actions/runners/23"), status=204)
    github = pat_client()

    assert github.registration_token(BIG).token == "LLBF3JGZDX3P5PMEXLND6TS6FCWO6"
    assert [runner.name for runner in github.list_runners(BIG)] == ["linux_runner", "mac_runner"]
    assert github.delete_runner(BIG, 23).value == "Deleted"


# -- the check and its cache -----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


GPU = RunnerGroup(id=7, name="GPU", visibility="selected", default=False)


def fake(groups: list[RunnerGroup] | None = None) -> FakeGitHubClient:
    github = FakeGitHubClient()
    github.groups[ORG] = [
        RunnerGroup(id=1, name="Default", visibility="all", default=True),
        *(groups or [GPU]),
    ]
    github.members[(ORG, 7)] = ["octo-org/ml", "octo-org/vision"]
    return github


def test_a_group_is_found_by_name_regardless_of_case_and_cached() -> None:
    github, clock = fake(), Clock()
    groups = RunnerGroups(clock=clock)

    assert groups.check(github, ORG, "gpu", ["octo-org/ml"]).id == 7
    assert groups.check(github, ORG, "gpu", ["octo-org/ml"]).id == 7
    assert github.group_requests == [("groups", ORG), ("members", ORG)], "the second check cost nothing"

    clock.now += 601  # past the ten minutes a found group is kept
    groups.resolve(github, ORG, "GPU")
    assert github.group_requests[-1] == ("groups", ORG)


def test_a_missing_group_says_which_exist_and_is_looked_for_again_soon() -> None:
    github, clock = fake(), Clock()
    groups = RunnerGroups(clock=clock)

    with pytest.raises(RunnerGroupNotFound) as caught:
        groups.resolve(github, ORG, "arm")
    assert "octo-org has no runner group 'arm'" in caught.value.message
    assert "(groups: Default, GPU)" in caught.value.message
    with pytest.raises(RunnerGroupNotFound):
        groups.resolve(github, ORG, "arm")
    assert len(github.group_requests) == 1

    github.groups[ORG].append(RunnerGroup(id=9, name="arm", visibility="all", default=False))
    clock.now += 61  # a minute: the user was probably creating it
    assert groups.resolve(github, ORG, "arm").id == 9


def test_a_selected_group_must_admit_every_repository_the_pool_serves() -> None:
    groups = RunnerGroups(clock=Clock())

    with pytest.raises(RepositoryNotAllowed) as caught:
        groups.check(fake(), ORG, "GPU", ["octo-org/ml", "octo-org/web", "octo-org/api"])

    assert caught.value.reason == "RepositoryNotAllowed"
    assert "runner group 'GPU' of octo-org admits selected repositories only" in caught.value.message
    assert "not octo-org/api, octo-org/web" in caught.value.message
    open_group = RunnerGroup(id=7, name="GPU", visibility="all", default=False)
    assert groups.check(fake([open_group]), ORG, "GPU", ["octo-org/web"]) == open_group


def test_an_enterprise_group_admits_organizations() -> None:
    github = FakeGitHubClient()
    github.groups[BIG] = [GPU]
    github.members[(BIG, 7)] = ["octo-org"]
    groups = RunnerGroups(clock=Clock())

    assert groups.check(github, BIG, "GPU", ["octo-org/ml"]) == GPU
    with pytest.raises(RepositoryNotAllowed) as caught:
        groups.check(github, BIG, "GPU", ["labs/tools"])
    assert "admits selected organizations only, and not labs" in caught.value.message


def test_a_failing_scope_backs_off_and_says_the_same_again() -> None:
    github, clock = fake(), Clock()
    groups = RunnerGroups(clock=clock)
    github.groups.clear()
    limited = RateLimited("GET /orgs/octo-org/actions/runner-groups: HTTP 403", retry_after=30.0)

    def refuse(scope: Scope) -> list[RunnerGroup]:
        github.group_requests.append(("groups", scope))
        raise limited

    github.runner_groups = refuse  # type: ignore[method-assign]
    for _ in range(3):
        with pytest.raises(RateLimited) as caught:
            groups.resolve(github, ORG, "GPU")
    assert len(github.group_requests) == 1, "no request while the scope backs off"
    assert caught.value.retry_after == pytest.approx(30.0)


def test_one_credentials_failure_does_not_refuse_anothers_look_ups() -> None:
    """Another tenant's pool of the organization, behind a proxy that stalls, backs off
    alone: this pool's credential still asks, and gets its group."""
    stalled, own = fake(), fake()

    def stall(scope: Scope) -> list[RunnerGroup]:
        raise Unavailable("GET /orgs/octo-org/actions/runner-groups: timed out")

    stalled.runner_groups = stall  # type: ignore[method-assign]
    groups = RunnerGroups(clock=Clock())
    with pytest.raises(Unavailable):
        groups.resolve(stalled, ORG, "GPU")

    assert groups.resolve(own, ORG, "GPU").id == 7
    assert own.group_requests == [("groups", ORG)]


def test_a_group_found_before_is_still_served_while_github_is_down() -> None:
    """A 502 or a rate limit when the ten minutes are up does not make the group go away (the
    gate would close, and the pool lose its token and runners): the last answer stands until
    GitHub answers again, and then GitHub's answer counts."""
    github, clock = fake(), Clock()
    groups = RunnerGroups(clock=clock)
    assert groups.check(github, ORG, "GPU", ["octo-org/ml"]).id == 7
    working = github.runner_groups, github.runner_group_members

    def down(*args: object) -> list[RunnerGroup]:
        raise Unavailable("GET /orgs/octo-org/actions/runner-groups: HTTP 502 Bad Gateway", status=502)

    github.runner_groups = github.runner_group_members = down  # type: ignore[assignment,method-assign]
    clock.now += 601  # past the ten minutes a found group is kept
    for _ in range(2):  # the call, then the backoff's refusal
        assert groups.check(github, ORG, "GPU", ["octo-org/ml"]).id == 7

    github.runner_groups, github.runner_group_members = working  # type: ignore[method-assign]
    github.groups[ORG] = []
    clock.now += 61  # the backoff is over: GitHub says the group is gone
    with pytest.raises(RunnerGroupNotFound):
        groups.check(github, ORG, "GPU", ["octo-org/ml"])


def test_the_cache_is_bounded() -> None:
    github = fake()
    groups = RunnerGroups(clock=Clock(), max_entries=2)
    scopes = [Scope(organization=f"org-{i}") for i in range(3)]
    for scope in scopes:
        github.groups[scope] = [GPU]
        groups.resolve(github, scope, "GPU")
    groups.resolve(github, scopes[2], "GPU")
    assert len(github.group_requests) == 3, "the newest entry is still there"
    groups.resolve(github, scopes[0], "GPU")
    assert github.group_requests[-1] == ("groups", scopes[0]), "the oldest entry was evicted"


def test_a_group_looked_up_again_after_its_ten_minutes_costs_free_304s() -> None:
    """The cache spares requests; GitHub's ETags make the ones past it free."""
    clock = Clock()
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        endpoint = RunnerGroupsEndpoint(rsps, "/enterprises/octo-corp")
        endpoint.add("Default", 1)
        endpoint.add("Shared", 5, "selected", ["octo-org"])
        groups = RunnerGroups(clock=clock)
        github = pat_client()

        assert groups.check(github, BIG, "shared", ["octo-org/ml"]).id == 5
        clock.now += 601
        assert groups.check(github, BIG, "Shared", ["octo-org/ml"]).id == 5

    assert [status for _path, status in endpoint.answered] == [200, 200, 304, 304]
    assert endpoint.repositories_read == [("/repos/octo-org/ml", 200), ("/repos/octo-org/ml", 304)], (
        "the group refuses public repositories: the pool's one is read, then revalidated for free"
    )


def test_a_public_repository_refused_by_a_closed_group_is_let_through_within_a_minute_of_the_fix() -> None:
    """The group's "Allow public repositories" turned on: the group was found, so cached for ten
    minutes; the refusal it led to is looked at again within a minute, as the docs promise."""
    clock = Clock()
    github = FakeGitHubClient(public={"octo-org/site"})
    github.groups[ORG] = [RunnerGroup(id=2, name="ci", visibility="all", default=False, allows_public=False)]
    groups = RunnerGroups(clock=clock)
    with pytest.raises(RepositoryNotAllowed) as refused:
        groups.check(github, ORG, "ci", ["octo-org/site"])
    assert "octo-org/site is public" in refused.value.message

    github.groups[ORG] = [RunnerGroup(id=2, name="ci", visibility="all", default=False, allows_public=True)]
    clock.now += 30
    with pytest.raises(RepositoryNotAllowed):
        groups.check(github, ORG, "ci", ["octo-org/site"])  # cached meanwhile
    clock.now += 31

    assert groups.check(github, ORG, "ci", ["octo-org/site"]).allows_public


def test_a_default_group_look_that_closes_nothing_keeps_its_answers_for_ten_minutes() -> None:
    """A pool naming no group whose default group refuses one of its repositories but serves
    another stays open: its looks must not age the answers to a minute, or it re-read the
    groups and every repository's visibility each minute for as long as it lived."""
    clock = Clock()
    github = FakeGitHubClient(public={"octo-org/site"})
    github.groups[ORG] = [
        RunnerGroup(id=1, name="Default", visibility="all", default=True, allows_public=False)
    ]
    groups = RunnerGroups(clock=clock)
    with pytest.raises(RepositoryNotAllowed):
        groups.check_default(github, ORG, ["octo-org/site"], refusing=False)
    asked = len(github.group_requests)

    clock.now += 61
    with pytest.raises(RepositoryNotAllowed):
        groups.check_default(github, ORG, ["octo-org/site"], refusing=False)
    assert len(github.group_requests) == asked, "asked again within the ten minutes"

    with pytest.raises(RepositoryNotAllowed):
        groups.check_default(github, ORG, ["octo-org/site"])  # this one closes the pool
    clock.now += 61
    with pytest.raises(RepositoryNotAllowed):
        groups.check_default(github, ORG, ["octo-org/site"])
    assert len(github.group_requests) > asked, "a refusal is looked at again within a minute"
