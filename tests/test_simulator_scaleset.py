"""The runner stand-in plays a scale set's runner pod: what issue 34's e2e tests stand on.

A pod of a scale set pool mounts its own JIT Secret; once the Secret holds a config the scale
set generated, the stand-in runs it (the runner is online on GitHub), the runner takes a job the
listener acquired for its scale set, and when the job ends GitHub removes the ephemeral runner
and the pod's runner container exits 0, as a kubelet reports it. A REST JIT config runs too.
Real control plane, fake GitHub over HTTP, no operator: the test plays the operator's part
(the Secret, the listener's session).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from runnerpool import naming
from runnerpool.pods.state import used_up
from tests.helpers import wait_for
from tests.test_fakegithub_scaleset import ORG, PAT, START, World
from tests.test_fakegithub_scaleset_runners import NAME, Listener, listed, scale_set_with_runner
from testworld.fakegithub import FakeGitHub
from testworld.simulator import RunnerSimulator

POOL = "ss-pool"


@pytest.fixture
def world() -> Iterator[World]:
    now = [START]
    with FakeGitHub(scopes=[ORG], tokens=[PAT], clock=lambda: now[0]) as fake:
        yield World(fake, now)


@pytest.fixture
def simulator(api_client: client.ApiClient, world: World, namespace: str) -> Iterator[RunnerSimulator]:
    with RunnerSimulator(api_client, world.fake, namespace) as sim:
        yield sim


def _labels() -> dict[str, str]:
    return {naming.MANAGED_BY_LABEL: naming.MANAGED_BY_VALUE, naming.POOL_LABEL: POOL}


def make_jit_pod(api_client: client.ApiClient, namespace: str, name: str) -> str:
    """A pod as a JIT pool makes it, with its own Secret, still empty; returns the Secret's name."""
    core = client.CoreV1Api(api_client)
    secret = naming.jit_secret_name(POOL, name[-5:])
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": secret, "labels": _labels()}, "type": "Opaque"}
    )
    volume = {"name": naming.JIT_VOLUME, "secret": {"secretName": secret}}
    container = {"name": naming.RUNNER_CONTAINER, "image": "runner"}
    spec = {"containers": [container], "volumes": [volume], "restartPolicy": "OnFailure"}
    core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": _labels()}, "spec": spec})
    return secret


def fill(api_client: client.ApiClient, namespace: str, secret: str, config: str) -> None:
    data = {naming.JIT_SECRET_KEY: base64.b64encode(config.encode()).decode()}
    client.CoreV1Api(api_client).patch_namespaced_secret(secret, namespace, {"data": data})


