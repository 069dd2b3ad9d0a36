"""PyGithubClient against recorded GitHub shapes served by ``responses``.

Bodies come from tests/data/github (the REST description's own examples); error bodies
follow its Basic Error / Validation Error schemas. PyGithub sends requests to
``https://api.github.com:443/...``, so mocks match the real URL with or without the default
port.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import Auth
from prometheus_client import REGISTRY

from runnerpool.domain import Scope, web_url_for
from runnerpool.github import transport
from runnerpool.github.errors import (
    BadCredentials,
    GitHubError,
    MalformedResponse,
    NotFound,
    RateLimited,
    Unavailable,
)
from runnerpool.github.pygithub import ClientOptions, PyGithubClient
from runnerpool.github.types import DeleteOutcome, JitRequest, RateLimit, RegistrationToken, Runner

DATA = Path(__file__).parent / "data" / "github"
API = "https://api.github.com"
GHES_API = "https://ghe.example.com/api/v3"
PAT = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
NOW = 1_700_000_000.0

# No waits anywhere: no backoff between transport retries, no request spacing.
FAST = ClientOptions(timeout=5, backoff_factor=0, seconds_between_requests=None, seconds_between_writes=None)

REPO = Scope(repository="octocat/Hello-World")
ORG = Scope(organization="octo-org")


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def api(path: str, base: str = API) -> re.Pattern[str]:
    """Match ``base + path`` with optional default port and any query string."""
    parsed = re.match(r"^(https?://[^/]+)(.*)$", base)
    assert parsed is not None
    host, prefix = parsed.groups()
    return re.compile(re.escape(host) + r"(:443)?" + re.escape(prefix + path) + r"(\?.*)?$")


def basic_error(message: str, status: int) -> dict[str, str]:
    return {
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": str(status),
    }


def client(base_url: str = API, token: str = PAT) -> PyGithubClient:
    return PyGithubClient.from_auth(Auth.Token(token), base_url, FAST, clock=lambda: NOW)


def make_private_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture(scope="session")
def app_private_key() -> str:
    return make_private_key()


@pytest.fixture
def mock() -> Any:
    with responses.RequestsMock(assert_all_requests_are_fired=True) as rsps:
        yield rsps


# -- Scope ---------------------------------------------------------------------------------------


def test_scope_paths_urls_and_keys() -> None:
    assert REPO.path == "repos/octocat/Hello-World"
    assert ORG.path == "orgs/octo-org"
    assert REPO.html_url() == "https://github.com/octocat/Hello-World"
    assert ORG.html_url("https://ghe.example.com/") == "https://ghe.example.com/octo-org"
    assert Scope(organization="Octo-Org").key == ORG.key
    assert REPO.key != ORG.key


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"organization": "a", "repository": "a/b"}, {"repository": "no-slash"}, {"organization": "bad/org"}],
)
def test_scope_rejects_ambiguous_or_invalid(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Scope(**kwargs)


def test_web_url_for_api_bases() -> None:
    assert web_url_for(API) == "https://github.com"
    assert web_url_for(GHES_API) == "https://ghe.example.com"
    assert web_url_for("https://api.ghe.example.com/") == "https://ghe.example.com"
    # A GHES host named api.*: its API is under /api/v3 of that same host, where runners register.
    assert web_url_for("https://api.ghes.corp/api/v3") == "https://api.ghes.corp"


# -- registration tokens -------------------------------------------------------------------------


def test_repository_token_uses_requester_post(mock: Any) -> None:
    data = fixture("repo-registration-token.json")
    mock.post(
        api("/repos/octocat/Hello-World/actions/runners/registration-token"), json=data["body"], status=201
    )

    token = client().registration_token(REPO)

    assert token.token == data["body"]["token"]
    # "2020-01-22T12:13:35.123-08:00" normalised to aware UTC
    assert token.expires_at == datetime(2020, 1, 22, 20, 13, 35, 123000, tzinfo=UTC)
    request = mock.calls[0].request
    assert request.method == "POST"
    assert request.headers["Authorization"] == f"token {PAT}"


def test_organization_token_uses_pygithub_method(mock: Any) -> None:
    data = fixture("org-registration-token.json")
    mock.post(api("/orgs/octo-org/actions/runners/registration-token"), json=data["body"], status=201)

    token = client().registration_token(ORG)

    assert token.token == data["body"]["token"]
    assert token.expires_at.tzinfo is UTC
    assert len(mock.calls) == 1  # the lazy Organization object costs no GET /orgs/{org}


def test_ghes_base_url(mock: Any) -> None:
    body = fixture("repo-registration-token.json")["body"]
    mock.post(
        api("/repos/octocat/Hello-World/actions/runners/registration-token", GHES_API), json=body, status=201
    )

    client(GHES_API).registration_token(REPO)

    assert mock.calls[0].request.url.startswith("https://ghe.example.com")
    assert "/api/v3/repos/octocat/Hello-World/" in mock.calls[0].request.url


def test_token_never_in_repr_or_logs(mock: Any, caplog: pytest.LogCaptureFixture) -> None:
    body = fixture("repo-registration-token.json")["body"]
    mock.post(api("/repos/octocat/Hello-World/actions/runners/registration-token"), json=body, status=201)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="github")  # PyGithub logs response bodies at DEBUG

    token = client().registration_token(REPO)

    assert body["token"] not in repr(token)
    assert body["token"] not in str(token)
    assert body["token"] not in caplog.text
    assert PAT not in caplog.text
    assert any("registration-token" in r.getMessage() for r in caplog.records)  # the log line stayed


# -- listing -------------------------------------------------------------------------------------


def test_list_follows_link_pagination(mock: Any) -> None:
    page = fixture("repo-runners.json")["body"]
    first, second = page["runners"]
    next_url = "https://api.github.com/repositories/1296269/actions/runners?per_page=100&page=2"
    mock.get(
        api("/repos/octocat/Hello-World/actions/runners"),
        json={"total_count": 2, "runners": [first]},
        headers={"Link": f'<{next_url}>; rel="next", <{next_url}>; rel="last"'},
        match=[responses.matchers.query_param_matcher({"per_page": "100"})],
    )
    mock.get(
        api("/repositories/1296269/actions/runners"),
        json={"total_count": 2, "runners": [second]},
        headers={"Link": f'<{next_url.replace("page=2", "page=1")}>; rel="prev"'},
        match=[responses.matchers.query_param_matcher({"per_page": "100", "page": "2"})],
    )

    runners = client().list_runners(REPO)

    assert runners == [
        Runner(
            id=23, name="linux_runner", status="online", busy=True, labels=("self-hosted", "X64", "Linux")
        ),
        Runner(
            id=24,
            name="mac_runner",
            status="offline",
            busy=False,
            labels=("self-hosted", "X64", "macOS", "no-gpu"),
        ),
    ]


def test_list_org_runners_single_page(mock: Any) -> None:
    body = fixture("org-runners.json")["body"]
    mock.get(api("/orgs/octo-org/actions/runners"), json=body)

    runners = client().list_runners(ORG)

    assert [r.id for r in runners] == [23, 24]


def test_a_runner_is_looked_up_by_its_exact_name_and_again_for_a_free_304(mock: Any) -> None:
    """GET .../actions/runners?name=NAME (GitHub's REST description: the ``name`` query
    parameter of the repository, organization and enterprise runner listings)."""
    first, second = fixture("org-runners.json")["body"]["runners"]
    namesake = {**second, "id": 25, "name": "LINUX_RUNNER-2"}  # kept out whatever GitHub matched
    named = api("/orgs/octo-org/actions/runners")
    query = [responses.matchers.query_param_matcher({"name": "linux_runner"})]
    answer = {"total_count": 2, "runners": [first, namesake]}
    mock.get(named, json=answer, headers={"ETag": '"a"'}, match=query)
    mock.get(named, status=304, match=[*query, responses.matchers.header_matcher({"If-None-Match": '"a"'})])
    github = client()

    assert [r.id for r in github.runners_named(ORG, "linux_runner")] == [23]
    assert [r.id for r in github.runners_named(ORG, "linux_runner")] == [23], "the 304 keeps the answer"
    assert len(mock.calls) == 2


def test_list_refuses_link_to_another_host(mock: Any) -> None:
    mock.get(
        api("/repos/octocat/Hello-World/actions/runners"),
        json={"total_count": 0, "runners": []},
        headers={"Link": '<https://evil.example.com/x?page=2>; rel="next"'},
    )
    with pytest.raises(MalformedResponse):
        client().list_runners(REPO)


# -- a repository's visibility (runner groups closed to public repositories) ---------------------


@pytest.mark.parametrize(
    ("body", "public"),
    [
        ({"full_name": "o/site", "private": False, "visibility": "public"}, True),
        ({"full_name": "o/app", "private": True, "visibility": "private"}, False),
        ({"full_name": "o/tools", "private": True, "visibility": "internal"}, False),
        ({"full_name": "o/old", "private": False}, True),  # a server without "visibility"
    ],
    ids=["public", "private", "internal", "no-visibility"],
)
def test_a_repositorys_visibility(mock: Any, body: dict[str, Any], public: bool) -> None:
    mock.get(api("/repos/o/r"), json=body, headers={"ETag": '"v1"'})
    mock.get(
        api("/repos/o/r"), status=304, match=[responses.matchers.header_matcher({"If-None-Match": '"v1"'})]
    )
    github = client()

    assert github.repository_public("o/r") is public
    assert github.repository_public("o/r") is public, "the 304 keeps the answer"


@pytest.mark.parametrize("status", [404, 403])
def test_a_repository_the_credential_may_not_see_is_not_public(mock: Any, status: int) -> None:
    """An organization's runners need admin:org, not repo: such a PAT sees no private repository,
    and anyone sees a public one."""
    mock.get(api("/repos/o/secret"), json=basic_error("Not Found", status), status=status)
    assert client().repository_public("o/secret") is False


def test_a_repository_that_says_nothing_of_its_visibility_is_malformed(mock: Any) -> None:
    mock.get(api("/repos/o/r"), json={"full_name": "o/r"})
    with pytest.raises(MalformedResponse):
        client().repository_public("o/r")


# -- deletion ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (204, None, DeleteOutcome.DELETED),
        (404, basic_error("Not Found", 404), DeleteOutcome.ALREADY_GONE),
        (
            422,
            {
                "message": 'Bad request - Runner "linux_runner" is still running a job"',
                "documentation_url": "https://docs.github.com/rest/actions/self-hosted-runners",
            },
            DeleteOutcome.BUSY,
        ),
    ],
)
def test_delete_outcomes(mock: Any, status: int, body: Any, outcome: DeleteOutcome) -> None:
    mock.delete(api("/orgs/octo-org/actions/runners/23"), json=body, status=status)

    assert client().delete_runner(ORG, 23) is outcome
    assert mock.calls[0].request.method == "DELETE"


def test_a_deletion_sent_while_another_thread_lists_gets_its_own_answer(
    mock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One client serves every thread of its credential (runner rounds, tokens, polling), over
    one kept connection. PyGithub's connection holds the request it is about to send between
    ``request()`` and ``getresponse()``: a listing begun by another thread in between was sent
    in the deletion's place, its 200 read as "deleted", and the busy runner's pod let go."""
    mock.get(api("/orgs/octo-org/actions/runners"), json={"total_count": 0, "runners": []})
    busy = {"message": 'Bad request - Runner "r" is still running a job"'}
    mock.delete(api("/orgs/octo-org/actions/runners/23"), json=busy, status=422)
    shared = client()
    listed, deleting = threading.Event(), threading.Event()
    stored = transport._BoundedHTTPS.request

    def interleaved(self: Any, verb: str, *args: Any, **kwargs: Any) -> None:
        stored(self, verb, *args, **kwargs)
        if verb == "DELETE":  # the deletion waits, as a thread switch would make it, until...
            deleting.set()
            listed.wait(5)
        else:  # ...the listing has stored its own request on the same connection
            listed.set()

    monkeypatch.setattr(transport._BoundedHTTPS, "request", interleaved)
    lister = threading.Thread(target=lambda: deleting.wait(5) and shared.list_runners(ORG))
    lister.start()
    try:
        assert shared.delete_runner(ORG, 23) is DeleteOutcome.BUSY
    finally:
        lister.join(10)
    assert sorted(c.request.method for c in mock.calls) == ["DELETE", "GET"]


