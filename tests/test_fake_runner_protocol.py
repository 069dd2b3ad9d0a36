"""The runner's side of the fake GitHub: registration as GitHub refuses it, and the listener.

These are the calls the config.sh/run.sh stand-ins make (testworld/runner_image), made here
with plain HTTP so each refusal and state change is checked on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testworld.envtest.certs import private_server
from testworld.fakegithub import FakeGitHub

ORG = "octo-org"
REPO = "octo/hello"
PAT = {"Authorization": "token ghp_test"}


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[ORG, REPO], api_prefix="/api/v3") as server:
        yield server


def _web(fake: FakeGitHub) -> str:
    return fake.url.removesuffix("/api/v3")


def _token(fake: FakeGitHub, scope: str) -> str:
    path = f"orgs/{scope}" if "/" not in scope else f"repos/{scope}"
    answer = requests.post(f"{fake.url}/{path}/actions/runners/registration-token", headers=PAT, timeout=5)
    token: str = answer.json()["token"]
    return token


def _register(fake: FakeGitHub, token: str | None, url: str) -> requests.Response:
    headers = {} if token is None else {"Authorization": f"RemoteAuth {token}"}
    return requests.post(
        f"{fake.url}/actions/runner-registration",
        json={"url": url, "runner_event": "register"},
        headers=headers,
        timeout=5,
    )


def _kv(answer: requests.Response) -> dict[str, str]:
    return dict(line.split("=", 1) for line in answer.text.splitlines())


class Listener:
    """A runner process's calls, as run.sh makes them."""

    def __init__(self, fake: FakeGitHub, scope: str, name: str, *, ephemeral: bool = True) -> None:
        registered = _register(fake, _token(fake, scope), f"{_web(fake)}/{scope}")
        assert registered.status_code == 200, registered.text
        self.service = registered.json()["url"]
        tenant = {"Authorization": f"Bearer {registered.json()['token']}"}
        form = {"name": name, "labels": "pool,extra", "ephemeral": int(ephemeral), "replace": 1}
        created = requests.post(f"{self.service}/runners", data=form, headers=tenant, timeout=5)
        assert created.status_code == 201, created.text
        values = _kv(created)
        self.runner_id = int(values["runner_id"])
        self.auth = {"Authorization": f"Bearer {values['credential']}"}
        self.session = ""

    def open(self) -> None:
        answer = requests.post(f"{self.service}/sessions", headers=self.auth, timeout=5)
        assert answer.status_code == 201, answer.text
        self.session = _kv(answer)["session_id"]

    def poll(self, wait: float) -> requests.Response:
        url = f"{self.service}/sessions/{self.session}/job"
        return requests.get(url, params={"wait": wait}, headers=self.auth, timeout=wait + 5)

    def post(self, path: str, **form: str) -> requests.Response:
        return requests.post(f"{self.service}{path}", data=form, headers=self.auth, timeout=5)

    def close(self) -> requests.Response:
        return requests.delete(f"{self.service}/sessions/{self.session}", headers=self.auth, timeout=5)


# ---------------------------------------------------------------------------------------- registration


def test_runner_registration_accepts_a_live_token_of_the_scope(fake: FakeGitHub) -> None:
    answer = _register(fake, _token(fake, REPO), f"{_web(fake)}/{REPO}")
    assert answer.status_code == 200
    body = answer.json()
    assert body["token_schema"] == "OAuthAccessToken"
    assert body["url"] == f"{_web(fake)}/_actions"
    # The log entry is written just after the answer.
    assert fake.wait_for(lambda: fake.count("actions/runner-registration", status=200) == 1)