def pod(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = api_client.sanitize_for_serialization(
        client.CoreV1Api(api_client).read_namespaced_pod(name, namespace)
    )
    return found


def phase(api_client: client.ApiClient, namespace: str, name: str) -> str:
    return str((pod(api_client, namespace, name).get("status") or {}).get("phase"))


def test_a_scale_set_pod_comes_online_takes_its_job_and_ends_with_it(
    api_client: client.ApiClient, namespace: str, world: World, simulator: RunnerSimulator
) -> None:
    secret = make_jit_pod(api_client, namespace, "ss-pool-abcde")
    created, jit = scale_set_with_runner(world, "ss-pool-abcde")
    listener = Listener(world.session(created.id))
    request_id = world.fake.scale_sets.offer_job(NAME)
    assert listener.drain() == [("JobAvailable", ""), ("JobAssigned", "")]
    assert listed(world)["ss-pool-abcde"]["status"] == "offline"  # the Secret is still empty

    fill(api_client, namespace, secret, jit.encoded_jit_config)
    wait_for(lambda: simulator.registrations(namespace, POOL), message="the pod's runner to run")
    [registration] = simulator.registrations(namespace, POOL)
    assert registration.runner_id == jit.runner.id
    wait_for(lambda: listed(world)["ss-pool-abcde"]["busy"], message="the runner to take the job")
    assert listed(world)["ss-pool-abcde"]["status"] == "online"
    assert listener.drain() == [("JobStarted", "ss-pool-abcde")]
    wait_for(lambda: phase(api_client, namespace, "ss-pool-abcde") == "Running", message="Running")

    world.fake.scale_sets.complete_job(request_id)
    wait_for(lambda: phase(api_client, namespace, "ss-pool-abcde") == "Succeeded", message="the pod ended")
    assert used_up(pod(api_client, namespace, "ss-pool-abcde"))
    assert simulator.ended(namespace) == [f"{namespace}/ss-pool-abcde"]
    assert "ss-pool-abcde" not in listed(world)
    assert listener.drain() == [("JobCompleted", "ss-pool-abcde")]
    assert simulator.rejections == []


def test_scripted_jobs_run_on_the_pods_and_the_test_waits_for_them(
    api_client: client.ApiClient, namespace: str, world: World, simulator: RunnerSimulator
) -> None:
    created, _ = scale_set_with_runner(world, "unused")
    for name in ("ss-pool-aaaaa", "ss-pool-bbbbb"):
        secret = make_jit_pod(api_client, namespace, name)
        fill(
            api_client,
            namespace,
            secret,
            world.client.generate_jit_config(created.id, name).encoded_jit_config,
        )
    wait_for(lambda: len(simulator.registrations(namespace)) == 2, message="two runners online")
    listener = Listener(world.session(created.id))
    for _ in range(2):
        world.fake.scale_sets.offer_job(NAME, duration_s=5)
    listener.drain()
    assert sorted(name for kind, name in listener.seen if kind == "JobStarted") == [
        "ss-pool-aaaaa",
        "ss-pool-bbbbb",
    ]
    world.now[0] += 5
    assert world.fake.scale_sets.wait_completed(2, NAME, timeout=10)
    wait_for(lambda: len(simulator.ended(namespace)) == 2, message="both pods to end")
    assert [r["runnerName"] for r in world.fake.scale_sets.runners(NAME)] == ["unused"]


def test_a_used_or_foreign_config_is_refused_like_a_crashing_runner(
    api_client: client.ApiClient, namespace: str, world: World, simulator: RunnerSimulator
) -> None:
    _created, jit = scale_set_with_runner(world, "ss-pool-first")
    world.fake.scale_sets.use_jit_config(jit.encoded_jit_config)  # another process ran it
    secret = make_jit_pod(api_client, namespace, "ss-pool-again")
    fill(api_client, namespace, secret, jit.encoded_jit_config)
    wait_for(lambda: simulator.rejections, message="a rejection")
    assert "used already" in simulator.rejections[0]
    assert simulator.registrations(namespace) == []


def test_a_rest_jit_pod_runs_and_takes_a_label_job(
    api_client: client.ApiClient, namespace: str, world: World, simulator: RunnerSimulator
) -> None:
    fake = world.fake
    runner, config = fake.api_generate_jitconfig(
        fake.scopes()[0],
        fake._bases(),
        name="jit-pool-xyzab",
        labels=["team-a/jit-pool"],
        runner_group_id=1,
        work_folder="_work",
    )
    secret = make_jit_pod(api_client, namespace, "jit-pool-xyzab")
    fill(api_client, namespace, secret, config)
    wait_for(lambda: simulator.registrations(namespace), message="the REST JIT runner to run")
    assert fake.runner(ORG, runner["id"])["status"] == "online"
    job = fake.queue_job(f"{ORG}/app", ["team-a/jit-pool"], 1)
    assert fake.job(job)["status"] == "in_progress"
    world.now[0] += 1
    assert fake.job(job)["conclusion"] == "success"


def test_a_deleted_idle_pods_runner_is_offline_and_takes_no_job(
    api_client: client.ApiClient, namespace: str, world: World, simulator: RunnerSimulator
) -> None:
    secret = make_jit_pod(api_client, namespace, "ss-pool-gone1")
    created, jit = scale_set_with_runner(world, "ss-pool-gone1")
    fill(api_client, namespace, secret, jit.encoded_jit_config)
    wait_for(lambda: listed(world)["ss-pool-gone1"]["status"] == "online", message="the runner online")

    client.CoreV1Api(api_client).delete_namespaced_pod("ss-pool-gone1", namespace, grace_period_seconds=0)
    wait_for(lambda: listed(world)["ss-pool-gone1"]["status"] == "offline", message="the runner offline")
    listener = Listener(world.session(created.id))
    world.fake.scale_sets.offer_job(NAME)
    assert listener.drain() == [("JobAvailable", ""), ("JobAssigned", "")]
    assert world.fake.scale_sets.jobs(NAME)[0]["state"] == "assigned"