# -- redirects (a renamed or transferred repository) ---------------------------------------------
# GitHub answers a request to a moved repository with 301 (GET) or 307 (any other method) and the
# new place in Location; "receiving an HTTP redirection is not an error and clients should
# follow that redirect" (REST API docs, "Best practices": follow redirects).


def test_a_runner_deletion_redirected_307_is_repeated_where_github_says_and_its_answer_counts(
    mock: Any,
) -> None:
    """A busy runner of a renamed repository is still busy: GitHub's 422 at the new place is
    the answer, not the 307 before it (taken for "deleted", it let the busy pod go)."""
    mock.delete(
        api("/repos/octocat/Hello-World/actions/runners/23"),
        status=307,
        headers={"Location": f"{API}/repositories/1296269/actions/runners/23"},
    )
    mock.delete(
        api("/repositories/1296269/actions/runners/23"),
        json={"message": 'Bad request - Runner "r" is still running a job"'},
        status=422,
    )

    assert client().delete_runner(REPO, 23) is DeleteOutcome.BUSY
    assert [c.request.method for c in mock.calls] == ["DELETE", "DELETE"]


def test_a_listing_redirected_301_keeps_its_query(mock: Any) -> None:
    """PyGithub follows a 301 to the Location's path alone: ``name=`` and ``per_page=`` lost."""
    mock.get(
        api("/orgs/octo-org/actions/runners"),
        status=301,
        headers={"Location": f"{API}/organizations/9919/actions/runners?name=linux_runner&per_page=100"},
    )
    mock.get(
        f"{API}/organizations/9919/actions/runners",
        json=fixture("org-runners.json")["body"],
        match=[responses.matchers.query_param_matcher({"name": "linux_runner", "per_page": "100"})],
    )

    assert [r.id for r in client().runners_named(ORG, "linux_runner")] == [23]


