"""A busy runner's job finishes on every way its pod can be told to go, not only eviction.

Eviction (``kubectl drain``, autoscalers) meets the busy PodDisruptionBudget and is refused
(tests/node/test_busy_runners.py). These paths bypass it and signal the pod directly: deleting
the pod, its pool or its namespace, ``kubectl drain --disable-eviction`` and a node shutdown.
Each one now lets the job run to ``success`` (the runner image's entrypoint holds SIGTERM back
from a busy runner for ``spec.busyGracePeriod``, and the pod's terminationGracePeriodSeconds is
longer), then the pod, pool or namespace goes, and no runner is left on GitHub without its
pod. Idle pods still stop at once.

A node shutdown is emulated: the kubelet's graceful shutdown needs systemd-logind over D-Bus,
which the sealed node has not (docs/busy-runners.md), so the test does to the runner's
container what the kubelet would: SIGTERM to its PID 1 through containerd.

Each test prints one line per path (job result, seconds from the deletion to the job's end and
to the pod's end) for the record.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import naming
from tests.e2e.runners import REPO, get_pool, namespace_gone, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import (
    START_TIMEOUT,
    conclusions,
    pool_pods,
    queue_jobs,
    registered_pods,
    wait_busy,
)
from tests.pools import create_pool
from testworld.envtest import assets
from testworld.envtest.controlplane import ControlPlane
from testworld.fakegithub import FakeGitHub
from testworld.node.node import NODE_NAME, Node
from testworld.simulator import OperatorProcess

#: Long enough to delete a busy pod well inside its job, short for the suite.
JOB_SECONDS = 20.0
#: What each pool gets: far longer than the job, so "success" proves the job was waited for.
BUSY_GRACE = "5m"
#: Longer than what is left of the job when its namespace is deleted, short for the namespace
#: controller, which comes back to a namespace with running pods after half their grace period.
NAMESPACE_BUSY_GRACE = "30s"
NAMESPACE_TIMEOUT = 150.0
#: An idle pod that gets SIGTERM is gone in this (its runner exits at once).
IDLE_STOP_SECONDS = 15.0


@dataclass
class Clock:
    """Seconds since one deletion, per thing the test watches end."""

    started: float = field(default_factory=time.monotonic)
    seen: dict[str, float] = field(default_factory=dict)

    def mark(self, what: str) -> None:
        self.seen.setdefault(what, round(time.monotonic() - self.started, 1))


def _kubectl(control_plane: ControlPlane, *args: str) -> list[str]:
    binary = assets.ensure_binaries(("kubectl",))["kubectl"]
    return [str(binary), f"--kubeconfig={control_plane.kubeconfig}", *args]


def _run_kubectl(control_plane: ControlPlane, *args: str) -> None:
    done = subprocess.run(
        _kubectl(control_plane, *args), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"


def _busy_pool(
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    fake: FakeGitHub,
    pool: str,
    replicas: int = 1,
    busy_grace: str = BUSY_GRACE,
) -> tuple[str, list[str], int]:
    """A pool with one pod running a job (marked busy) and ``replicas - 1`` idle ones."""
    create_pool(api_client, namespace, node_pool(pool, replicas=replicas, busyGracePeriod=busy_grace))
    pods = registered_pods(core, fake, namespace, pool, replicas)
    [job] = queue_jobs(fake, namespace, pool, 1, JOB_SECONDS)
    [busy] = wait_busy(core, fake, namespace, [job])
    return busy, [p for p in pods if p != busy], job


def _pod_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _follow(
    clock: Clock, what: dict[str, Callable[[], bool]], timeout: float = START_TIMEOUT
) -> dict[str, float]:
    """Poll every condition until all hold; when each first held, in seconds on ``clock``."""

    def all_seen() -> bool:
        for name, done in what.items():
            if name not in clock.seen and done():
                clock.mark(name)
        return all(name in clock.seen for name in what)

    try:
        wait_for(all_seen, timeout, 0.2, f"all of {sorted(what)}")
    except BaseException:
        print(f"seen so far, in seconds after the deletion: {clock.seen}")
        raise
    return {name: clock.seen[name] for name in what}


def _job_done(fake: FakeGitHub, job: int) -> Callable[[], bool]:
    return lambda: fake.job(job)["status"] == "completed"


def _record(path: str, fake: FakeGitHub, job: int | None, times: dict[str, float]) -> str:
    """Print one path's figures: the job's result (``job`` None: an idle pod) and when each thing ended."""
    result = "idle" if job is None else f"job {fake.job(job)['conclusion']}"
    line = f"{path}: {result}, " + ", ".join(f"{k} {v}s" for k, v in times.items())
    print(f"deletion path: {line}")
    return line


def _runner_names(fake: FakeGitHub, namespace: str, pool: str) -> set[str]:
    return {r["name"] for r in pool_runners(fake, REPO, namespace, pool)}


def _runners_are(fake: FakeGitHub, namespace: str, pool: str, names: set[str]) -> Callable[[], bool]:
    return lambda: _runner_names(fake, namespace, pool) == names


def _runner_container_id(core: client.CoreV1Api, namespace: str, name: str) -> str:
    pod = core.read_namespaced_pod(name, namespace)
    [status] = [s for s in pod.status.container_statuses or [] if s.name == naming.RUNNER_CONTAINER]
    container_id: str = status.container_id
    return container_id


def _runner_exited(core: client.CoreV1Api, namespace: str, name: str, codes: list[int]) -> Callable[[], bool]:
    """The pod's runner container has terminated (its exit codes collected in ``codes``), or
    the pod is already gone (a finished pod is replaced within a runner sync)."""

    def exited() -> bool:
        try:
            pod = core.read_namespaced_pod(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        for status in pod.status.container_statuses or []:
            if status.name == naming.RUNNER_CONTAINER and status.state.terminated is not None:
                codes.append(status.state.terminated.exit_code)
                return True
        return False

    return exited


def test_deleting_a_busy_pod_its_pool_or_stopping_its_container_lets_the_job_finish(
    *,
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    node: Node,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
) -> None:
    """Three paths at once, one pool each: ``kubectl delete pod`` (with an idle pod of the same
    pool deleted alongside), ``kubectl delete runnerpool`` and a node shutdown's SIGTERM."""
    core = client.CoreV1Api(api_client)
    deleted, [idle], deleted_job = _busy_pool(core, api_client, namespace, fake_github, "delpod", 2)
    in_pool, [], pool_job = _busy_pool(core, api_client, namespace, fake_github, "delpool")
    stopped, [], stopped_job = _busy_pool(core, api_client, namespace, fake_github, "nodestop")
    container = _runner_container_id(core, namespace, stopped)

    codes: list[int] = []
    clock = Clock()
    _run_kubectl(control_plane, "delete", "pod", deleted, idle, "-n", namespace, "--wait=false")
    _run_kubectl(control_plane, "delete", "runnerpool", "delpool", "-n", namespace, "--wait=false")
    node.signal_container(container, "SIGTERM")

    times = _follow(
        clock,
        {
            "idle pod gone": lambda: _pod_gone(core, namespace, idle),
            "delete pod: job ended": _job_done(fake_github, deleted_job),
            "delete pod: pod gone": lambda: _pod_gone(core, namespace, deleted),
            "delete pool: job ended": _job_done(fake_github, pool_job),
            "delete pool: pool gone": lambda: get_pool(api_client, namespace, "delpool") is None,
            "node shutdown: job ended": _job_done(fake_github, stopped_job),
            "node shutdown: runner exited": _runner_exited(core, namespace, stopped, codes),
        },
    )
    paths = {"delete pod": deleted_job, "delete pool": pool_job, "node shutdown": stopped_job}
    for path, job in paths.items():
        _record(path, fake_github, job, {k: v for k, v in times.items() if k.startswith(path)})
    _record("idle pod deleted", fake_github, None, {"gone": times["idle pod gone"]})

    assert conclusions(fake_github) == ["success"] * 3
    assert set(codes) <= {0}, f"the signalled runner container exited with {codes}"
    # The idle pod stopped at once, while the busy ones still ran their jobs; they went after.
    assert times["idle pod gone"] <= IDLE_STOP_SECONDS, times
    assert all(times["idle pod gone"] < times[f"{path}: job ended"] for path in paths), times
    assert times["delete pod: pod gone"] >= times["delete pod: job ended"], times
    assert in_pool not in pool_pods(core, namespace, "delpool")

    # No runner without its pod: the deleted pool has none left; the others' are their new pods.
    wait_for(
        lambda: not _runner_names(fake_github, namespace, "delpool"), START_TIMEOUT, 0.2, "no delpool runner"
    )
    for pool, replicas, old in (("delpod", 2, {deleted, idle}), ("nodestop", 1, {stopped})):
        fresh = registered_pods(core, fake_github, namespace, pool, replicas)
        assert not set(fresh) & old
        wait_for(
            _runners_are(fake_github, namespace, pool, set(fresh)),
            START_TIMEOUT,
            0.2,
            f"{pool}'s runners to be exactly its pods {fresh}",
        )


