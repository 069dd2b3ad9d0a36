"""What a user sees of runner pods on a real node: registration, jobs, SIGTERM, pool deletion.

Every pod here is the operator's own (real operator process, real pod spec) running the
project's real entrypoint as uid 1001 in the runner test image, with the stand-ins for the
actions runner talking to the fake GitHub on the node's bridge.
"""

from __future__ import annotations

from kubernetes import client

from runnerpool import api, naming
from tests.e2e.runners import REPO, get_pool, pool_runners
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import START_TIMEOUT, online, registered_pods, replacement_pod, wait_done
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess

JOB_SECONDS = 2.0


def test_runner_pods_register_with_the_mounted_token(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    create_pool(api_client, namespace, node_pool("reg", replicas=2))
    core = client.CoreV1Api(api_client)

    pods = registered_pods(core, fake_github, namespace, "reg", 2)

    runners = online(fake_github, namespace, "reg")
    assert sorted(runners) == pods
    wait_for(
        lambda: (get_pool(api_client, namespace, "reg") or {}).get("status", {}).get("readyReplicas") == 2,
        START_TIMEOUT,
        message="the pool to report 2 ready runners",
    )


def test_a_queued_job_runs_in_a_pod_which_is_then_replaced(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    create_pool(api_client, namespace, node_pool("jobs", replicas=1))
    core = client.CoreV1Api(api_client)
    [first] = registered_pods(core, fake_github, namespace, "jobs", 1)

    job_id = fake_github.queue_job(REPO, [naming.pool_runner_label(namespace, "jobs")], JOB_SECONDS)

    running = wait_for(
        lambda: (j := fake_github.job(job_id))["status"] == "in_progress" and j,
        START_TIMEOUT,
        message=f"job {job_id} to start",
    )
    assert running["runner_name"] == first
    done = wait_done(fake_github, [job_id])[job_id]
    assert (done["conclusion"], done["runner_name"]) == ("success", first)
    # One job per pod: the pod that ran it is replaced by a fresh one with a fresh runner.
    replacement_pod(core, fake_github, namespace, "jobs", first)
    wait_for(
        lambda: first not in {r["name"] for r in pool_runners(fake_github, REPO, namespace, "jobs")},
        START_TIMEOUT,
        message=f"runner {first} to be gone from GitHub",
    )


def test_an_idle_pod_deleted_stops_on_sigterm_and_its_runner_is_gone(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess, fake_github: FakeGitHub
) -> None:
    create_pool(api_client, namespace, node_pool("idle", replicas=1))
    core = client.CoreV1Api(api_client)
    [pod] = registered_pods(core, fake_github, namespace, "idle", 1)

    # The default grace period is 30 s: a pod gone well before it stopped on SIGTERM itself.
    core.delete_namespaced_pod(pod, namespace)

    wait_for(
        lambda: pod not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
        20.0,
        message=f"pod {pod} to stop on SIGTERM before its 30 s grace period ran out",
    )
    wait_for(
        lambda: pod not in {r["name"] for r in pool_runners(fake_github, REPO, namespace, "idle")},
        START_TIMEOUT,
        message=f"runner {pod} to be gone from GitHub",
    )
    [replacement] = registered_pods(core, fake_github, namespace, "idle", 1)
    assert replacement != pod


def test_deleting_a_pool_leaves_no_pod_and_no_runner(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    fake_github: FakeGitHub,
    gc_follows_pools: None,
) -> None:
    create_pool(api_client, namespace, node_pool("gone", replicas=2))
    core = client.CoreV1Api(api_client)
    registered_pods(core, fake_github, namespace, "gone", 2)

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "gone"
    )

    wait_for(lambda: get_pool(api_client, namespace, "gone") is None, START_TIMEOUT, message="the pool to go")
    wait_for(
        lambda: not core.list_namespaced_pod(namespace).items, START_TIMEOUT, message="every pod to be gone"
    )
    assert pool_runners(fake_github, REPO, namespace, "gone") == []
    assert not client.AppsV1Api(api_client).list_namespaced_deployment(namespace).items