def test_a_redirect_to_another_host_is_not_followed_and_says_so(mock: Any) -> None:
    """The token goes with the request: it is sent to the configured server only."""
    mock.delete(
        api("/orgs/octo-org/actions/runners/23"),
        status=307,
        headers={"Location": "https://elsewhere.example.com/orgs/octo-org/actions/runners/23"},
    )

    with pytest.raises(GitHubError) as info:
        client().delete_runner(ORG, 23)
    assert info.value.reason == "GitHubRedirected"
    assert len(mock.calls) == 1


# -- failures ------------------------------------------------------------------------------------


def test_server_error_then_success_is_retried_in_transport(mock: Any) -> None:
    url = api("/repos/octocat/Hello-World/actions/runners/registration-token")
    mock.post(url, json=basic_error("Server Error", 502), status=502)
    mock.post(url, json=fixture("repo-registration-token.json")["body"], status=201)

    assert isinstance(client().registration_token(REPO), RegistrationToken)
    assert len(mock.calls) == 2


def test_persistent_server_error_is_unavailable(mock: Any) -> None:
    url = api("/repos/octocat/Hello-World/actions/runners")
    for _ in range(3):  # first try + ClientOptions.retries
        mock.get(url, json=basic_error("Service Unavailable", 503), status=503)

    with pytest.raises(Unavailable) as info:
        client().list_runners(REPO)
    assert info.value.status == 503
    assert info.value.reason == "GitHubUnavailable"


