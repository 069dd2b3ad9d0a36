"""The runner image's real entrypoint.sh with the config.sh/run.sh stand-ins, as local processes.

The stand-ins (testworld/runner_image) talk to the fake GitHub on 127.0.0.1 exactly as they
will from a pod on the node: a runner registers with the mounted token, takes a queued job,
completes it and disappears (ephemeral); SIGTERM while idle stops it cleanly, while busy it
lets the job finish; a token GitHub refuses stops the pod with a message saying so. Nothing
here needs the node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers import wait_for
from testworld.fakegithub import FakeGitHub

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO_ROOT / "deploy" / "images" / "runner" / "entrypoint.sh"
STANDINS = REPO_ROOT / "testworld" / "runner_image"
REPO = "octo/hello"
ORG = "octo-org"
POD = "pool-a-5d8f9-x2k4p"
LABELS = "team-a/pool-a,gpu"
# Generous bounds for a busy CI machine; every wait below ends as soon as its condition holds.
TIMEOUT = 30
# Longer than TIMEOUT: a pod that stops on SIGTERM must not be waiting for its poll to end.
POLL_SECONDS = 45


@dataclass
class Pod:
    """One run of the entrypoint, its output kept in files so a full pipe never blocks it."""

    process: subprocess.Popen[bytes]
    out: Path

    def wait(self) -> int:
        return self.process.wait(timeout=TIMEOUT)

    def below(self, table: dict[int, tuple[int, list[str]]] | None = None) -> dict[int, list[str]]:
        """The pod's descendant processes: pid -> argv (what ``ps`` inside a pod would list)."""
        table = _processes() if table is None else table
        found: dict[int, list[str]] = {}
        for pid, (_parent, argv) in table.items():
            ancestor = table.get(pid, (0, []))[0]
            while ancestor:
                if ancestor == self.process.pid:
                    found[pid] = argv
                    break
                ancestor = table.get(ancestor, (0, []))[0]
        return found

    def running_a_job(self) -> bool:
        """A Runner.Worker runs below the pod, as below a real runner's listener during a job."""
        return any(argv[:1] == ["Runner.Worker"] for argv in self.below().values())

    def run_sh(self) -> int:
        """run.sh itself, not its job-renewal subshell (a fork of it, with the same argv)."""
        # One snapshot of /proc for both questions: a renewal subshell that ends between two
        # reads would otherwise be a script without a parent entry.
        table = _processes()
        scripts = {pid for pid, argv in self.below(table).items() if argv[1:2] == ["./run.sh"]}
        [pid] = [pid for pid in scripts if table[pid][0] not in scripts]
        return pid

    @property
    def log(self) -> str:
        return self.out.read_text()


