"""The steal probe (testworld/runner_image/jobs/steal-probe.sh) finds a credential that is there.

The node test (tests/node/test_registration_secrets.py) trusts its "nothing found" only
because the probe, given a pod's reach with the pool's token or a live JIT config in it, says
"STOLEN" and where.  Here it walks a directory and a process table of the test's making.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testworld.fakegithub import FakeGitHub

PROBE = Path(__file__).resolve().parent.parent / "testworld" / "runner_image" / "jobs" / "steal-probe.sh"
REPO = "octo/hello"
PAT = "ghp_probeTestToken0123456789abcdef"
TIMEOUT = 120


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(
        scopes=[REPO], api_prefix="/api/v3", tokens=["ghp_probeTestToken0123456789abcdef"]
    ) as server:
        yield server


def registration_token(fake: FakeGitHub) -> str:
    answer = requests.post(
        f"{fake.url}/repos/{REPO}/actions/runners/registration-token",
        headers={"Authorization": f"token {PAT}"},
        timeout=5,
    )
    token: str = answer.json()["token"]
    return token


def probe(fake: FakeGitHub, root: Path, procfs: Path) -> subprocess.CompletedProcess[str]:
    web = fake.url.removesuffix("/api/v3")
    env = {"PATH": os.environ["PATH"], "PROBE_ROOT": str(root), "PROBE_PROC": str(procfs)}
    return subprocess.run(
        ["bash", str(PROBE), f"{web}/{REPO}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture
def reach(tmp_path: Path) -> tuple[Path, Path]:
    root, procfs = tmp_path / "root", tmp_path / "proc"
    (root / "home" / "runner").mkdir(parents=True)
    (root / "home" / "runner" / ".runner").write_text("service=http://x/_actions\nrunner_id=7\n")
    (procfs / "42").mkdir(parents=True)
    (procfs / "42" / "environ").write_bytes(b"HOME=/home/runner\0RUNNER_LABELS=team-a/pool-a,linux\0")
    return root, procfs


def test_a_pod_without_credentials_registers_nothing(fake: FakeGitHub, reach: tuple[Path, Path]) -> None:
    result = probe(fake, *reach)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 registered a runner" in result.stdout
    assert fake.runners(REPO) == []


def test_a_mounted_token_is_found_and_named_by_where_it_was(
    fake: FakeGitHub, reach: tuple[Path, Path]
) -> None:
    root, procfs = reach
    token = registration_token(fake)
    (root / "runner-token").mkdir()
    (root / "runner-token" / "runnertoken").write_text(token)

    result = probe(fake, root, procfs)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"STOLEN: a registration token, from {root}/runner-token/runnertoken" in result.stdout
    assert token not in result.stdout + result.stderr


def test_a_token_in_a_process_environment_is_found(fake: FakeGitHub, reach: tuple[Path, Path]) -> None:
    root, procfs = reach
    (procfs / "42" / "environ").write_bytes(b"A=1\0RUNNER_TOKEN=" + registration_token(fake).encode() + b"\0")

    result = probe(fake, root, procfs)

    assert result.returncode == 1
    assert f"STOLEN: a registration token, from {procfs}/42/environ" in result.stdout


def test_the_pools_github_credential_is_found(fake: FakeGitHub, reach: tuple[Path, Path]) -> None:
    root, procfs = reach
    (root / "etc").mkdir()
    (root / "etc" / "pat").write_text(f"token: {PAT}\n")

    result = probe(fake, root, procfs)

    assert result.returncode == 1
    assert (
        f"STOLEN: a GitHub API credential that issues registration tokens, from {root}/etc/pat"
        in result.stdout
    )


def jit_config(fake: FakeGitHub) -> str:
    answer = requests.post(
        f"{fake.url}/repos/{REPO}/actions/runners/generate-jitconfig",
        headers={"Authorization": f"token {PAT}"},
        json={"name": "pool-a-x2k4p", "runner_group_id": 1, "labels": ["team-a/pool-a"]},
        timeout=5,
    )
    config: str = answer.json()["encoded_jit_config"]
    return config


def test_an_unused_jit_config_is_found_and_a_used_one_is_not(
    fake: FakeGitHub, reach: tuple[Path, Path]
) -> None:
    root, procfs = reach
    (procfs / "42" / "cmdline").write_bytes(
        b"bash\0./run.sh\0--jitconfig\0" + jit_config(fake).encode() + b"\0"
    )

    first = probe(fake, root, procfs)
    # The probe ran it: now it is a used config, as a started runner's is.
    second = probe(fake, root, procfs)

    assert first.returncode == 1
    assert f"STOLEN: a JIT runner config that still runs, from {procfs}/42/cmdline" in first.stdout
    assert second.returncode == 0, second.stdout
    assert "(1 JIT runner configs); 0 registered a runner" in second.stdout