def test_server_error_with_retry_after_is_handed_to_the_caller(mock: Any) -> None:
    mock.get(
        api("/orgs/octo-org/actions/runners"),
        json=basic_error("Service Unavailable", 503),
        status=503,
        headers={"retry-after": "120"},
    )

    with pytest.raises(Unavailable) as info:
        client().list_runners(ORG)
    assert info.value.retry_after == 120
    assert len(mock.calls) == 1  # no in-transport sleep of two minutes


def test_connection_error_is_unavailable(mock: Any) -> None:
    # responses raises the exception directly (urllib3's connection retries are not emulated)
    reset = requests.exceptions.ConnectionError("connection reset")
    mock.get(api("/repos/octocat/Hello-World/actions/runners"), body=reset)

    with pytest.raises(Unavailable):
        client().list_runners(REPO)


def test_primary_rate_limit_is_not_slept_on(mock: Any) -> None:
    reset = int(NOW) + 1234
    mock.post(
        api("/orgs/octo-org/actions/runners/registration-token"),
        json=basic_error("API rate limit exceeded for user ID 1.", 403),
        status=403,
        headers={"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
    )

    with pytest.raises(RateLimited) as info:
        client().registration_token(ORG)

    assert info.value.retry_after == pytest.approx(1234)
    assert info.value.reason == "RateLimited"
    assert len(mock.calls) == 1  # raised at once, no retry inside the client


def test_secondary_rate_limit_honours_retry_after(mock: Any) -> None:
    mock.get(
        api("/orgs/octo-org/actions/runners"),
        json=basic_error(
            "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", 429
        ),
        status=429,
        headers={"retry-after": "90"},
    )

    with pytest.raises(RateLimited) as info:
        client().list_runners(ORG)
    assert info.value.retry_after == 90
    assert len(mock.calls) == 1


SECONDARY = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."


def test_a_rate_limited_credential_sends_nothing_until_githubs_wait_is_over(mock: Any) -> None:
    """The limit is the credential's: asking about the next repository while GitHub said wait
    spends nothing but renews the limit ("your integration may be banned")."""
    now = [NOW]
    github = PyGithubClient.from_auth(Auth.Token(PAT), API, FAST, clock=lambda: now[0])
    mock.get(
        api("/repos/octo-org/a/actions/runners"),
        json=basic_error(SECONDARY, 403),
        status=403,
        headers={"retry-after": "60"},
    )
    mock.get(api("/repos/octo-org/b/actions/runners"), json={"total_count": 0, "runners": []})

    with pytest.raises(RateLimited):
        github.list_runners(Scope(repository="octo-org/a"))
    now[0] += 59
    with pytest.raises(RateLimited) as info:
        github.list_runners(Scope(repository="octo-org/b"))
    assert info.value.retry_after == pytest.approx(1)
    assert len(mock.calls) == 1, "refused before it was sent"

    now[0] += 1
    assert github.list_runners(Scope(repository="octo-org/b")) == []


def test_secondary_limits_without_a_time_wait_a_minute_doubling_while_they_go_on(mock: Any) -> None:
    now = [NOW]
    github = PyGithubClient.from_auth(Auth.Token(PAT), API, FAST, clock=lambda: now[0])
    url = api("/orgs/octo-org/actions/runners")
    waits = []
    for _ in range(3):
        mock.get(url, json=basic_error(SECONDARY, 403), status=403)
        with pytest.raises(RateLimited) as info:
            github.list_runners(ORG)
        assert info.value.retry_after is not None
        waits.append(info.value.retry_after)
        now[0] += info.value.retry_after
    assert waits == [60, 120, 240]

    mock.get(url, json={"total_count": 0, "runners": []})
    github.list_runners(ORG)
    mock.get(url, json=basic_error(SECONDARY, 403), status=403)
    with pytest.raises(RateLimited) as info:
        github.list_runners(ORG)
    assert info.value.retry_after == 60, "an answered call starts the doubling again"


@pytest.mark.parametrize("spent", ["actions_runner_registration", "core"])
def test_a_spent_bucket_stops_its_own_calls_only(mock: Any, spent: str) -> None:
    """Registration tokens and JIT configs come out of a bucket of their own: a spent one must
    not stop a deleted pool's deregistrations, nor a spent core budget the tokens GitHub would
    still give."""
    github = client()
    limited = {
        "x-ratelimit-limit": "5000",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": str(int(NOW) + 3000),
        "x-ratelimit-resource": spent,
    }
    refused = {"json": basic_error("API rate limit exceeded", 403), "status": 403, "headers": limited}
    token_url = api("/orgs/octo-org/actions/runners/registration-token")
    delete_url = api("/orgs/octo-org/actions/runners/23")
    token: Callable[[], object] = lambda: github.registration_token(ORG)  # noqa: E731
    delete: Callable[[], object] = lambda: github.delete_runner(ORG, 23)  # noqa: E731
    if spent == "core":
        mock.delete(delete_url, **refused)
        mock.post(token_url, json=fixture("org-registration-token.json")["body"], status=201)
        spend, other = delete, token
    else:
        mock.post(token_url, **refused)
        mock.delete(delete_url, status=204)
        spend, other = token, delete

    with pytest.raises(RateLimited):
        spend()
    other()  # sent, and answered
    with pytest.raises(RateLimited) as again:
        spend()

    assert again.value.retry_after == pytest.approx(3000)
    assert len(mock.calls) == 2, "the spent bucket's second call was not sent"


def test_a_registration_call_limited_by_an_answer_naming_no_bucket_waits_too(mock: Any) -> None:
    """An older GitHub Enterprise Server names no bucket: its answer is core's, and the token
    job's retries, pulled in before the token expires, went on being sent through the wait."""
    github = client()
    limited = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 3000)}
    token_url = api("/orgs/octo-org/actions/runners/registration-token")
    mock.post(token_url, json=basic_error("API rate limit exceeded", 403), status=403, headers=limited)
    for _ in range(2):
        with pytest.raises(RateLimited) as info:
            github.registration_token(ORG)
    assert info.value.held_back and info.value.retry_after == pytest.approx(3000)
    assert len(mock.calls) == 1, "the second call was not sent"


