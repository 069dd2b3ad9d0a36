"""The fake GitHub must answer like GitHub, or tests built on it prove nothing.

Every response any test here receives is checked against the operation's
documented responses in ``tests/data/github/openapi-runners.json`` (an extract
of GitHub's own description) by a session hook, so the behaviour tests double
as contract tests.  `jsonschema` is not installed, so the check uses the small
validator in `testworld.fakegithub.schema`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import Auth, Github, GithubIntegration

from testworld.fakegithub import FakeGitHub, RegistrationRejectedError, UnknownScopeError
from testworld.fakegithub.schema import validate

SPEC_FILE = Path(__file__).parent / "data" / "github" / "openapi-runners.json"
SPEC: dict[str, Any] = json.loads(SPEC_FILE.read_text())
ORG = "octo-org"
REPO = "octo/hello"
PAT = "ghp_test"

# GitHub's description lists only endpoint-specific responses.  These come from
# its "common errors" documentation and apply to every operation: conditional
# GETs (304), bad credentials (401), primary and secondary rate limits (403/429),
# unknown scope or runner (404: "already gone" for a runner, per the README).
# Injected faults (5xx) are not GitHub's answers and are exempt.
GENERIC_STATUSES = {304, 401, 403, 404, 429}
BASIC_ERROR = SPEC["paths"]["/rate_limit"]["get"]["responses"]["404"]["content"]["application/json"]["schema"]


def _operations() -> list[tuple[re.Pattern[str], str, str, dict[str, Any]]]:
    found = []
    for template, operations in SPEC["paths"].items():
        pattern = re.compile(re.sub(r"\{[^}]+\}", "[^/]+", template) + "$")
        for method, operation in operations.items():
            found.append((pattern, method.upper(), template, operation))
    return found


OPERATIONS = _operations()


class ContractChecker:
    """Validates each API response against the description and remembers what was covered."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.seen: set[tuple[str, int]] = set()

    def __call__(self, response: requests.Response, *_args: Any, **_kwargs: Any) -> None:
        method = response.request.method or ""
        path = (response.request.path_url or "").split("?")[0]
        if path.startswith("/_fake/") or response.status_code >= 500:
            return
        status = response.status_code
        matches = [op for pattern, m, _t, op in OPERATIONS if m == method and pattern.search(path)]
        if not matches:
            assert status == 404, f"{method} {path} is not in the description extract but answered {status}"
            assert not validate(response.json(), BASIC_ERROR)
            return
        assert len(matches) == 1, f"{method} {path} is ambiguous"
        operation = matches[0]
        self.seen.add((operation["operationId"], status))
        documented = operation["responses"].get(str(status))
        if documented is None:
            assert status in GENERIC_STATUSES, f"{operation['operationId']}: undocumented status {status}"
            schema = None if status == 304 else BASIC_ERROR
        else:
            content = documented.get("content", {}).get("application/json")
            schema = None if content is None else content["schema"]
        if schema is None:
            assert response.content == b"", f"{operation['operationId']} {status} must have no body"
            return
        assert response.headers["Content-Type"].startswith("application/json")
        errors = validate(response.json(), schema)
        assert not errors, f"{operation['operationId']} {status}: " + "; ".join(errors[:10])
        for header in ("limit", "remaining", "reset", "used", "resource"):
            assert f"x-ratelimit-{header}" in response.headers


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[ORG, REPO], installations=[42]) as server:
        yield server


@pytest.fixture
def contract(fake: FakeGitHub) -> ContractChecker:
    return ContractChecker(fake.url)


@pytest.fixture
def gh(fake: FakeGitHub, contract: ContractChecker) -> Iterator[requests.Session]:
    session = requests.Session()
    session.headers["Authorization"] = f"token {PAT}"
    session.headers["Accept"] = "application/vnd.github+json"
    session.hooks["response"].append(contract)
    with session:
        yield session


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _app_jwt(key: rsa.RSAPrivateKey, app_id: int = 7, *, lifetime: int = 540, skew: int = -30) -> str:
    now = int(time.time())
    return jwt.encode({"iat": now + skew, "exp": now + lifetime, "iss": str(app_id)}, key, algorithm="RS256")


def _links(response: requests.Response) -> dict[str, str]:
    return {rel: link["url"] for rel, link in response.links.items()}


# ---------------------------------------------------------------------------------------- contract


