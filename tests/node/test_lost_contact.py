"""A runner that dies mid-job on a real node: GitHub fails the job, the operator cleans up.

When a runner process dies without a word (OOM-killed, SIGKILLed, its machine gone), nothing
reports its job; GitHub fails the job once its lock runs out ("lost communication with the
server") and lists the runner offline and idle, still registered. The fake GitHub does the
same after ``lost_contact_seconds`` (shortened here from GitHub's 600 s). What a user must
then see: the job failed, no runner left registered without a pod, and the pool back at its
replicas with a fresh runner.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.stream import stream

from runnerpool import naming
from tests.e2e.runners import REPO, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, pool_pods, queue_jobs, registered_pods, wait_busy, wait_done
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

#: GitHub waits 600 s; a few seconds here, still many of the stand-in's renewals (a tenth each).
LOST_CONTACT_SECONDS = 5.0

#: Run in the runner container: SIGKILL the runner's listener (run.sh, the entrypoint's child;
#: the entrypoint is tini's, the container's PID 1),
#: leaving the job's process and nothing to renew or report the job. A process that exits while
#: the loop reads its /proc entry is skipped quietly (its read fails with ESRCH), so the output is
#: only the "killed PID" line.
_KILL_RUNNER = r"""
for status in /proc/[0-9]*/status; do
    pid="${status#/proc/}"; pid="${pid%/status}"; ppid=""
    { while read -r key value; do [[ "${key}" == PPid: ]] && ppid="${value}"; done <"${status}"; } 2>/dev/null
    mapfile -d '' parent 2>/dev/null <"/proc/${ppid}/cmdline" || continue
    [[ "${parent[*]}" == *runnerpool-runner-entrypoint* ]] || continue
    mapfile -d '' argv 2>/dev/null <"/proc/${pid}/cmdline" || continue
    if [[ "${argv[*]}" == *run.sh* ]]; then kill -9 "${pid}" && echo "killed ${pid}"; fi
done
"""


def _kill_runner(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """``kubectl exec POD -c runner -- bash -c ...``: what an OOM kill of the listener looks like."""
    output: str = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=naming.RUNNER_CONTAINER,
        command=["bash", "-c", _KILL_RUNNER],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    return output


def test_a_runner_killed_mid_job_fails_its_job_is_deregistered_and_its_pod_replaced(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    fake_github.lost_contact_seconds = LOST_CONTACT_SECONDS
    core = client.CoreV1Api(api_client)
    create_pool(api_client, namespace, node_pool("lost", replicas=1))
    [pod] = registered_pods(core, fake_github, namespace, "lost", 1)
    jobs = queue_jobs(fake_github, namespace, "lost", 1, 3600)
    assert wait_busy(core, fake_github, namespace, jobs) == [pod]

    killed = _kill_runner(core, namespace, pod)
    assert killed.startswith("killed "), f"no run.sh found in {pod}: {killed!r}"

    [done] = wait_done(fake_github, jobs).values()
    assert (done["conclusion"], done["runner_name"]) == ("failure", pod)
    assert "lost communication with the server" in fake_github.annotations(jobs[0])[0]
    # The operator deletes the offline runner and replaces its used-up pod with a fresh one.
    [fresh] = registered_pods(core, fake_github, namespace, "lost", 1)
    assert fresh != pod
    wait_for(
        lambda: sorted(pool_pods(core, namespace, "lost")) == [fresh],
        START_TIMEOUT,
        0.2,
        f"the killed runner's pod {pod} to go",
    )
    wait_for(
        lambda: [r["name"] for r in pool_runners(fake_github, REPO, namespace, "lost")] == [fresh],
        START_TIMEOUT,
        0.2,
        f"the killed runner {pod} to be deregistered, leaving only {fresh}",
    )
    assert fake_github.count("actions/delete-self-hosted-runner-from-repo", status=204) >= 1
    assert [j["conclusion"] for j in fake_github.jobs(REPO)] == ["failure"]