def test_a_limit_met_by_a_call_sent_after_another_is_answered_resets_the_doubling(mock: Any) -> None:
    now = [NOW]
    github = PyGithubClient.from_auth(Auth.Token(PAT), API, FAST, clock=lambda: now[0])
    url = api("/orgs/octo-org/actions/runners")
    mock.get(url, json=basic_error(SECONDARY, 403), status=403)
    with pytest.raises(RateLimited):
        github.list_runners(ORG)
    now[0] += 60
    mock.delete(api("/orgs/octo-org/actions/runners/23"), json=basic_error("Not Found", 404), status=404)
    assert github.delete_runner(ORG, 23) is DeleteOutcome.ALREADY_GONE  # GitHub answered
    mock.get(url, json=basic_error(SECONDARY, 403), status=403)
    with pytest.raises(RateLimited) as info:
        github.list_runners(ORG)
    assert info.value.retry_after == 60


@pytest.mark.parametrize(
    ("status", "message", "cls", "reason"),
    [
        (401, "Bad credentials", BadCredentials, "BadCredentials"),
        (403, "Resource not accessible by integration", BadCredentials, "Forbidden"),
        (404, "Not Found", NotFound, "ScopeNotFound"),
    ],
)
def test_error_reasons(mock: Any, status: int, message: str, cls: type[GitHubError], reason: str) -> None:
    mock.post(
        api("/repos/octocat/Hello-World/actions/runners/registration-token"),
        json=basic_error(message, status),
        status=status,
        headers={"x-ratelimit-remaining": "4999", "x-ratelimit-reset": str(int(NOW) + 60)},
    )

    with pytest.raises(cls) as info:
        client().registration_token(REPO)
    assert info.value.reason == reason
    assert info.value.status == status
    assert info.value.retry_after is None
    assert PAT not in str(info.value)
    assert len(mock.calls) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"body": "{not json", "content_type": "application/json"},
        {"json": {"expires_at": "2020-01-22T12:13:35Z"}},
        {"json": {"token": "X", "expires_at": "yesterday"}},
        {"json": {"token": "X", "expires_at": "2020-01-22T12:13:35"}},
        {"json": ["token"]},
        {"body": "<html>bad gateway page</html>", "content_type": "text/html"},
    ],
)
def test_malformed_token_response(mock: Any, kwargs: dict[str, Any]) -> None:
    mock.post(api("/repos/octocat/Hello-World/actions/runners/registration-token"), status=201, **kwargs)

    with pytest.raises(MalformedResponse) as info:
        client().registration_token(REPO)
    assert info.value.reason == "MalformedResponse"


