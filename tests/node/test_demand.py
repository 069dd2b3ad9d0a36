"""Pools that follow demand, on the real node: real operator, real pods, real jobs.

The fake GitHub delivers signed ``workflow_job`` webhooks to the operator's receiver as its
jobs are queued, taken and completed (``testworld.fakegithub.webhooks``); a test may sign
them with the wrong secret or lose them, and the operator's poller is the repair.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, naming
from tests.e2e.conftest import NODE_RUNNER_SYNC_SECONDS, StartOperator
from tests.e2e.runners import REPO, get_pool
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import (
    conclusions,
    live_pods,
    online,
    pool_status,
    queue_jobs,
    registered_pods,
    wait_done,
)
from tests.pools import create_pool
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.webhooks import WebhookSender
from testworld.node.node import Node
from testworld.ports import free_port

SECRET = b"a webhook secret for the node tests"
TIMEOUT = 90.0
#: Long enough that no poll happens during a test that must see the webhook alone.
NO_POLLING = "3600"
#: Long enough for the idle pods to be deregistered and go while the job runs.
BUSY_JOB_SECONDS = 25.0


@dataclass
class Demand:
    """One test's world: its namespace, the fake GitHub and an operator that follows demand."""

    api_client: client.ApiClient
    namespace: str
    fake: FakeGitHub
    start_operator: StartOperator
    node: Node
    tmp_path: Path
    senders: list[WebhookSender] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def start(self, poll_interval: str = NO_POLLING) -> WebhookSender:
        """The operator, the webhook receiver apart, and the fake GitHub delivering to it."""
        secret_file = self.tmp_path / "webhook-secret"
        secret_file.write_bytes(SECRET + b"\n")
        port = free_port()
        self.start_operator(
            "--runner-image",
            self.node.runner_image.reference,
            "--runner-sync-interval",
            NODE_RUNNER_SYNC_SECONDS,
            "--demand-poll-interval",
            poll_interval,
        )
        self.start_operator(
            "--webhook-secret-file", str(secret_file), webhook_port=port, component="webhook-receiver"
        )
        sender = self.fake.send_webhooks(f"http://127.0.0.1:{port}/webhook", SECRET)
        self.senders.append(sender)
        return sender

    def pool(self, name: str, *, min_replicas: int = 0, max_replicas: int = 4, min_idle: int = 0) -> str:
        """A pool following demand (3 s scale-down delay); the label its jobs ask for."""
        autoscaling = {
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "minIdle": min_idle,
            "scaleDownDelay": "3s",
        }
        create_pool(self.api_client, self.namespace, node_pool(name, replicas=0, autoscaling=autoscaling))
        return naming.pool_runner_label(self.namespace, name)

    def status(self, pool: str) -> dict[str, Any]:
        return pool_status(self.api_client, self.namespace, pool)

    def pods(self, pool: str) -> list[str]:
        return live_pods(self.core, self.namespace, pool)

    def idle_runners(self, pool: str) -> set[str]:
        """The pool's runners GitHub lists online and not busy: ready for the next job."""
        return {name for name, r in online(self.fake, self.namespace, pool).items() if not r["busy"]}

    def settled_at_zero(self, pool: str) -> None:
        """The pool decided 0 and has no pod: where a pool at minimum 0 rests."""
        wait_for(
            lambda: self.status(pool).get("desiredReplicas") == 0 and not self.pods(pool),
            TIMEOUT,
            0.2,
            f"pool {pool} at 0 runners",
        )

    def queue(self, label: str, seconds: float, *extra: str) -> int:
        return self.fake.queue_job(REPO, ["self-hosted", label, *extra], seconds)

    def jobs_reach(self, job_ids: list[int], status: str) -> list[dict[str, Any]]:
        def reached() -> list[dict[str, Any]]:
            found = [self.fake.job(i) for i in job_ids]
            return found if all(j["status"] == status for j in found) else []

        jobs: list[dict[str, Any]] = wait_for(reached, TIMEOUT, 0.2, f"jobs {job_ids} {status}")
        return jobs


@pytest.fixture
def demand(
    api_client: client.ApiClient,
    namespace: str,
    credentials: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    node: Node,
    tmp_path: Path,
) -> Iterator[Demand]:
    world = Demand(api_client, namespace, fake_github, start_operator, node, tmp_path)
    yield world
    for sender in world.senders:
        fake_github.stop_webhooks(sender)


def test_jobs_queued_at_zero_start_pods_that_run_them_then_the_pool_returns_to_zero(demand: Demand) -> None:
    hook = demand.start()
    label = demand.pool("burst")
    demand.settled_at_zero("burst")

    done = demand.jobs_reach([demand.queue(label, 2.0) for _ in range(3)], "completed")
    assert [j["conclusion"] for j in done] == ["success"] * 3
    # Each ran on a runner pod of the pool (runners register under their pod's name).
    assert all(j["runner_name"].startswith("burst-") for j in done)
    assert len({j["runner_name"] for j in done}) == 3, "one ephemeral runner per job"
    demand.settled_at_zero("burst")
    assert {d.status for d in hook.deliveries} == {200}