def _processes() -> dict[int, tuple[int, list[str]]]:
    """Every process: pid -> (parent pid, argv)."""
    table: dict[int, tuple[int, list[str]]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            argv = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        table[int(proc.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), [a.decode() for a in argv])
    return table


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(scopes=[REPO, ORG], api_prefix="/api/v3") as server:
        yield server


def _token(fake: FakeGitHub, scope: str) -> str:
    path = (
        scope if scope.startswith("enterprises/") else f"repos/{scope}" if "/" in scope else f"orgs/{scope}"
    )
    answer = requests.post(
        f"{fake.url}/{path}/actions/runners/registration-token",
        headers={"Authorization": "token ghp_test"},
        timeout=5,
    )
    token: str = answer.json()["token"]
    return token


class Pods:
    """Starts entrypoint.sh runs in temporary runner directories; kills leftovers at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[Pod] = []

    def start(self, fake: FakeGitHub, token: str, **env: str) -> Pod:
        home = self.root / f"pod-{len(self.started)}"
        runner_dir = home / "home-runner"
        runner_dir.mkdir(parents=True)
        for script in STANDINS.glob("*.sh"):
            shutil.copy2(script, runner_dir / script.name)
        token_file = home / "runnertoken"
        token_file.write_text(token + "\n")
        config_dir = home / "runner-config"
        config_dir.mkdir()
        out = home / "pod.log"
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(runner_dir),
            "LANG": "C.UTF-8",
            "POD_NAME": POD,
            "RUNNER_REPO": REPO,
            "RUNNER_LABELS": LABELS,
            "GITHUB_URL": fake.url.removesuffix("/api/v3"),
            "RUNNER_DIR": str(runner_dir),
            "RUNNER_TOKEN_FILE": str(token_file),
            "RUNNER_CONFIG_DIR": str(config_dir),
            "RUNNER_WORKDIR": str(home / "work"),
            "RUNNER_POLL_SECONDS": str(POLL_SECONDS),
            **env,
        }
        with out.open("wb") as sink:
            # The pod's init container, then its runner container (which gets the signals).
            process = subprocess.Popen(
                ["bash", "-c", 'bash "$0" register && exec bash "$0" run', str(ENTRYPOINT)],
                cwd=runner_dir,
                env=environment,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        pod = Pod(process, out)
        self.started.append(pod)
        return pod

    def stop_all(self) -> None:
        for pod in self.started:
            if pod.process.poll() is None:
                pod.process.kill()
                pod.process.wait(timeout=TIMEOUT)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Pods]:
    started = Pods(tmp_path)
    yield started
    started.stop_all()


def _runner(fake: FakeGitHub, scope: str = REPO) -> dict[str, Any] | None:
    return next((r for r in fake.runners(scope) if r["name"] == POD), None)


def _online(fake: FakeGitHub) -> bool:
    runner = _runner(fake)
    return runner is not None and runner["status"] == "online"


def test_runner_takes_a_job_completes_it_and_is_gone(fake: FakeGitHub, pods: Pods) -> None:
    token = _token(fake, REPO)
    pod = pods.start(fake, token)
    assert fake.wait_for(lambda: _online(fake), timeout=TIMEOUT), pod.log
    runner = _runner(fake)
    assert runner is not None
    assert [label["name"] for label in runner["labels"]][-2:] == ["team-a/pool-a", "gpu"]
    assert runner["ephemeral"] is True
    assert fake.token_uses(token) == 1

    job_id = fake.queue_job(REPO, ["self-hosted", "team-a/pool-a"], 1.0)
    assert fake.wait_for(lambda: fake.job(job_id)["status"] == "in_progress", timeout=TIMEOUT), pod.log
    assert fake.job(job_id)["runner_name"] == POD
    assert _runner(fake)["busy"] is True
    assert fake.wait_for(lambda: fake.job(job_id)["status"] == "completed", timeout=TIMEOUT), pod.log
    assert fake.job(job_id)["conclusion"] == "success"
    assert pod.wait() == 0, pod.log
    assert _runner(fake) is None
    assert token not in pod.log
    assert "ephemeral runner done after one job" in pod.log


def test_an_enterprise_runner_joins_its_runner_group(fake: FakeGitHub, pods: Pods) -> None:
    enterprise = "enterprises/big-corp"
    fake.add_scope(enterprise=enterprise.removeprefix("enterprises/"))
    group_id = fake.add_runner_group(enterprise, "GPU runners")
    env = {"RUNNER_REPO": "", "RUNNER_ENTERPRISE": "big-corp", "RUNNER_GROUP": "gpu runners"}
    pod = pods.start(fake, _token(fake, enterprise), **env)

    assert fake.wait_for(lambda: _runner(fake, enterprise) is not None, timeout=TIMEOUT), pod.log
    runner = _runner(fake, enterprise)
    assert runner is not None and runner["runner_group_id"] == group_id

    missing = pods.start(fake, _token(fake, enterprise), **{**env, "RUNNER_GROUP": "ARM"})
    assert missing.wait() != 0
    assert "Could not find any self-hosted runner group named 'ARM'" in missing.log


def test_sigterm_while_idle_stops_cleanly_and_leaves_an_offline_runner(fake: FakeGitHub, pods: Pods) -> None:
    pod = pods.start(fake, _token(fake, REPO))
    # In its long poll, which would outlast TIMEOUT: the signal must cut it short.
    assert fake.wait_for(lambda: _online(fake) and fake.listening(REPO, POD), timeout=TIMEOUT), pod.log
    pod.process.send_signal(signal.SIGTERM)
    assert pod.wait() == 0, pod.log
    runner = _runner(fake)
    # Offline and idle, still registered as the real runner leaves it: the operator deletes it.
    assert runner is not None
    assert (runner["status"], runner["busy"]) == ("offline", False)
    answer = requests.delete(
        f"{fake.url}/repos/{REPO}/actions/runners/{runner['id']}",
        headers={"Authorization": "token ghp_test"},
        timeout=5,
    )
    assert answer.status_code == 204
    assert _runner(fake) is None
    assert "stopped while idle" in pod.log
    # Nothing queued afterwards lands on it.
    assert fake.job(fake.queue_job(REPO, ["team-a/pool-a"], 1))["status"] == "queued"


def _busy(fake: FakeGitHub, pods: Pods, seconds: float, **env: str) -> tuple[Pod, int]:
    """A pod whose runner is running a job of ``seconds``: its Runner.Worker is up."""
    pod = pods.start(fake, _token(fake, REPO), **env)
    assert fake.wait_for(lambda: _online(fake), timeout=TIMEOUT), pod.log
    job_id = fake.queue_job(REPO, ["team-a/pool-a"], seconds)
    assert fake.wait_for(lambda: fake.job(job_id)["status"] == "in_progress", timeout=TIMEOUT), pod.log
    wait_for(pod.running_a_job, TIMEOUT, 0.05, "the job's Runner.Worker to start")
    return pod, job_id


def _outcome(fake: FakeGitHub, job_id: int) -> tuple[str, str | None]:
    job = fake.job(job_id)
    return job["status"], job["conclusion"]


def test_sigterm_to_a_busy_pod_lets_its_job_finish(fake: FakeGitHub, pods: Pods) -> None:
    """What a namespace deletion, ``kubectl delete pod`` or a node shutdown does to the pod."""
    pod, job_id = _busy(fake, pods, 3)
    pod.process.send_signal(signal.SIGTERM)
    assert pod.wait() == 0, pod.log
    assert _outcome(fake, job_id) == ("completed", "success"), pod.log
    assert _runner(fake) is None
    assert "letting the job finish" in pod.log
    assert "ephemeral runner done after one job" in pod.log


def test_sigterm_to_a_busy_pod_cancels_the_job_when_the_busy_grace_runs_out(
    fake: FakeGitHub, pods: Pods
) -> None:
    pod, job_id = _busy(fake, pods, 600, RUNNER_BUSY_GRACE_SECONDS="1")
    pod.process.send_signal(signal.SIGTERM)
    assert pod.wait() == 0, pod.log
    assert _outcome(fake, job_id) == ("completed", "cancelled"), pod.log
    assert _runner(fake) is None
    assert "the job still runs after 1s" in pod.log


def test_sigterm_to_a_busy_run_sh_cancels_the_job(fake: FakeGitHub, pods: Pods) -> None:
    """The stand-in, like the real listener, cancels its job when it is told to stop itself."""
    pod, job_id = _busy(fake, pods, 600)
    os.kill(pod.run_sh(), signal.SIGTERM)
    assert pod.wait() == 0, pod.log
    assert _outcome(fake, job_id) == ("completed", "cancelled"), pod.log
    assert _runner(fake) is None
    assert "stopped while running job" in pod.log


def test_a_job_that_ended_just_before_the_runner_was_told_to_stop_is_a_success(
    fake: FakeGitHub, pods: Pods
) -> None:
    """A pod deleted as its job ends: the worker is gone, the listener not yet reporting.

    The real runner's worker reports its own result when it ends, so a listener stopped
    afterwards changes nothing; the stand-in cancelled such a job (the chaos soak hit it once
    in 31 deletions of busy pods). run.sh is held stopped across the worker's end, so the
    signal lands in that window every time.
    """
    pod, job_id = _busy(fake, pods, 1)
    run_sh = pod.run_sh()
    os.kill(run_sh, signal.SIGSTOP)
    try:
        wait_for(lambda: not pod.running_a_job(), TIMEOUT, 0.05, "the job's Runner.Worker to end")
        os.kill(run_sh, signal.SIGTERM)
    finally:
        os.kill(run_sh, signal.SIGCONT)
    assert pod.wait() == 0, pod.log
    assert _outcome(fake, job_id) == ("completed", "success"), pod.log
    assert "it ended success" in pod.log


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _renewals(fake: FakeGitHub) -> list[float]:
    """When the runner renewed its job (the answers GitHub gave 200)."""
    return [r.started for r in fake.listener_requests if r.path == "/renewjob" and r.status == 200]


def test_a_runner_renews_its_job_while_it_runs_so_a_long_job_outlives_the_lock(pods: Pods) -> None:
    # Without renewals the job would fail after 2 s; it runs 5 s.
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", lost_contact_seconds=2) as fake:
        pod = pods.start(fake, _token(fake, REPO))
        assert fake.wait_for(lambda: _online(fake), timeout=TIMEOUT), pod.log
        job_id = fake.queue_job(REPO, ["team-a/pool-a"], 5)
        assert pod.wait() == 0, pod.log
        assert fake.job(job_id)["conclusion"] == "success", pod.log
        renewals = _renewals(fake)
        assert len(renewals) >= 5, renewals  # every 0.2 s (a tenth of the lock) for 5 s
        completed = next(r for r in fake.listener_requests if r.path.endswith("/completed"))
        assert max(renewals) < completed.started, "the renewals end with the job"


def test_a_killed_runner_stops_renewing_and_github_fails_its_job(pods: Pods) -> None:
    """SIGKILL to run.sh, as when a listener crashes or is OOM-killed: nothing reports the job,
    its renewals stop, and GitHub fails it when the lock runs out."""
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", lost_contact_seconds=2) as fake:
        pod = pods.start(fake, _token(fake, REPO))
        assert fake.wait_for(lambda: _online(fake), timeout=TIMEOUT), pod.log
        job_id = fake.queue_job(REPO, ["team-a/pool-a"], 600)
        assert fake.wait_for(lambda: len(_renewals(fake)) >= 2, timeout=TIMEOUT), pod.log
        [run_sh] = [pid for pid in _children(pod.process.pid) if "run.sh" in _command(pid)]
        leftovers = _children(run_sh)  # the job's process and the renewal loop
        try:
            os.kill(run_sh, signal.SIGKILL)
            assert pod.wait() == 128 + signal.SIGKILL, pod.log
            assert fake.wait_for(lambda: fake.job(job_id)["status"] == "completed", timeout=TIMEOUT)
            job = fake.job(job_id)
            assert (job["conclusion"], job["runner_name"]) == ("failure", POD)
            assert "lost communication with the server" in fake.annotations(job_id)[0]
            runner = _runner(fake)
            assert runner is not None, "the runner stays registered, ephemeral as it is"
            assert (runner["status"], runner["busy"]) == ("offline", False)
        finally:
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_expired_token_is_refused_with_a_clear_message(pods: Pods) -> None:
    now = [1_800_000_000.0]
    with FakeGitHub(scopes=[REPO], api_prefix="/api/v3", clock=lambda: now[0]) as fake:
        token = _token(fake, REPO)
        now[0] += 3600
        pod = pods.start(fake, token)
        assert pod.wait() == 1
        assert "registration token was refused (expired" in pod.log
        assert "Http response code: 404" in pod.log
        assert token not in pod.log
        assert fake.runners(REPO) == []


def test_token_of_another_scope_is_refused(fake: FakeGitHub, pods: Pods) -> None:
    token = _token(fake, ORG)
    pod = pods.start(fake, token)
    assert pod.wait() == 1
    assert "config.sh failed" in pod.log
    assert "issued for another repository or organization" in pod.log
    assert token not in pod.log
    assert fake.runners(REPO) == [] and fake.runners(ORG) == []


@pytest.mark.parametrize(("step", "conclusion"), [("exit 0", "success"), ("exit 3", "failure")])
def test_a_jobs_script_runs_as_its_steps_and_its_summary_reaches_github(
    fake: FakeGitHub, pods: Pods, step: str, conclusion: str
) -> None:
    """The steal probe's way in: a job whose steps are a line of shell run by the runner."""
    pod = pods.start(fake, _token(fake, REPO))
    assert fake.wait_for(lambda: _online(fake), timeout=TIMEOUT), pod.log

    script = f'echo "ran as $(id -u) in $PWD" >>"$GITHUB_STEP_SUMMARY"; {step}'
    job_id = fake.queue_job(REPO, ["team-a/pool-a"], 0.0, script=script)

    assert fake.wait_for(lambda: fake.job(job_id)["status"] == "completed", timeout=TIMEOUT), pod.log
    assert fake.job(job_id)["conclusion"] == conclusion
    assert fake.summary(job_id) == f"ran as {os.getuid()} in {pod.out.parent / 'home-runner'}\n"
