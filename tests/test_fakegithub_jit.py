"""The fake GitHub's generate-jitconfig endpoints, in GitHub's shapes and codes.

Shapes and status codes come from tests/data/github/generate-jitconfig.json (GitHub's REST
description).  Beyond the description, as GitHub behaves: the runner exists, offline, from the
moment its config is generated, and a config runs once (the stand-in run.sh --jitconfig, the
way the real runner takes it, is refused a second time).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from github import Auth

from runnerpool.domain import Scope
from runnerpool.github.errors import GitHubError
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.github.types import JitRequest
from tests.helpers import wait_for
from testworld.fakegithub import FakeGitHub

DATA = Path(__file__).resolve().parent / "data" / "github"
STANDINS = Path(__file__).resolve().parent.parent / "testworld" / "runner_image"
REPO, ORG = "octo-org/hello", "octo-org"
PAT = "ghp_jitTestToken0123456789abcdefghij"
SPEC: dict[str, Any] = json.loads((DATA / "generate-jitconfig.json").read_text())


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[REPO, ORG], tokens=[PAT]) as server:
        yield server


def generate(fake: FakeGitHub, path: str, **body: Any) -> requests.Response:
    return requests.post(
        f"{fake.url}/{path}/actions/runners/generate-jitconfig",
        headers={"Authorization": f"token {PAT}"},
        json=body,
        timeout=5,
    )


def wanted(name: str = "pool-a-x2k4p") -> dict[str, Any]:
    return {"name": name, "runner_group_id": 1, "labels": ["team-a/pool-a", "linux"], "work_folder": "_work"}


@pytest.mark.parametrize("path", [f"repos/{REPO}", f"orgs/{ORG}"])
def test_a_jit_config_comes_with_its_runner_offline_in_githubs_shape(fake: FakeGitHub, path: str) -> None:
    answer = generate(fake, path, **wanted())

    assert answer.status_code == SPEC["status"] == 201
    body = answer.json()
    assert set(SPEC["response_required"]) <= body.keys()
    assert set(SPEC["runner_required"]) <= body["runner"].keys()
    assert set(body["runner"]) <= set(SPEC["body"]["runner"]) | {"ephemeral", "runner_group_id", "version"}
    runner = body["runner"]
    assert (runner["name"], runner["status"], runner["busy"], runner["ephemeral"]) == (
        "pool-a-x2k4p",
        "offline",
        False,
        True,
    )
    assert {"name": "team-a/pool-a", "type": "custom"} in [
        {k: v for k, v in lb.items() if k != "id"} for lb in runner["labels"]
    ]
    assert isinstance(body["encoded_jit_config"], str) and body["encoded_jit_config"]
    scope = REPO if path.startswith("repos") else ORG
    assert [(r["id"], r["status"]) for r in fake.runners(scope)] == [(runner["id"], "offline")]


def test_a_name_in_use_is_a_conflict(fake: FakeGitHub) -> None:
    assert generate(fake, f"repos/{REPO}", **wanted()).status_code == 201

    again = generate(fake, f"repos/{REPO}", **wanted())

    assert again.status_code == 409
    assert str(409) in SPEC["statuses"]
    assert "already exists" in again.json()["message"]


def test_an_unknown_repository_is_not_found(fake: FakeGitHub) -> None:
    answer = generate(fake, "repos/octo-org/nowhere", **wanted())

    assert answer.status_code == 404
    assert answer.json()["message"] == "Not Found"


@pytest.mark.parametrize("missing", SPEC["request_required"])
def test_a_request_without_a_required_field_is_refused(fake: FakeGitHub, missing: str) -> None:
    body = wanted()
    del body[missing]

    answer = generate(fake, f"repos/{REPO}", **body)

    assert answer.status_code == 422
    assert str(422) in SPEC["statuses"]
    assert fake.runners(REPO) == []


@pytest.mark.parametrize("count", [0, SPEC["labels_items"]["maxItems"] + 1])
def test_labels_outside_githubs_bounds_are_refused(fake: FakeGitHub, count: int) -> None:
    answer = generate(fake, f"repos/{REPO}", **{**wanted(), "labels": [f"l{i}" for i in range(count)]})

    assert answer.status_code == 422


def test_without_a_credential_it_is_refused(fake: FakeGitHub) -> None:
    answer = requests.post(
        f"{fake.url}/repos/{REPO}/actions/runners/generate-jitconfig", json=wanted(), timeout=5
    )

    assert answer.status_code in (401, 404)


def test_a_runner_that_never_ran_can_be_deleted(fake: FakeGitHub) -> None:
    runner = generate(fake, f"repos/{REPO}", **wanted()).json()["runner"]

    answer = requests.delete(
        f"{fake.url}/repos/{REPO}/actions/runners/{runner['id']}",
        headers={"Authorization": f"token {PAT}"},
        timeout=5,
    )

    assert answer.status_code == 204
    assert fake.runners(REPO) == []


def run_sh(tmp_path: Path, config: str, name: str) -> subprocess.Popen[bytes]:
    folder = tmp_path / name
    folder.mkdir()
    for script in STANDINS.glob("*.sh"):
        (folder / script.name).write_bytes(script.read_bytes())
        (folder / script.name).chmod(0o755)
    env = {"PATH": os.environ["PATH"], "RUNNER_POLL_SECONDS": "1"}
    return subprocess.Popen(
        ["bash", str(folder / "run.sh"), "--jitconfig", config],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_a_config_runs_once_and_a_second_run_with_it_is_refused(fake: FakeGitHub, tmp_path: Path) -> None:
    body = generate(fake, f"repos/{REPO}", **wanted()).json()
    first = run_sh(tmp_path, body["encoded_jit_config"], "first")
    try:
        wait_for(lambda: fake.runners(REPO)[0]["status"] == "online", 20, message="the JIT runner online")

        second = run_sh(tmp_path, body["encoded_jit_config"], "second")
        out, _ = second.communicate(timeout=20)

        assert second.returncode == 1
        assert b"has been used already" in out
        assert fake.runners(REPO)[0]["status"] == "online", "the first runner lost its session"
        job = fake.queue_job(REPO, ["team-a/pool-a"], 0.0)
        wait_for(lambda: fake.job(job)["status"] == "completed", 20, message="the JIT runner's job")
        assert fake.job(job)["runner_name"] == "pool-a-x2k4p"
        assert first.wait(timeout=20) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # Ephemeral: gone after its job; and its config does not bring it back (revoked, as the real
    # runner reports it, and exits).
    assert fake.runners(REPO) == []
    third = run_sh(tmp_path, body["encoded_jit_config"], "third")
    out, _ = third.communicate(timeout=20)
    assert b"has been revoked" in out
    assert fake.runners(REPO) == []


# -- the operator's client against GitHub's example and against the fake -----------------------


def test_the_client_sends_githubs_body_and_reads_githubs_answer() -> None:

    with responses.RequestsMock() as mock:
        mock.post(
            # PyGithub names the default port.
            re.compile(
                r"https://api\.github\.com(:443)?/repos/octo-org/hello/actions/runners/generate-jitconfig"
            ),
            json=SPEC["body"],
            status=201,
        )
        client = PyGithubClient.from_auth(Auth.Token("ghp_x"), "https://api.github.com")
        config = client.generate_jitconfig(
            Scope(repository=REPO),
            JitRequest(name="New runner", labels=("no-gpu",), work_folder="/runner/_work"),
        )
        sent = json.loads(mock.calls[0].request.body)

    assert (config.runner_id, config.encoded) == (
        SPEC["body"]["runner"]["id"],
        SPEC["body"]["encoded_jit_config"],
    )
    assert set(SPEC["request_required"]) <= sent.keys()
    assert sent == {
        "name": "New runner",
        "runner_group_id": 1,
        "labels": ["no-gpu"],
        "work_folder": "/runner/_work",
    }
    assert config.encoded not in repr(config)


def test_the_client_against_the_fake_makes_a_runner_and_reports_a_name_in_use(fake: FakeGitHub) -> None:

    client = PyGithubClient.from_auth(Auth.Token(PAT), fake.url)
    request = JitRequest(name="pool-a-x2k4p", labels=("team-a/pool-a",))

    config = client.generate_jitconfig(Scope(organization=ORG), request)
    with pytest.raises(GitHubError) as conflict:
        client.generate_jitconfig(Scope(organization=ORG), request)

    assert [r.id for r in client.list_runners(Scope(organization=ORG))] == [config.runner_id]
    assert conflict.value.status == 409