@pytest.fixture
def cordon_undone(control_plane: ControlPlane) -> Iterator[None]:
    """Whatever the test does to the node, later tests find it schedulable."""
    yield
    _run_kubectl(control_plane, "uncordon", NODE_NAME)


def test_drain_with_eviction_disabled_lets_the_busy_job_finish(
    *,
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    cordon_undone: None,
) -> None:
    """``kubectl drain --disable-eviction`` deletes pods past the disruption budget."""
    core = client.CoreV1Api(api_client)
    busy, [idle], job = _busy_pool(core, api_client, namespace, fake_github, "drained", 2)

    clock = Clock()
    drain = subprocess.Popen(
        _kubectl(
            control_plane,
            "drain",
            NODE_NAME,
            "--disable-eviction",
            "--delete-emptydir-data",
            "--ignore-daemonsets",
            f"--pod-selector={naming.POOL_LABEL}=drained",
            "--timeout=180s",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        times = _follow(
            clock,
            {
                "idle pod gone": lambda: _pod_gone(core, namespace, idle),
                "drain: job ended": _job_done(fake_github, job),
                "drain: pod gone": lambda: _pod_gone(core, namespace, busy),
                "drain: kubectl drain done": lambda: drain.poll() is not None,
            },
        )
        output, _ = drain.communicate(timeout=10)
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    _record(
        "drain --disable-eviction",
        fake_github,
        job,
        {k: v for k, v in times.items() if k.startswith("drain")},
    )
    _record("idle pod drained", fake_github, None, {"gone": times["idle pod gone"]})
    assert drain.returncode == 0, output
    assert conclusions(fake_github) == ["success"]
    assert times["idle pod gone"] <= IDLE_STOP_SECONDS, times
    assert times["idle pod gone"] < times["drain: job ended"] <= times["drain: pod gone"], times
    # The node is cordoned: the pool's new pods wait, and no runner is left on GitHub.
    wait_for(
        lambda: not _runner_names(fake_github, namespace, "drained"), START_TIMEOUT, 0.2, "no runner left"
    )
    assert pool_pods(core, namespace, "drained"), "the pool keeps its (pending) replacements"


def test_deleting_the_namespace_lets_the_busy_job_finish(
    *,
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
) -> None:
    """The namespace controller deletes pods directly (deletecollection), past the budget.

    It looks at a namespace whose pods are still running again only after half their grace
    period (or at its 5-minute resync): with the busy grace of 30 s here (grace period 120 s)
    the namespace goes about a minute after its deletion, however early the job ends.
    """
    core = client.CoreV1Api(api_client)
    busy, [idle], job = _busy_pool(
        core, api_client, namespace, fake_github, "nsgone", 2, NAMESPACE_BUSY_GRACE
    )

    clock = Clock()
    _run_kubectl(control_plane, "delete", "namespace", namespace, "--wait=false")

    times = _follow(
        clock,
        {
            "idle pod gone": lambda: _pod_gone(core, namespace, idle),
            "delete namespace: job ended": _job_done(fake_github, job),
            "delete namespace: pod gone": lambda: _pod_gone(core, namespace, busy),
            "delete namespace: namespace gone": lambda: namespace_gone(core, namespace),
        },
        NAMESPACE_TIMEOUT,
    )
    _record("delete namespace", fake_github, job, {k: v for k, v in times.items() if k.startswith("delete")})
    _record("idle pod in a deleted namespace", fake_github, None, {"gone": times["idle pod gone"]})
    assert conclusions(fake_github) == ["success"]
    assert times["idle pod gone"] <= IDLE_STOP_SECONDS, times
    assert times["idle pod gone"] < times["delete namespace: job ended"], times
    assert times["delete namespace: job ended"] <= times["delete namespace: pod gone"], times
    assert not _runner_names(fake_github, namespace, "nsgone"), "a runner outlived its namespace"