def test_a_delivery_with_a_bad_signature_changes_nothing(demand: Demand) -> None:
    hook = demand.start()
    label = demand.pool("signed")
    demand.settled_at_zero("signed")

    hook.sign_with = b"not the webhook secret"
    demand.queue(label, 1.0)
    assert hook.wait_idle()

    assert [d.status for d in hook.deliveries] == [401]
    after = get_pool(demand.api_client, demand.namespace, "signed") or {}
    assert "demand" not in after.get("status", {}), "an unverified delivery recorded nothing"
    assert after["status"]["desiredReplicas"] == 0
    assert demand.pods("signed") == []


def test_a_lost_delivery_is_repaired_by_polling(demand: Demand) -> None:
    hook = demand.start(poll_interval="2")
    hook.drop = lambda action, job: action == "queued"
    label = demand.pool("lost")
    demand.settled_at_zero("lost")

    [done] = demand.jobs_reach([demand.queue(label, 1.0)], "completed")
    assert done["conclusion"] == "success" and done["runner_name"].startswith("lost-")
    assert [d.dropped for d in hook.deliveries if d.action == "queued"] == [True]
    demand.settled_at_zero("lost")


def test_a_job_whose_labels_no_pool_has_scales_nothing(demand: Demand) -> None:
    hook = demand.start(poll_interval="1")
    label = demand.pool("picky")
    demand.settled_at_zero("picky")

    foreign = demand.queue(label, 1.0, "gpu")
    assert hook.wait_idle()
    assert [d.status for d in hook.deliveries] == [200]
    # A matching job queued after it, and run: by then the poller has seen both several times.
    [done] = demand.jobs_reach([demand.queue(label, 0.5)], "completed")
    assert done["conclusion"] == "success"

    status = demand.status("picky")
    assert str(foreign) not in (status.get("demand") or {}).get("jobs", {})
    assert demand.fake.job(foreign)["status"] == "queued", "no runner of the pool was made for it"
    demand.settled_at_zero("picky")


def test_scaling_down_never_kills_a_busy_runner(demand: Demand) -> None:
    """The demand falls below the pods while one runs a job: only idle runners go.

    The minimum drops the moment GitHub shows the job in progress, before the operator's
    runner listing has marked the pod busy: the deregistration GitHub refuses for a busy
    runner is what keeps it.
    """
    demand.start()
    demand.pool("shrink", min_replicas=3)
    first = registered_pods(demand.core, demand.fake, demand.namespace, "shrink", 3)
    jobs = queue_jobs(demand.fake, demand.namespace, "shrink", 1, BUSY_JOB_SECONDS)
    [busy] = [j["runner_name"] for j in demand.jobs_reach(jobs, "in_progress")]

    client.CustomObjectsApi(demand.api_client).patch_namespaced_custom_object(
        api.GROUP,
        api.VERSION,
        demand.namespace,
        api.PLURAL,
        "shrink",
        {"spec": {"autoscaling": {"minReplicas": 0}}},
    )
    wait_for(
        lambda: demand.pods("shrink") == [busy],
        TIMEOUT,
        0.2,
        f"the idle pods {sorted(set(first) - {busy})} to go and the busy {busy} to stay",
    )
    assert demand.fake.job(jobs[0])["status"] == "in_progress"
    assert demand.status("shrink").get("desiredReplicas") == 1, "busy 1 + queued 0"

    [done] = wait_done(demand.fake, jobs).values()
    assert (done["conclusion"], done["runner_name"]) == ("success", busy)
    demand.settled_at_zero("shrink")
    assert conclusions(demand.fake) == ["success"]


def test_a_warm_buffer_takes_a_job_at_once_and_is_refilled_while_it_runs(demand: Demand) -> None:
    """minIdle 2: two runners listen before any job; one takes the first job (no pod start in
    its way), the next idle one starts as the job is queued, and after it the pool is back at
    two idle runners, the used-up one gone."""
    demand.start()
    label = demand.pool("warm", min_idle=2)
    first = registered_pods(demand.core, demand.fake, demand.namespace, "warm", 2)
    assert demand.fake.jobs(REPO) == [] and demand.idle_runners("warm") == set(first)
    assert demand.status("warm")["desiredReplicas"] == 2

    job = demand.queue(label, BUSY_JOB_SECONDS)
    [taken] = demand.jobs_reach([job], "in_progress")
    taker = taken["runner_name"]
    assert taker in first, f"the job waited for a new pod ({taker}) instead of an idle runner of {first}"

    def refilled() -> set[str]:
        idle = demand.idle_runners("warm") - {taker}
        return idle if len(idle) == 2 else set()

    refill = wait_for(refilled, TIMEOUT, 0.2, "two idle runners beside the busy one")
    assert demand.fake.job(job)["status"] == "in_progress", "the buffer was back while the job ran"
    assert set(first) - {taker} <= refill

    [done] = demand.jobs_reach([job], "completed")
    assert (done["conclusion"], done["runner_name"]) == ("success", taker)
    wait_for(
        lambda: (
            len(pods := demand.pods("warm")) == 2
            and set(pods) == demand.idle_runners("warm")
            and demand.status("warm").get("desiredReplicas") == 2
        ),
        TIMEOUT,
        0.2,
        "the pool back at two idle runners",
    )
    assert taker not in demand.pods("warm")
    assert conclusions(demand.fake) == ["success"]