@pytest.mark.parametrize(
    "body",
    [
        {"total_count": 1},
        {
            "total_count": 1,
            "runners": [{"id": "23", "name": "r", "status": "online", "busy": False, "labels": []}],
        },
        {"total_count": 1, "runners": [{"id": 23, "name": "r", "status": "online", "labels": []}]},
        {
            "total_count": 1,
            "runners": [{"id": 23, "name": "r", "status": "online", "busy": False, "labels": [{}]}],
        },
    ],
)
def test_malformed_runner_listing(mock: Any, body: dict[str, Any]) -> None:
    mock.get(api("/repos/octocat/Hello-World/actions/runners"), json=body)

    with pytest.raises(MalformedResponse):
        client().list_runners(REPO)


# -- budget --------------------------------------------------------------------------------------


def budget_headers(remaining: int, limit: int, reset: int, resource: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit": str(limit),
        "x-ratelimit-remaining": str(remaining),
        "x-ratelimit-used": str(limit - remaining),
        "x-ratelimit-reset": str(reset),
        "x-ratelimit-resource": resource,
    }


def test_the_registration_buckets_budget_does_not_replace_the_core_budget(mock: Any) -> None:
    """Registration tokens and JIT configs spend ``actions_runner_registration``, a bucket of its
    own (``GET /rate_limit``); their headers must not hide a core budget nearly spent from the
    listings' slowdown rule or the gauges."""
    core_reset, registration_reset = int(NOW) + 3000, int(NOW) + 3600
    mock.get(
        api("/orgs/octo-org/actions/runners"),
        json=fixture("org-runners.json")["body"],
        headers=budget_headers(100, 5000, core_reset, "core"),
    )
    registration = budget_headers(9999, 10000, registration_reset, "actions_runner_registration")
    mock.post(
        api("/orgs/octo-org/actions/runners/registration-token"),
        json=fixture("org-registration-token.json")["body"],
        status=201,
        headers=registration,
    )
    mock.post(
        api("/orgs/octo-org/actions/runners/generate-jitconfig"),
        json=fixture("generate-jitconfig.json")["body"],
        status=201,
        headers=registration,
    )
    github = client()
    github.name_credential("ci/registration-bucket")

    github.list_runners(ORG)
    github.registration_token(ORG)
    github.generate_jitconfig(ORG, JitRequest("pool-abcde", ("ci/pool",)))

    assert github.rate_limit() == RateLimit(remaining=100, limit=5000, reset=core_reset)
    gauge = REGISTRY.get_sample_value(
        "runnerpool_github_rate_limit_remaining", {"credential": "ci/registration-bucket"}
    )
    assert gauge == 100


