"""Credential Secrets to GitHub clients, and the per-Secret client cache (rotation)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from runnerpool.domain import Scope
from runnerpool.github.credentials import ClientCache, CredentialError, client_from_secret_data
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import ClientOptions, PyGithubClient
from tests.test_github_api import (  # shared GitHub mocks and fixtures
    API,
    FAST,
    GHES_API,
    ORG,
    api,
    app_private_key,
    fixture,
    mock,
)

__all__ = ["app_private_key", "mock"]  # fixtures re-used from test_github_api

PAT_A = "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
PAT_B = "ghp_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
BROKEN_PEM = "-----BEGIN PRIVATE KEY-----\nSECRETBYTES"


def fast_factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
    return client_from_secret_data(data, base_url, FAST)


def mock_org_token(mock: Any, base: str = API) -> None:
    mock.post(
        api("/orgs/octo-org/actions/runners/registration-token", base),
        json=fixture("org-registration-token.json")["body"],
        status=201,
    )


class Secrets:
    """Stands in for the informer-cache reader the lead wires in."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], dict[str, str]] = {}
        self.reads = 0

    def __call__(self, namespace: str, name: str) -> dict[str, str] | None:
        self.reads += 1
        return self.data.get((namespace, name))


# -- client_from_secret_data -----------------------------------------------------------------------


def test_pat_secret(mock: Any) -> None:
    mock_org_token(mock)
    gh = client_from_secret_data({"token": PAT_A + "\n"}, API, FAST)  # trailing newline from a file

    gh.registration_token(ORG)

    assert mock.calls[0].request.headers["Authorization"] == f"token {PAT_A}"


def test_app_secret(mock: Any, app_private_key: str) -> None:
    access = {**fixture("installation-access-token.json")["body"], "expires_at": "2099-01-01T00:00:00Z"}
    mock.post(api("/app/installations/7/access_tokens"), json=access, status=201)
    mock_org_token(mock)
    data = {"app-id": "1234", "app-installation-id": "7", "app-private-key": app_private_key}

    client_from_secret_data(data, API, FAST).registration_token(ORG)

    assert mock.calls[0].request.headers["Authorization"].startswith("Bearer ")
    assert mock.calls[1].request.headers["Authorization"] == f"token {access['token']}"


def test_a_secret_made_for_arc_works_unchanged(mock: Any, app_private_key: str) -> None:
    """ARC's key names (github_token, github_app_*): a team moving over keeps its Secret."""
    mock_org_token(mock)
    client_from_secret_data({"github_token": PAT_A}, API, FAST).registration_token(ORG)
    assert mock.calls[0].request.headers["Authorization"] == f"token {PAT_A}"

    access = {**fixture("installation-access-token.json")["body"], "expires_at": "2099-01-01T00:00:00Z"}
    mock.post(api("/app/installations/7/access_tokens"), json=access, status=201)
    arc_app = {
        "github_app_id": "1234",
        "github_app_installation_id": "7",
        "github_app_private_key": app_private_key,
    }
    client_from_secret_data(arc_app, API, FAST).registration_token(ORG)
    assert mock.calls[1].request.url.endswith("/app/installations/7/access_tokens")
    assert mock.calls[2].request.headers["Authorization"] == f"token {access['token']}"


def test_our_key_wins_over_arcs_when_a_secret_has_both(mock: Any) -> None:
    mock_org_token(mock)
    client_from_secret_data({"token": PAT_A, "github_token": PAT_B}, API, FAST).registration_token(ORG)
    assert mock.calls[0].request.headers["Authorization"] == f"token {PAT_A}"