def test_every_operation_and_documented_success_is_exercised(
    fake: FakeGitHub, gh: requests.Session, contract: ContractChecker, app_key: rsa.RSAPrivateKey
) -> None:
    url = fake.url
    fake.register_runner(ORG, "idle", ["octo-org/pool"])
    busy = fake.register_runner(ORG, "busy", ["octo-org/pool"], busy=True)
    fake.register_runner(REPO, "offline", status="offline")
    for scope in (f"orgs/{ORG}", f"repos/{REPO}"):
        listing = gh.get(f"{url}/{scope}/actions/runners")
        first = listing.json()["runners"][0]["id"]
        assert gh.get(f"{url}/{scope}/actions/runners/{first}").status_code == 200
        assert gh.get(f"{url}/{scope}/actions/runners/99999").status_code == 404
        assert gh.get(f"{url}/{scope}/actions/runners", headers={"If-None-Match": listing.headers["ETag"]}).ok
        assert gh.post(f"{url}/{scope}/actions/runners/registration-token").status_code == 201
        assert gh.delete(f"{url}/{scope}/actions/runners/99999").status_code == 404
    assert gh.delete(f"{url}/orgs/{ORG}/actions/runners/{busy}").status_code == 422
    fake.set_runner(ORG, busy, busy=False)
    assert gh.delete(f"{url}/orgs/{ORG}/actions/runners/{busy}").status_code == 204
    offline = fake.runners(REPO)[0]["id"]
    assert gh.delete(f"{url}/repos/{REPO}/actions/runners/{offline}").status_code == 204
    assert gh.get(f"{url}/rate_limit").status_code == 200
    job_id = fake.queue_job(REPO, ["self-hosted"], 0)
    (run,) = gh.get(f"{url}/repos/{REPO}/actions/runs").json()["workflow_runs"]
    assert gh.get(f"{url}/repos/{REPO}/actions/runs/{run['id']}/jobs").status_code == 200
    assert gh.get(f"{url}/repos/{REPO}/actions/jobs/{job_id}").status_code == 200

    app = requests.Session()
    app.hooks["response"].append(contract)
    bearer = {"Authorization": f"Bearer {_app_jwt(app_key)}"}
    assert app.post(f"{url}/app/installations/42/access_tokens", headers=bearer).status_code == 201
    assert app.post(f"{url}/app/installations/43/access_tokens", headers=bearer).status_code == 404
    bad = {"Authorization": "Bearer not-a-jwt"}
    assert app.post(f"{url}/app/installations/42/access_tokens", headers=bad).status_code == 401

    for _pattern, _method, template, operation in OPERATIONS:
        success = {int(code) for code in operation["responses"] if code.startswith("2")}
        covered = {status for op, status in contract.seen if op == operation["operationId"]}
        assert success <= covered, (
            f"{template} {operation['operationId']}: {success - covered} never exercised"
        )


def test_extract_keeps_provenance_and_only_implemented_operations() -> None:
    assert SPEC["x-provenance"].startswith("Extracted from @octokit/openapi 23.0.2")
    assert sorted(op["operationId"] for *_rest, op in OPERATIONS) == sorted(
        [
            "actions/list-self-hosted-runners-for-org",
            "actions/list-self-hosted-runners-for-repo",
            "actions/get-self-hosted-runner-for-org",
            "actions/get-self-hosted-runner-for-repo",
            "actions/delete-self-hosted-runner-from-org",
            "actions/delete-self-hosted-runner-from-repo",
            "actions/create-registration-token-for-org",
            "actions/create-registration-token-for-repo",
            "actions/list-workflow-runs-for-repo",
            "actions/list-jobs-for-workflow-run",
            "actions/get-job-for-workflow-run",
            "apps/create-installation-access-token",
            "rate-limit/get",
        ]
    )


def test_validator_catches_shape_errors() -> None:
    runner = SPEC["paths"]["/orgs/{org}/actions/runners/{runner_id}"]["get"]["responses"]["200"]
    schema = runner["content"]["application/json"]["schema"]
    good = {
        "id": 1,
        "name": "a",
        "os": "linux",
        "status": "online",
        "busy": False,
        "labels": [],
        "version": None,
    }
    assert validate(good, schema) == []
    assert validate({**good, "busy": "no"}, schema)
    assert validate({**good, "id": True}, schema)
    assert validate({k: v for k, v in good.items() if k != "labels"}, schema)
    assert validate({**good, "labels": [{"name": "x", "type": "other"}]}, schema)
    assert validate(
        None, {"oneOf": [{"type": "string", "nullable": True}, {"type": "integer", "nullable": True}]}
    )
    assert not validate(3, {"oneOf": [{"type": "string"}, {"type": "integer"}]})
    assert not validate("x", {"anyOf": [{"type": "string"}, {"type": "integer"}]})


# ---------------------------------------------------------------------------------------- listing