# -- GitHub App ----------------------------------------------------------------------------------


def test_app_installation_auth(mock: Any, app_private_key: str) -> None:
    access = fixture("installation-access-token.json")["body"]
    access = {**access, "expires_at": "2099-01-01T00:00:00Z"}
    mock.post(api("/app/installations/42/access_tokens"), json=access, status=201)
    mock.post(
        api("/orgs/octo-org/actions/runners/registration-token"),
        json=fixture("org-registration-token.json")["body"],
        status=201,
    )
    mock.get(api("/orgs/octo-org/actions/runners"), json=fixture("org-runners.json")["body"])
    app = Auth.AppAuth(1234, app_private_key).get_installation_auth(42)
    gh = PyGithubClient.from_auth(app, API, FAST, clock=lambda: NOW)

    gh.registration_token(ORG)
    gh.list_runners(ORG)

    mint, token_call, list_call = mock.calls
    assert mint.request.headers["Authorization"].startswith("Bearer ")  # the App JWT
    assert token_call.request.headers["Authorization"] == f"token {access['token']}"
    assert list_call.request.headers["Authorization"] == f"token {access['token']}"  # cached


@pytest.mark.parametrize(
    ("status", "message"), [(401, "A JSON web token could not be decoded"), (404, "Not Found")]
)
def test_app_installation_failure_is_a_credential_problem(
    mock: Any, app_private_key: str, status: int, message: str
) -> None:
    mock.post(api("/app/installations/42/access_tokens"), json=basic_error(message, status), status=status)
    app = Auth.AppAuth(1234, app_private_key).get_installation_auth(42)
    gh = PyGithubClient.from_auth(app, API, FAST, clock=lambda: NOW)

    with pytest.raises(BadCredentials) as info:
        gh.registration_token(ORG)
    assert info.value.reason == "AppInstallationTokenFailed"
    assert len(mock.calls) == 1  # the runner endpoint was never called