def test_ghes_default_and_trailing_slash(mock: Any) -> None:
    mock_org_token(mock, GHES_API)
    gh = client_from_secret_data({"token": PAT_A}, GHES_API + "/", FAST)
    assert isinstance(gh, PyGithubClient)
    assert gh.base_url == GHES_API

    gh.registration_token(ORG)

    default = client_from_secret_data({"token": PAT_A})
    assert isinstance(default, PyGithubClient)
    assert default.base_url == API


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({}, ["'token'", "'app-id'"]),
        ({"token": "  "}, ["'token'"]),
        # An old and a new token on two lines, or a stray control character: requests would quote
        # the header, token and all, in its exception, and no retry could help.
        ({"token": f"{PAT_A}\nghp_theNewOneAfterRotation0000000000000"}, ["'token'", "one line"]),
        ({"token": f"{PAT_A}\x7f"}, ["'token'"]),
        ({"app-id": "1", "token": PAT_A}, ["'app-installation-id'", "'app-private-key'"]),
        ({"app-id": "x1", "app-installation-id": "7", "app-private-key": "k"}, ["'app-id'"]),
        ({"app-id": "1", "app-installation-id": "0", "app-private-key": "k"}, ["'app-installation-id'"]),
        (
            {
                "app-id": "1",
                "app-installation-id": "7",
                "app-private-key": "-----BEGIN PRIVATE KEY-----\nSECRETBYTES",
            },
            ["'app-private-key'"],
        ),
    ],
)
def test_malformed_secret_names_the_key_not_the_value(data: dict[str, str], names: list[str]) -> None:
    with pytest.raises(CredentialError) as info:
        client_from_secret_data(data, API, FAST)

    assert info.value.reason == "CredentialSecretMalformed"
    for name in names:
        assert name in info.value.message
    for value in data.values():
        if len(value.strip()) > 2:
            assert value.strip() not in info.value.message
    assert PAT_A not in info.value.message


def test_bad_base_url() -> None:
    with pytest.raises(CredentialError) as info:
        client_from_secret_data({"token": PAT_A}, "ghe.example.com/api/v3")
    assert info.value.reason == "CredentialSecretMalformed"


# -- ClientCache -----------------------------------------------------------------------------------


def test_missing_secret() -> None:
    cache = ClientCache(Secrets(), factory=fast_factory)

    with pytest.raises(CredentialError) as info:
        cache.get("team-a", "github-cred", API)

    assert info.value.reason == "CredentialSecretMissing"
    assert "team-a/github-cred" in info.value.message
    assert "'token'" in info.value.message


def test_one_client_per_secret_and_url() -> None:
    secrets = Secrets()
    secrets.data[("team-a", "cred")] = {"token": PAT_A}
    secrets.data[("team-b", "cred")] = {"token": PAT_A}
    built: list[str] = []

    def counting_factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        built.append(base_url)
        return fast_factory(data, base_url)

    cache = ClientCache(secrets, factory=counting_factory)

    first = cache.get("team-a", "cred", API)
    assert cache.get("team-a", "cred", API) is first
    assert cache.get("team-a", "cred", None) is first  # None means api.github.com
    assert cache.get("team-b", "cred", API) is not first  # Secrets are namespaced
    assert cache.get("team-a", "cred", GHES_API) is not first
    assert built == [API, API, GHES_API], "three clients for three (namespace, Secret, URL)"
    assert secrets.reads == 5  # every get re-reads (cheap: an informer cache)


def test_rotation_uses_new_credentials_without_restart(mock: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = Secrets()
    secrets.data[("team-a", "cred")] = {"token": PAT_A}
    cache = ClientCache(secrets, factory=fast_factory)
    mock_org_token(mock)
    mock_org_token(mock)

    cache.get("team-a", "cred", API).registration_token(ORG)
    secrets.data[("team-a", "cred")] = {"token": PAT_B}  # rotated in place
    cache.get("team-a", "cred", API).registration_token(ORG)

    seen = [call.request.headers["Authorization"] for call in mock.calls]
    assert seen == [f"token {PAT_A}", f"token {PAT_B}"]
    assert "changed" in caplog.text
    assert PAT_A not in caplog.text
    assert PAT_B not in caplog.text


def test_broken_secret_is_not_cached_so_a_fix_is_picked_up() -> None:
    secrets = Secrets()
    secrets.data[("ns", "cred")] = {"tokn": PAT_A}
    cache = ClientCache(secrets, factory=fast_factory)

    with pytest.raises(CredentialError):
        cache.get("ns", "cred", API)
    secrets.data[("ns", "cred")] = {"token": PAT_A}
    assert isinstance(cache.get("ns", "cred", API), PyGithubClient)


def test_undecodable_secret_is_malformed() -> None:
    def reader(namespace: str, name: str) -> dict[str, str]:
        return {"token": b"\xff\xfe".decode()}  # what a reader does with binary data

    with pytest.raises(CredentialError) as info:
        ClientCache(reader, factory=fast_factory).get("ns", "cred", API)
    assert info.value.reason == "CredentialSecretMalformed"


def test_client_repr_has_no_credentials() -> None:
    gh = client_from_secret_data({"token": PAT_A}, API, ClientOptions())
    assert PAT_A not in repr(gh)
    scope = repr(Scope(organization="octo-org"))
    assert scope == "Scope(organization='octo-org', repository=None, enterprise=None)"