def test_pagination_over_250_runners(fake: FakeGitHub, gh: requests.Session) -> None:
    for index in range(250):
        fake.register_runner(ORG, f"runner-{index:03}", ["octo-org/pool"])
    base = f"{fake.url}/orgs/{ORG}/actions/runners"

    def page_url(page: int) -> str:
        return f"{base}?per_page=100&page={page}"

    first = gh.get(base, params={"per_page": 100})
    assert first.json()["total_count"] == 250
    assert len(first.json()["runners"]) == 100
    assert _links(first) == {"next": page_url(2), "last": page_url(3)}
    second = gh.get(_links(first)["next"])
    assert _links(second) == {
        "prev": page_url(1),
        "next": page_url(3),
        "last": page_url(3),
        "first": page_url(1),
    }
    third = gh.get(_links(second)["next"])
    assert _links(third) == {"prev": page_url(2), "first": page_url(1)}
    names = [r["name"] for page in (first, second, third) for r in page.json()["runners"]]
    assert names == [f"runner-{index:03}" for index in range(250)]
    assert third.headers["Link"].index('rel="prev"') < third.headers["Link"].index('rel="first"')


def test_per_page_defaults_to_30_and_caps_at_100(fake: FakeGitHub, gh: requests.Session) -> None:
    for index in range(130):
        fake.register_runner(REPO, f"r{index}")
    base = f"{fake.url}/repos/{REPO}/actions/runners"
    assert len(gh.get(base).json()["runners"]) == 30
    assert _links(gh.get(base))["last"].endswith("page=5")
    capped = gh.get(base, params={"per_page": 500})
    assert len(capped.json()["runners"]) == 100
    assert _links(capped)["last"] == f"{base}?per_page=500&page=2"
    assert "Link" not in gh.get(f"{fake.url}/orgs/{ORG}/actions/runners").headers


def test_name_filter_and_runner_shape(fake: FakeGitHub, gh: requests.Session) -> None:
    fake.register_runner(ORG, "pod-a", ["default/pool", "gpu"], busy=True)
    fake.register_runner(ORG, "pod-b", ["default/pool"], status="offline")
    body = gh.get(f"{fake.url}/orgs/{ORG}/actions/runners", params={"name": "pod-a"}).json()
    assert body["total_count"] == 1
    runner = body["runners"][0]
    assert (runner["name"], runner["status"], runner["busy"], runner["os"]) == (
        "pod-a",
        "online",
        True,
        "linux",
    )
    assert [(label["name"], label["type"]) for label in runner["labels"]] == [
        ("self-hosted", "read-only"),
        ("Linux", "read-only"),
        ("X64", "read-only"),
        ("default/pool", "custom"),
        ("gpu", "custom"),
    ]
    assert runner == fake.runner(ORG, "pod-a")


def test_repo_and_org_runners_are_separate(fake: FakeGitHub, gh: requests.Session) -> None:
    org_runner = fake.register_runner(ORG, "shared")
    assert gh.get(f"{fake.url}/repos/{REPO}/actions/runners").json() == {"total_count": 0, "runners": []}
    assert gh.get(f"{fake.url}/repos/{REPO}/actions/runners/{org_runner}").status_code == 404
    assert gh.get(f"{fake.url}/orgs/{ORG}/actions/runners/{org_runner}").json()["name"] == "shared"
    # Scope names are case-insensitive on GitHub.
    assert gh.get(f"{fake.url}/orgs/OCTO-ORG/actions/runners").json()["total_count"] == 1


# ---------------------------------------------------------------------------------------- jobs


def _clocked(now: list[float]) -> FakeGitHub:
    return FakeGitHub(scopes=[ORG, REPO], clock=lambda: now[0])


def test_job_runs_on_an_idle_runner_with_all_its_labels_then_completes() -> None:
    now = [1_700_000_000.0]
    with _clocked(now) as fake:
        fake.register_runner(ORG, "gpu-less", ["octo-org/pool"])
        fake.register_runner(ORG, "offline", ["octo-org/pool", "gpu"], status="offline")
        fake.register_runner(ORG, "busy", ["octo-org/pool", "gpu"], busy=True)
        fake.register_runner(ORG, "match", ["Octo-Org/Pool", "GPU"], ephemeral=True)
        job_id = fake.queue_job("octo-org/app", ["self-hosted", "linux", "octo-org/pool", "gpu"], 30)
        job = fake.job(job_id)
        assert (job["status"], job["runner_name"], job["conclusion"]) == ("in_progress", "match", None)
        assert job["runner_id"] == fake.runner(ORG, "match")["id"]
        assert fake.runner(ORG, "match")["busy"] is True
        now[0] += 29
        assert fake.job(job_id)["status"] == "in_progress"
        now[0] += 1
        done = fake.job(job_id)
        assert (done["status"], done["conclusion"]) == ("completed", "success")
        assert done["completed_at"] == "2023-11-14T22:13:50Z"
        # GitHub removes an ephemeral runner after its job.
        assert [r["name"] for r in fake.runners(ORG)] == ["gpu-less", "offline", "busy"]