def test_runner_registration_refused_as_github_refuses_it() -> None:
    now = [1_800_000_000.0]
    with FakeGitHub(scopes=[ORG, REPO], api_prefix="/api/v3", clock=lambda: now[0]) as fake:
        web = _web(fake)
        repo_token, org_token = _token(fake, REPO), _token(fake, ORG)
        assert _register(fake, None, f"{web}/{REPO}").status_code == 401
        assert _register(fake, "MADEUPTOKEN", f"{web}/{REPO}").status_code == 404
        # A token of another repository or organization.
        assert _register(fake, org_token, f"{web}/{REPO}").status_code == 404
        assert _register(fake, repo_token, f"{web}/{ORG}").status_code == 404
        assert _register(fake, repo_token, f"{web}/octo/other").status_code == 404
        assert _register(fake, repo_token, f"{web}/{REPO}").status_code == 200
        now[0] += 3600
        expired = _register(fake, repo_token, f"{web}/{REPO}")
        assert expired.status_code == 404
        assert expired.json()["message"] == "Not Found"
        # Without the API prefix, as on GHES, there is nothing there.
        assert requests.post(f"{web}/actions/runner-registration", headers=PAT, timeout=5).status_code == 404


def test_over_tls_the_registration_answer_names_an_https_service_the_runner_then_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GHES behind a private CA: the service URL a runner is sent to is https too, else the
    runner's next call (its registration with the service) would speak http to a TLS port."""
    pki = private_server(tmp_path / "ca")
    (tmp_path / "ca.crt").write_text(pki.ca_pem)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.crt"))
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", tls=pki.server_context()) as fake:
        assert fake.url.startswith("https://")
        answer = _register(fake, _token(fake, REPO), f"{_web(fake)}/{REPO}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["url"] == f"{_web(fake)}/_actions"
        Listener(fake, REPO, "pod-tls").open()
        assert [r["name"] for r in fake.runners(REPO) if r["status"] == "online"] == ["pod-tls"]


# ---------------------------------------------------------------------------------------- listener


def test_a_runner_below_the_version_floor_is_refused_its_session_in_github_s_words(
    fake: FakeGitHub,
) -> None:
    fake.min_runner_version = "2.336.0"
    old = Listener(fake, REPO, "pod-old")
    refused = requests.post(
        f"{old.service}/sessions", data={"version": "2.334.0"}, headers=old.auth, timeout=5
    )
    assert refused.status_code == 403
    assert _kv(refused) == {"message": "Runner version v2.334.0 is deprecated and cannot receive messages."}
    assert fake.runner(REPO, "pod-old")["status"] == "offline"
    assert fake.runner(REPO, "pod-old")["version"] == "2.334.0"

    current = Listener(fake, REPO, "pod-current")
    opened = requests.post(
        f"{current.service}/sessions", data={"version": "2.336.0"}, headers=current.auth, timeout=5
    )
    assert opened.status_code == 201, opened.text
    # The floor is a setting of the running fake, as the tests' other settings are.
    settings = requests.post(
        f"{_web(fake)}/_fake/settings", json={"min_runner_version": "2.337.0"}, timeout=5
    )
    assert settings.json()["min_runner_version"] == "2.337.0"
    again = requests.post(
        f"{current.service}/sessions", data={"version": "2.336.0"}, headers=current.auth, timeout=5
    )
    assert again.status_code == 403


def test_listener_goes_online_takes_its_job_and_disappears_after_it(fake: FakeGitHub) -> None:
    runner = Listener(fake, REPO, "pod-1")
    assert fake.runner(REPO, "pod-1")["status"] == "offline"
    labels = [label["name"] for label in fake.runner(REPO, "pod-1")["labels"]]
    assert labels == ["self-hosted", "Linux", "X64", "pool", "extra"]
    job_id = fake.queue_job(REPO, ["self-hosted", "pool"], 2.5)
    assert fake.job(job_id)["status"] == "queued"  # nobody is listening yet
    runner.open()
    assert fake.runner(REPO, "pod-1")["status"] == "online"
    offered = runner.poll(5)
    assert offered.status_code == 200
    assert _kv(offered) == {
        "job_id": str(job_id),
        "run_id": str(fake.job(job_id)["run_id"]),
        "repository": REPO,
        "labels": "self-hosted,pool",
        "duration_s": "2.5",
    }
    # Offered is not started: GitHub shows the runner once it has taken the job.
    assert (fake.job(job_id)["status"], fake.job(job_id)["runner_id"]) == ("queued", None)
    assert runner.post(f"/jobs/{job_id}/started").status_code == 204
    assert fake.job(job_id)["runner_name"] == "pod-1"
    assert (fake.job(job_id)["status"], fake.runner(REPO, "pod-1")["busy"]) == ("in_progress", True)
    assert runner.post(f"/jobs/{job_id}/completed", conclusion="success").status_code == 204
    assert (fake.job(job_id)["status"], fake.job(job_id)["conclusion"]) == ("completed", "success")
    assert fake.runners(REPO) == []
    # The deleted runner's credentials are revoked; its session is gone.
    assert runner.close().status_code == 401


def test_idle_listener_stopping_leaves_an_offline_runner(fake: FakeGitHub) -> None:
    runner = Listener(fake, ORG, "pod-2")
    runner.open()
    assert runner.poll(0.1).status_code == 204
    assert runner.close().status_code == 204
    assert fake.runner(ORG, "pod-2")["status"] == "offline"
    # Deleting it is the operator's job, as with the real runner.
    job_id = fake.queue_job("octo-org/app", ["pool"], 1)
    assert fake.job(job_id)["status"] == "queued"


def test_every_listener_request_is_logged_with_its_runner_and_how_long_it_took(fake: FakeGitHub) -> None:
    """What a failing node test shows of each pod: which runner asked what, and when."""
    runner = Listener(fake, ORG, "pod-log")
    runner.open()
    assert runner.poll(0.3).status_code == 204
    assert runner.close().status_code == 204
    logged = [(r.method, r.path.split("/")[1], r.status, r.runner) for r in fake.listener_requests]
    assert logged == [
        ("POST", "runners", 201, None),  # the tenant credential names no runner yet
        ("POST", "sessions", 201, "pod-log"),
        ("GET", "sessions", 204, "pod-log"),
        ("DELETE", "sessions", 204, "pod-log"),
    ]
    poll = fake.listener_requests[2]
    assert poll.finished - poll.started >= 0.3


def test_poll_wakes_when_a_job_is_queued(fake: FakeGitHub) -> None:
    runner = Listener(fake, ORG, "pod-3")
    runner.open()
    answers: list[requests.Response] = []
    poller = threading.Thread(target=lambda: answers.append(runner.poll(30)))
    poller.start()
    assert fake.wait_for(lambda: fake.runner(ORG, "pod-3")["status"] == "online")
    job_id = fake.queue_job("octo-org/app", ["pool"], 1)
    poller.join(timeout=10)
    assert not poller.is_alive()
    assert _kv(answers[0])["job_id"] == str(job_id)


def test_offered_job_returns_to_the_queue_when_its_runner_stops(fake: FakeGitHub) -> None:
    first, second = Listener(fake, ORG, "pod-a"), Listener(fake, ORG, "pod-b")
    first.open()
    job_id = fake.queue_job("octo-org/app", ["pool"], 1)
    assert _kv(first.poll(5))["job_id"] == str(job_id)
    first.close()
    second.open()
    assert _kv(second.poll(5))["job_id"] == str(job_id)
    assert first.post(f"/jobs/{job_id}/started").status_code == 404


def test_dead_listener_goes_offline_and_replace_takes_the_name() -> None:
    now = [1_800_000_000.0]
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", clock=lambda: now[0], listener_timeout=60) as fake:
        old = Listener(fake, REPO, "pod-x")
        old.open()
        now[0] += 61
        assert fake.runner(REPO, "pod-x")["status"] == "offline"
        new = Listener(fake, REPO, "pod-x")
        assert new.runner_id != old.runner_id
        assert [r["id"] for r in fake.runners(REPO)] == [new.runner_id]
        assert old.post("/sessions").status_code == 401


def test_listener_refuses_bad_calls(fake: FakeGitHub) -> None:
    runner = Listener(fake, REPO, "pod-4")
    service = runner.service
    assert requests.post(f"{service}/sessions", timeout=5).status_code == 401
    assert (
        requests.post(f"{service}/runners", headers={"Authorization": "Bearer nope"}, timeout=5).status_code
        == 401
    )
    runner.open()
    job_id = fake.queue_job(REPO, ["pool"], 1)
    assert runner.post(f"/jobs/{job_id}/completed", conclusion="maybe").status_code == 400
    assert runner.post("/jobs/1/started").status_code == 404
    assert requests.get(f"{service}/nothing", headers=runner.auth, timeout=5).status_code == 404