class Installation:
    """GitHub's side of one App installation: tokens minted in turn (``ghs_1``, ``ghs_2``...), and
    the runner endpoint answering 401 "Bad credentials" to the ones in ``revoked``."""

    def __init__(self, mock: Any, revoked: set[str]) -> None:
        self.minted: list[str] = []
        self.revoked = revoked
        self.used: list[str] = []
        access = fixture("installation-access-token.json")["body"]
        self._access = {**access, "expires_at": "2099-01-01T00:00:00Z"}
        mock.add_callback(responses.POST, api("/app/installations/42/access_tokens"), callback=self._mint)
        mock.add_callback(responses.GET, api("/orgs/octo-org/actions/runners"), callback=self._runners)

    def _mint(self, request: Any) -> tuple[int, dict[str, str], str]:
        self.minted.append(f"ghs_{len(self.minted) + 1}")
        return 201, {}, json.dumps({**self._access, "token": self.minted[-1]})

    def _runners(self, request: Any) -> tuple[int, dict[str, str], str]:
        token = request.headers["Authorization"].removeprefix("token ")
        self.used.append(token)
        if token in self.revoked:
            return 401, {}, json.dumps(basic_error("Bad credentials", 401))
        return 200, {}, json.dumps(fixture("org-runners.json")["body"])


def app_client(app_private_key: str) -> PyGithubClient:
    app = Auth.AppAuth(1234, app_private_key).get_installation_auth(42)
    return PyGithubClient.from_auth(app, API, FAST, clock=lambda: NOW)


def test_an_installation_token_github_rejects_is_minted_again_at_once(
    mock: Any, app_private_key: str
) -> None:
    """PyGithub keeps a token until 20 s before the expiry GitHub gave; one revoked
    (``DELETE /installation/token``) or expired by GitHub's clock would be refused for up to an
    hour."""
    github = Installation(mock, revoked={"ghs_1"})
    gh = app_client(app_private_key)

    assert len(gh.list_runners(ORG)) == 2
    assert len(gh.list_runners(ORG)) == 2

    assert github.minted == ["ghs_1", "ghs_2"]
    assert github.used == ["ghs_1", "ghs_2", "ghs_2"]


def test_a_fresh_installation_token_rejected_again_is_bad_credentials(
    mock: Any, app_private_key: str
) -> None:
    github = Installation(mock, revoked={"ghs_1", "ghs_2", "ghs_3"})

    with pytest.raises(BadCredentials) as info:
        app_client(app_private_key).list_runners(ORG)

    assert (info.value.reason, info.value.status) == ("BadCredentials", 401)
    assert github.minted == ["ghs_1", "ghs_2"], "minted again once, not a third time"
    assert github.used == ["ghs_1", "ghs_2"]