def test_jobs_stay_queued_without_a_matching_runner_in_scope(fake: FakeGitHub) -> None:
    fake.register_runner(ORG, "org-runner", ["pool"])
    fake.register_runner(REPO, "repo-runner", ["pool"])
    elsewhere = fake.queue_job("other-org/app", ["pool"], 5)
    other_repo = fake.queue_job("octo/other", ["pool"], 5)
    missing_label = fake.queue_job("octo-org/app", ["pool", "gpu"], 5)
    assert [fake.job(j)["status"] for j in (elsewhere, other_repo, missing_label)] == ["queued"] * 3
    assert fake.job(elsewhere)["runner_id"] is None
    # A job of the runner's own repository, and one of a repository of the runner's org.
    assert fake.job(fake.queue_job(REPO, ["pool"], 5))["runner_name"] == "repo-runner"
    assert fake.job(fake.queue_job("OCTO-ORG/app", ["pool"], 5))["runner_name"] == "org-runner"
    # Runners are busy now: the next job waits for one to finish.
    waiting = fake.queue_job(REPO, ["pool"], 5)
    assert fake.job(waiting)["status"] == "queued"
    fake.complete_job(REPO, "repo-runner")
    assert fake.job(waiting)["runner_name"] == "repo-runner"


def test_job_refuses_bad_input(fake: FakeGitHub) -> None:
    with pytest.raises(ValueError, match="repository"):
        fake.queue_job(ORG, ["pool"], 1)
    with pytest.raises(ValueError, match="labels"):
        fake.queue_job(REPO, [], 1)
    with pytest.raises(ValueError, match="negative"):
        fake.queue_job(REPO, ["pool"], -1)
    with pytest.raises(LookupError, match="no job 5"):
        fake.job(5)


def test_run_and_job_listings(fake: FakeGitHub, gh: requests.Session) -> None:
    fake.register_runner(REPO, "r1", ["pool"])
    first = fake.queue_job(REPO, ["pool"], 60)
    queued = [fake.queue_job(REPO, ["pool"], 60, name=f"job-{n}") for n in range(34)]
    fake.queue_job("octo/other", ["pool"], 60)
    runs_url = f"{fake.url}/repos/{REPO}/actions/runs"
    page = gh.get(runs_url)
    body = page.json()
    assert body["total_count"] == 35
    assert len(body["workflow_runs"]) == 30
    assert _links(page)["last"] == f"{runs_url}?page=2"
    newest = body["workflow_runs"][0]
    assert newest["id"] == fake.job(queued[-1])["run_id"]
    assert (newest["status"], newest["run_number"], newest["repository"]["full_name"]) == ("queued", 35, REPO)
    in_progress = gh.get(runs_url, params={"status": "in_progress"}).json()
    assert [run["id"] for run in in_progress["workflow_runs"]] == [fake.job(first)["run_id"]]

    job = fake.job(first)
    listed = gh.get(f"{fake.url}/repos/{REPO}/actions/runs/{job['run_id']}/jobs").json()
    assert listed == {"total_count": 1, "jobs": [job]}
    single = gh.get(job["url"])
    assert single.json() == job
    assert job["url"] == f"{fake.url}/repos/{REPO}/actions/jobs/{first}"
    assert job["html_url"].startswith(f"{fake.url}/{REPO}/actions/runs/")
    etag = single.headers["ETag"]
    assert gh.get(job["url"], headers={"If-None-Match": etag}).status_code == 304
    fake.complete_job(REPO, "r1")
    assert gh.get(job["url"], headers={"If-None-Match": etag}).json()["conclusion"] == "success"

    assert gh.get(f"{fake.url}/repos/octo/other/actions/jobs/{first}").status_code == 404
    assert gh.get(f"{fake.url}/repos/{REPO}/actions/runs/1/jobs").status_code == 404
    assert gh.get(f"{fake.url}/repos/nobody/nothing/actions/runs").status_code == 404


def test_job_control_api(fake: FakeGitHub) -> None:
    control = f"{fake.url}/_fake"
    created = requests.post(f"{control}/jobs", json={"scope": REPO, "labels": ["pool"], "duration_s": 1})
    assert created.status_code == 201
    job_id = created.json()["id"]
    assert requests.get(f"{control}/jobs/{job_id}").json() == fake.job(job_id)
    assert [j["id"] for j in requests.get(f"{control}/jobs", params={"scope": REPO}).json()] == [job_id]
    assert requests.get(f"{control}/jobs/1").status_code == 404
    assert requests.post(f"{control}/jobs", json={"scope": ORG, "labels": ["x"]}).status_code == 400


# ---------------------------------------------------------------------------------------- caching and budget


def test_etag_304_is_free_and_changes_with_content(fake: FakeGitHub, gh: requests.Session) -> None:
    base = f"{fake.url}/orgs/{ORG}/actions/runners"
    fake.register_runner(ORG, "a")
    first = gh.get(base)
    etag = first.headers["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{64}"', etag)
    used = int(first.headers["x-ratelimit-used"])
    for _ in range(3):
        cached = gh.get(base, headers={"If-None-Match": etag})
        assert cached.status_code == 304
        assert cached.content == b""
        assert cached.headers["ETag"] == etag
        assert int(cached.headers["x-ratelimit-used"]) == used
    assert gh.get(base, headers={"If-None-Match": f"W/{etag}"}).status_code == 304
    fake.set_runner(ORG, "a", busy=True)
    changed = gh.get(base, headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert int(changed.headers["x-ratelimit-used"]) == used + 1
    assert fake.count("actions/list-self-hosted-runners-for-org", conditional=True) == 5
    assert fake.count("actions/list-self-hosted-runners-for-org", status=304) == 4
    assert not any(r.counted for r in fake.requests if r.status == 304)


def test_budget_exhaustion_gives_403_with_headers() -> None:
    with FakeGitHub(scopes=[ORG], rate_limit=3) as fake, requests.Session() as session:
        session.headers["Authorization"] = f"token {PAT}"
        session.hooks["response"].append(ContractChecker(fake.url))
        url = f"{fake.url}/orgs/{ORG}/actions/runners"
        remaining = [session.get(url).headers["x-ratelimit-remaining"] for _ in range(3)]
        assert remaining == ["2", "1", "0"]
        refused = session.get(url)
        assert refused.status_code == 403
        assert refused.json()["message"].startswith("API rate limit exceeded for user ID 1.")
        assert refused.headers["x-ratelimit-remaining"] == "0"
        assert refused.headers["x-ratelimit-used"] == "3"
        assert int(refused.headers["x-ratelimit-reset"]) > time.time()
        # /rate_limit still answers and does not count; another token has its own budget.
        status = session.get(f"{fake.url}/rate_limit").json()
        assert status["resources"]["core"] == status["rate"]
        assert status["rate"]["remaining"] == 0
        other = session.get(url, headers={"Authorization": "token other"})
        assert other.status_code == 200
        assert other.headers["x-ratelimit-remaining"] == "2"


def test_budget_resets_after_the_window() -> None:
    now = [1_000_000.0]
    with FakeGitHub(scopes=[ORG], rate_limit=1, clock=lambda: now[0]) as fake, requests.Session() as session:
        session.headers["Authorization"] = f"token {PAT}"
        url = f"{fake.url}/orgs/{ORG}/actions/runners"
        assert session.get(url).headers["x-ratelimit-reset"] == str(1_000_000 + 3600)
        assert session.get(url).status_code == 403
        now[0] += 3600
        assert session.get(url).status_code == 200
        fake.set_remaining(0, token=PAT)
        assert session.get(url).status_code == 403


def test_secondary_limit_gives_429_with_retry_after(fake: FakeGitHub, gh: requests.Session) -> None:
    fake.secondary_limit_next(retry_after=7, path="/registration-token")
    url = f"{fake.url}/repos/{REPO}/actions/runners"
    assert gh.get(url).status_code == 200
    limited = gh.post(f"{url}/registration-token")
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert "secondary rate limit" in limited.json()["message"]
    assert gh.post(f"{url}/registration-token").status_code == 201


def test_concurrent_requests_never_overspend_the_budget() -> None:
    with FakeGitHub(scopes=[ORG], rate_limit=50) as fake:
        url = f"{fake.url}/orgs/{ORG}/actions/runners"
        statuses: list[int] = []
        lock = threading.Lock()

        def client() -> None:
            with requests.Session() as session:
                session.headers["Authorization"] = f"token {PAT}"
                for _ in range(10):
                    status = session.get(url).status_code
                    with lock:
                        statuses.append(status)

        workers = [threading.Thread(target=client) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert sorted(statuses) == [200] * 50 + [403] * 30
        assert fake.rate_limit_status(PAT).used == 50


# ---------------------------------------------------------------------------------------- errors


def test_busy_runner_delete_422_then_204(fake: FakeGitHub, gh: requests.Session) -> None:
    runner = fake.register_runner(REPO, "busy-pod", busy=True)
    url = f"{fake.url}/repos/{REPO}/actions/runners/{runner}"
    refused = gh.delete(url)
    assert refused.status_code == 422
    assert refused.json() == {
        "message": 'Bad request - Runner "busy-pod" is still running a job"',
        "documentation_url": "https://docs.github.com/rest/actions/self-hosted-runners"
        "#delete-a-self-hosted-runner-from-a-repository",
    }
    assert fake.runners(REPO)
    fake.set_runner(REPO, "busy-pod", busy=False)
    deleted = gh.delete(url)
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert fake.runners(REPO) == []
    assert gh.delete(url).status_code == 404


def test_unknown_scopes_and_paths_are_404(fake: FakeGitHub, gh: requests.Session) -> None:
    for path in ("/orgs/nope/actions/runners", "/repos/octo/nope/actions/runners/registration-token"):
        method = "POST" if path.endswith("token") else "GET"
        missing = gh.request(method, fake.url + path)
        assert missing.status_code == 404
        assert missing.json()["message"] == "Not Found"
        assert missing.json()["documentation_url"].startswith("https://docs.github.com/")
    assert gh.get(f"{fake.url}/orgs/{ORG}/actions/runners/abc").status_code == 404
    assert fake.count(status=404) == 3
    with pytest.raises(UnknownScopeError):
        fake.runners("nope")


def test_auto_create_makes_any_scope_exist() -> None:
    with FakeGitHub(auto_create=True) as fake:
        answer = requests.get(
            f"{fake.url}/orgs/anything/actions/runners", headers={"Authorization": "token t"}
        )
        assert answer.json() == {"total_count": 0, "runners": []}
        assert [str(scope) for scope in fake.scopes()] == ["anything"]


def test_credentials_401(fake: FakeGitHub, contract: ContractChecker) -> None:
    url = f"{fake.url}/orgs/{ORG}/actions/runners"
    with requests.Session() as session:
        session.hooks["response"].append(contract)
        missing = session.get(url)
        assert missing.status_code == 401
        assert missing.json()["message"] == "Requires authentication"
        fake.accept_token("ghp_good")
        assert (
            session.get(url, headers={"Authorization": "token ghp_bad"}).json()["message"]
            == "Bad credentials"
        )
        assert session.get(url, headers={"Authorization": "Bearer ghp_good"}).status_code == 200
        fake.revoke_token("ghp_good")
        assert session.get(url, headers={"Authorization": "token ghp_good"}).status_code == 401
    assert not any(r.counted for r in fake.requests if r.status == 401)


# ---------------------------------------------------------------------------------------- faults


def test_fail_next_skips_auth_and_budget(fake: FakeGitHub, gh: requests.Session) -> None:
    url = f"{fake.url}/orgs/{ORG}/actions/runners"
    fake.fail_next(2, status=502, method="GET")
    for _ in range(2):
        failed = gh.get(url)
        assert failed.status_code == 502
        assert "x-ratelimit-remaining" not in failed.headers
    assert gh.post(f"{url}/registration-token").status_code == 201
    recovered = gh.get(url)
    assert recovered.status_code == 200
    assert recovered.headers["x-ratelimit-used"] == "2"
    assert [r.status for r in fake.requests] == [502, 502, 201, 200]


def test_latency_delays_answers(fake: FakeGitHub, gh: requests.Session) -> None:
    fake.set_latency(0.2)
    started = time.monotonic()
    assert gh.get(f"{fake.url}/rate_limit").ok
    assert time.monotonic() - started >= 0.2
    fake.set_latency(1.0)
    with pytest.raises(requests.Timeout):
        gh.get(f"{fake.url}/rate_limit", timeout=0.1)


def test_hang_holds_until_the_client_gives_up(fake: FakeGitHub, gh: requests.Session) -> None:
    fake.hang_next(max_seconds=5)
    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        gh.get(f"{fake.url}/orgs/{ORG}/actions/runners", timeout=0.3)
    gh.close()  # the client hangs up; the fake must notice and let go
    assert fake.wait_for(lambda: fake.hanging == 0, timeout=2)
    assert time.monotonic() - started < 3
    assert fake.requests[0].status == 0
    assert gh.get(f"{fake.url}/orgs/{ORG}/actions/runners").status_code == 200


def test_stop_releases_hung_requests() -> None:
    fake = FakeGitHub(scopes=[ORG]).start()
    fake.hang_next(max_seconds=30)
    url = f"{fake.url}/orgs/{ORG}/actions/runners"
    errors: list[BaseException] = []

    def call() -> None:
        try:
            requests.get(url, headers={"Authorization": "token t"}, timeout=10)
        except requests.RequestException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert fake.wait_for(lambda: fake.hanging == 1, timeout=2)
    started = time.monotonic()
    fake.stop()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert errors
    assert time.monotonic() - started < 3


# ---------------------------------------------------------------------------------------- tokens


def test_registration_token_is_validated_on_use(fake: FakeGitHub, gh: requests.Session) -> None:
    issued = gh.post(f"{fake.url}/orgs/{ORG}/actions/runners/registration-token")
    assert issued.status_code == 201
    body = issued.json()
    assert re.fullmatch(r"[A-Z2-7]{29}", body["token"])
    # GitHub answers in Pacific time with milliseconds, not "Z": clients must parse offsets.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}-08:00", body["expires_at"])
    (issued_token,) = fake.tokens_issued(ORG)
    assert issued_token.token == body["token"]
    assert datetime.fromisoformat(body["expires_at"]).timestamp() == pytest.approx(
        issued_token.expires_at, abs=1
    )
    assert issued_token.expires_at - issued_token.issued_at == 3600

    runner = fake.register_runner_with_token(
        f"https://github.com/{ORG}", body["token"], "pod-1", ["default/p"]
    )
    assert fake.runner(ORG, runner)["labels"][-1]["name"] == "default/p"
    assert fake.token_uses(body["token"]) == 1
    with pytest.raises(RegistrationRejectedError, match="issued for octo-org"):
        fake.register_runner_with_token(REPO, body["token"], "pod-2")
    with pytest.raises(RegistrationRejectedError, match="not one the fake issued"):
        fake.register_runner_with_token(ORG, "MADEUP", "pod-3")
    with pytest.raises(RegistrationRejectedError, match="same name"):
        fake.register_runner_with_token(ORG, body["token"], "pod-1", replace=False)


def test_registration_token_expires() -> None:
    now = [2_000_000.0]
    with FakeGitHub(scopes=[REPO], registration_token_lifetime=60, clock=lambda: now[0]) as fake:
        answer = requests.post(
            f"{fake.url}/repos/{REPO}/actions/runners/registration-token",
            headers={"Authorization": "token t"},
        )
        token = answer.json()["token"]
        assert answer.json()["expires_at"] == "1970-01-23T19:34:20.000-08:00"
        now[0] += 59
        fake.register_runner_with_token(REPO, token, "early")
        now[0] += 1
        with pytest.raises(RegistrationRejectedError, match="expired"):
            fake.register_runner_with_token(REPO, token, "late")


def test_installation_token(fake: FakeGitHub, app_key: rsa.RSAPrivateKey, contract: ContractChecker) -> None:
    fake.app_keys = {"7": _pem(app_key)}
    url = f"{fake.url}/app/installations/42/access_tokens"
    with requests.Session() as app:
        app.hooks["response"].append(contract)
        minted = app.post(url, headers={"Authorization": f"Bearer {_app_jwt(app_key)}"})
        assert minted.status_code == 201
        body = minted.json()
        assert body["token"].startswith("ghs_")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["expires_at"])
        assert body["repository_selection"] == "all"
        assert body["permissions"]["organization_self_hosted_runners"] == "write"

        other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        forged = app.post(url, headers={"Authorization": f"Bearer {_app_jwt(other_key)}"})
        assert forged.status_code == 401
        too_long = app.post(url, headers={"Authorization": f"Bearer {_app_jwt(app_key, lifetime=3600)}"})
        assert "too far in the future" in too_long.json()["message"]
        future = app.post(url, headers={"Authorization": f"Bearer {_app_jwt(app_key, skew=300)}"})
        assert "'Issued at'" in future.json()["message"]
        pat = app.post(url, headers={"Authorization": f"token {PAT}"})
        assert pat.status_code == 401

        # The installation token works on the API and has the installation's budget.
        listing = app.get(
            f"{fake.url}/orgs/{ORG}/actions/runners", headers={"Authorization": f"token {body['token']}"}
        )
        assert listing.status_code == 200
    assert fake.requests[-1].credential == "installation:42"
    assert [t.token for t in fake.installation_tokens(42)] == [body["token"]]


def test_pygithub_works_against_the_fake(fake: FakeGitHub, app_key: rsa.RSAPrivateKey) -> None:
    for index in range(120):
        fake.register_runner(ORG, f"pg-{index}")
    github = Github(base_url=fake.url, auth=Auth.Token(PAT), lazy=True, retry=None, per_page=100)
    org = github.get_organization(ORG)
    assert len(list(org.get_self_hosted_runners())) == 120
    token = org.create_self_hosted_runner_registration_token()
    assert token.expires_at.utcoffset() is not None
    assert github.get_rate_limit().resources.core.remaining == 4997
    integration = GithubIntegration(auth=Auth.AppAuth(7, _pem(app_key)), base_url=fake.url, retry=None)
    assert integration.get_access_token(42).token.startswith("ghs_")


# ---------------------------------------------------------------------------------------- control


def test_request_log_and_counts(fake: FakeGitHub, gh: requests.Session) -> None:
    gh.get(f"{fake.url}/orgs/{ORG}/actions/runners")
    gh.get(f"{fake.url}/orgs/{ORG}/actions/runners")
    gh.post(f"{fake.url}/orgs/{ORG}/actions/runners/registration-token")
    gh.get(f"{fake.url}/nothing/here")
    assert fake.request_counts() == {
        "actions/list-self-hosted-runners-for-org": 2,
        "actions/create-registration-token-for-org": 1,
        "unknown": 1,
    }
    record = fake.requests[0]
    assert (record.method, record.path, record.status, record.conditional) == (
        "GET",
        f"/orgs/{ORG}/actions/runners",
        200,
        False,
    )
    fake.reset()
    assert fake.requests == []
    assert [str(s) for s in fake.scopes()] == [ORG, REPO]


def test_http_control_api(fake: FakeGitHub, gh: requests.Session) -> None:
    control = f"{fake.url}/_fake"
    assert requests.post(f"{control}/scopes", json={"repo": "octo/other"}).status_code == 201
    created = requests.post(f"{control}/runners", json={"scope": ORG, "name": "c1", "busy": True}).json()
    token = gh.post(f"{fake.url}/orgs/{ORG}/actions/runners/registration-token").json()["token"]
    registered = requests.post(
        f"{control}/register",
        json={"url": f"https://github.com/{ORG}", "token": token, "name": "c2", "labels": ["x"]},
    )
    assert registered.status_code == 201
    refused = requests.post(f"{control}/register", json={"scope": "octo/other", "token": token, "name": "c3"})
    assert refused.status_code == 422
    patched = requests.patch(f"{control}/runners/c1", json={"scope": ORG, "busy": False, "status": "offline"})
    assert (patched.json()["busy"], patched.json()["status"]) == (False, "offline")
    assert requests.get(f"{control}/tokens", params={"scope": ORG}).json()[0]["uses"] == 1
    names = [r["name"] for r in requests.get(f"{control}/runners", params={"scope": ORG}).json()]
    assert names == ["c1", "c2"]
    assert created["id"] == fake.runner(ORG, "c1")["id"]
    requests.post(f"{control}/faults", json={"fail": 1, "status": 503})
    assert gh.get(f"{fake.url}/rate_limit").status_code == 503
    requests.post(f"{control}/rate-limit", json={"remaining": 0})
    assert gh.get(f"{fake.url}/orgs/{ORG}/actions/runners").status_code == 403
    logged = requests.get(f"{control}/requests").json()
    assert [r["status"] for r in logged] == [201, 503, 403]
    assert requests.post(f"{control}/reset").status_code == 204
    assert fake.runners(ORG) == []


def test_ephemeral_runner_disappears_after_its_job(fake: FakeGitHub) -> None:
    fake.register_runner(ORG, "eph", ephemeral=True, busy=True)
    fake.register_runner(ORG, "keep", busy=True)
    fake.complete_job(ORG, "eph")
    fake.complete_job(ORG, "keep")
    assert [(r["name"], r["busy"]) for r in fake.runners(ORG)] == [("keep", False)]


def test_api_prefix_like_ghes() -> None:
    with FakeGitHub(scopes=[ORG], api_prefix="/api/v3") as fake:
        assert fake.url.endswith("/api/v3")
        headers = {"Authorization": "token t"}
        assert requests.get(f"{fake.url}/orgs/{ORG}/actions/runners", headers=headers).status_code == 200
        bare = fake.url.removesuffix("/api/v3")
        assert requests.get(f"{bare}/orgs/{ORG}/actions/runners", headers=headers).status_code == 404


def test_standalone_process_prints_its_url() -> None:
    command = [sys.executable, "-m", "testworld.fakegithub", "--port", "0", "--scope", ORG]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url)
            answer = requests.get(
                f"{url}/orgs/{ORG}/actions/runners", headers={"Authorization": "token t"}, timeout=5
            )
            assert answer.json() == {"total_count": 0, "runners": []}
        finally:
            process.terminate()
        assert process.wait(timeout=5) == 0
