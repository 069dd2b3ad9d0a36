"""The reconciler of a pool that follows demand, against the real API server.

Demand is recorded the way the webhook receiver records it (``DemandWriter`` writing
``status.demand``); the reconciler must act on the autoscaler's decision, write it as
``status.desiredReplicas``, and leave ``status.demand`` alone: not null it in its status
patch, and not see a difference in it on every pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client
from kubernetes.informer import MODIFIED
from prometheus_client import REGISTRY

from runnerpool import api, naming
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import sign
from runnerpool.demand.verification import Verifier
from runnerpool.demand.writer import DemandWriter
from runnerpool.echoes import Echoes
from runnerpool.events import KubeEventRecorder
from runnerpool.fakes import FakePoolSecrets, FakeRunnerJobs
from runnerpool.github.jobs import Job, parse_delivery
from runnerpool.naming import BUSY_LABEL, BUSY_VALUE
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.informers import Event
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings, QueueSettings, Settings
from tests.demand_payloads import API, delivery, job_object
from tests.github_mocks import live_clients
from tests.pools import (
    LiveReader,
    autoscaling_of,
    by_name_reads,
    create_pool,
    fill_token,
    pool_events,
    pool_manifest,
)
from tests.reconcilers import make_reconciler

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

FUTURE = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
REPO = "octo-org/hello-world"


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


class Cache(LiveReader):
    """The live reader, plus the pool listing the recorder matches jobs against."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        super().__init__(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._namespace = namespace

    def autoscaling_pools(self, scopes: Any = None) -> list[api.RunnerPool]:
        found = self._custom.list_namespaced_custom_object(
            api.GROUP, api.VERSION, self._namespace, api.PLURAL
        )
        return autoscaling_of(found["items"])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(api_client: client.ApiClient, namespace: str) -> Cache:
    return Cache(api_client, namespace)


@pytest.fixture
def reconciler(api_client: client.ApiClient, cache: Cache, clock: Clock) -> Iterator[Reconciler]:
    events = KubeEventRecorder(Kube(api_client))
    runners = RunnerManagers(
        cache,
        live_clients(api_client),
        KubePods(Kube(api_client)),
        lambda key: None,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started
    )
    yield make_reconciler(
        api_client,
        reads=cache,
        runners=runners,
        recorder=events,
        settings=Settings(queue=QueueSettings(status_coalesce=0.0)),
        clock=clock,
        secrets=FakePoolSecrets(cache, PoolSecrets(by_name_reads(Kube(api_client)), retry_gap=0.0).problem),
    )
    runners.stop_all()


def _job(job_id: int, status: str, namespace: str, pool: str) -> Job:
    labels = ["self-hosted", naming.pool_runner_label(namespace, pool)]
    return parse_delivery(delivery(job_object(job_id, status, labels, repository=REPO)))


def _pool(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found = LiveReader(api_client).get_pool(namespace, name)
    assert found is not None
    return found


def _pods(api_client: client.ApiClient, namespace: str, pool: str) -> int:
    return sum(
        1
        for p in LiveReader(api_client).list_pods(namespace, pool)
        if not p["metadata"].get("deletionTimestamp")
    )


def _pending(api_client: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return [
        p
        for p in LiveReader(api_client).list_pods(namespace, "auto")
        if p["status"].get("phase") == "Pending"
    ]


def _unschedulable_for_a_minute_in(pod: dict[str, Any], now: datetime) -> float:
    """Seconds until ``pod`` has been unschedulable for a minute (60 when the scheduler has not said)."""
    for condition in pod["status"].get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            since = datetime.fromisoformat(condition["lastTransitionTime"])
            return (since + timedelta(minutes=1) - now).total_seconds()
    return 60.0


def _counting(
    api_client: client.ApiClient, cache: Cache, clock: Clock, echoes: Echoes | None = None
) -> tuple[Reconciler, FakeRunnerJobs]:
    """A reconciler whose runner managers are a fake the test sets the runner counts of."""
    runners = FakeRunnerJobs()
    settings = Settings(queue=QueueSettings(status_coalesce=0.0))
    reconciler = make_reconciler(
        api_client, reads=cache, runners=runners, settings=settings, clock=clock, echoes=echoes
    )
    return reconciler, runners


def _warm_pool(api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str) -> str:
    """A pool following demand with minIdle 2 (min 0, max 5), its token, reconciled: two pods, its key."""
    manifest = pool_manifest(
        name,
        repo=REPO,
        autoscaling={"minReplicas": 0, "maxReplicas": 5, "minIdle": 2, "scaleDownDelay": "1m"},
    )
    create_pool(api_client, namespace, manifest)
    key = f"{namespace}/{name}"
    reconciler(key)
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(key)
    assert (
        _pods(api_client, namespace, name),
        _pool(api_client, namespace, name)["status"]["desiredReplicas"],
    ) == (2, 2)
    return key


def _pool_at_zero(api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str) -> str:
    """A pool following demand (min 0, max 5, 1 min delay) with its token, reconciled: its key."""
    manifest = pool_manifest(
        name, repo=REPO, autoscaling={"minReplicas": 0, "maxReplicas": 5, "scaleDownDelay": "1m"}
    )
    create_pool(api_client, namespace, manifest)
    key = f"{namespace}/{name}"
    reconciler(key)
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(key)
    return key


def test_queued_jobs_bring_pods_and_the_status_keeps_the_recorded_demand(
    api_client: client.ApiClient,
    namespace: str,
    cache: Cache,
    reconciler: Reconciler,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = _pool_at_zero(api_client, namespace, reconciler, "auto")
    assert _pods(api_client, namespace, "auto") == 0
    assert _pool(api_client, namespace, "auto")["status"]["desiredReplicas"] == 0

    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    for job_id in (1, 2, 3):
        assert recorder.record_job(_job(job_id, "queued", namespace, "auto")) == 1
    reconciler(key)

    status = _pool(api_client, namespace, "auto")["status"]
    assert (_pods(api_client, namespace, "auto"), status["desiredReplicas"]) == (3, 3)
    assert status["demand"]["queued"] == 3, "the reconciler's status patch left demand alone"
    scaling = next(c for c in status["conditions"] if c["type"] == "Scaling")
    assert (scaling["reason"], scaling["message"]) == (
        "FollowingDemand",
        "3 runner(s) for 3 queued, 0 busy job(s); min 0, max 5",
    )
    caplog.set_level(logging.INFO, logger="runnerpool.reconciler")
    reconciler(key)
    assert [r.__dict__["writes"] for r in caplog.records] == [[]], "demand in the status is no change"

    # Demand gone: the decision holds for scaleDownDelay from when it fell, and the
    # reconciler comes back then.
    for job_id in (1, 2, 3):
        recorder.record_job(_job(job_id, "completed", namespace, "auto"))
    clock.now += timedelta(seconds=10)
    result = reconciler(key)
    status = _pool(api_client, namespace, "auto")["status"]
    assert status["desiredReplicas"] == 3
    # scaleDownDelay (a minute from now, on the reconciler's clock), unless the pods, pending
    # with no node to take them, are due first: they are looked at again once they have been
    # unschedulable for a minute by the same clock (runnerpool.pods.failures).
    due = min(
        60.0, *(_unschedulable_for_a_minute_in(pod, clock.now) for pod in _pending(api_client, namespace))
    )
    assert result.requeue_after is not None and abs(result.requeue_after - due) < 1, (
        result.requeue_after,
        due,
    )
    scaling = next(c for c in status["conditions"] if c["type"] == "Scaling")
    assert scaling["reason"] == "WaitingToScaleDown"
    assert scaling["message"].startswith("holding 3 for scaleDownDelay 1m (demand wants 0)"), scaling
    clock.now += timedelta(seconds=60)
    reconciler(key)
    status = _pool(api_client, namespace, "auto")["status"]
    assert status["desiredReplicas"] == 0
    assert status["demand"]["queued"] == 0 and set(status["demand"]["jobs"]) == {"1", "2", "3"}
    scaled = [(reason, message.split(":")[0]) for _, reason, message in pool_events(api_client, namespace)]
    assert sorted(s for s in scaled if s[0].startswith("Scaled")) == [
        ("ScaledDown", "3 -> 0 runners"),
        ("ScaledUp", "0 -> 3 runners"),
    ]


def test_a_warm_buffer_is_in_the_decision_before_any_job_and_stays_above_the_jobs(
    api_client: client.ApiClient, namespace: str, cache: Cache, reconciler: Reconciler, clock: Clock
) -> None:
    """minIdle 2: two pods at no demand; a queued job adds the next one at once, and an idle
    runner taking it (queued -> in progress) neither adds nor takes away a pod."""
    key = _warm_pool(api_client, namespace, reconciler, "warm")
    status = _pool(api_client, namespace, "warm")["status"]
    scaling = next(c for c in status["conditions"] if c["type"] == "Scaling")
    assert scaling["message"] == "2 runner(s) for 0 queued, 0 busy job(s) + 2 idle (minIdle); min 0, max 5"

    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    recorder.record_job(_job(1, "queued", namespace, "warm"))
    reconciler(key)
    pods = {p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, "warm")}
    assert (len(pods), _pool(api_client, namespace, "warm")["status"]["desiredReplicas"]) == (3, 3)

    taker = sorted(pods)[0]
    labels = ["self-hosted", naming.pool_runner_label(namespace, "warm")]
    taken = job_object(1, "in_progress", labels, repository=REPO, runner=taker)
    recorder.record_job(parse_delivery(delivery(taken)))
    clock.now += timedelta(seconds=5)
    reconciler(key)
    status = _pool(api_client, namespace, "warm")["status"]
    assert (status["demand"]["queued"], status["demand"]["busy"], status["desiredReplicas"]) == (0, 1, 3)
    assert {p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, "warm")} == pods


def test_a_busy_runner_the_runner_manager_counted_restores_the_buffer_in_the_same_pass(
    api_client: client.ApiClient, namespace: str, cache: Cache, clock: Clock
) -> None:
    """minIdle 2 and no delivery: a runner GitHub lists as busy makes room for the next idle
    one in the pass that records the count, not in a pass after it (none follows the
    reconciler's own status write)."""
    echoes = Echoes()
    reconciler, runners = _counting(api_client, cache, clock, echoes)
    key = _warm_pool(api_client, namespace, reconciler, "buffer")
    before = _pool(api_client, namespace, "buffer")
    runners.runner_counts[key] = api.RunnerCounts(online=1, busy=1)
    reconciler(key)
    after = _pool(api_client, namespace, "buffer")
    assert (after["status"]["runners"]["busy"], after["status"]["desiredReplicas"]) == (1, 3)
    assert _pods(api_client, namespace, "buffer") == 3
    # The runner managers act on a new desiredReplicas from their cache: its write wakes one
    # more pass (runnerpool.echoes), a write of counts alone does not.
    assert not echoes.echo(Event(MODIFIED, after, before))
    runners.runner_counts[key] = api.RunnerCounts(online=2, busy=1)
    reconciler(key)
    counted = _pool(api_client, namespace, "buffer")
    assert counted["status"]["runners"]["online"] == 2
    assert echoes.echo(Event(MODIFIED, counted, after))


def test_the_scale_down_delay_keeps_runners_but_replaces_no_used_up_one(
    api_client: client.ApiClient, namespace: str, cache: Cache, reconciler: Reconciler, clock: Clock
) -> None:
    """After its job an ephemeral runner's pod is used up; while only the delay holds the
    count, a new pod for it would be a registration and a deregistration for nothing."""
    key = _pool_at_zero(api_client, namespace, reconciler, "held")
    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    for job_id in (1, 2, 3):
        recorder.record_job(_job(job_id, "queued", namespace, "held"))
    reconciler(key)
    pods = LiveReader(api_client).list_pods(namespace, "held")
    assert len(pods) == 3

    # Job 1 ran and its pod is used up; jobs 2 and 3 were cancelled: demand is 0.
    used_up = pods[0]["metadata"]["name"]
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        used_up, namespace, {"status": {"phase": "Succeeded"}}
    )
    for job_id in (1, 2, 3):
        recorder.record_job(_job(job_id, "completed", namespace, "held"))
    clock.now += timedelta(seconds=10)
    reconciler(key)

    names = {p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, "held")}
    assert names == {p["metadata"]["name"] for p in pods}, "no pod made for the used-up one"
    status = _pool(api_client, namespace, "held")["status"]
    assert status["desiredReplicas"] == 2, "the delay holds the two idle runners that are still up"


def test_a_job_reported_running_on_an_unmarked_pod_brings_the_runner_round_forward(
    api_client: client.ApiClient, namespace: str, cache: Cache, clock: Clock
) -> None:
    """The busy mark (eviction protection) follows the runner listing; a delivery saying a job
    runs on a pod without the mark asks for the listing now instead of at the next interval."""
    reconciler, runners = _counting(api_client, cache, clock)
    key = _pool_at_zero(api_client, namespace, reconciler, "mark")
    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    recorder.record_job(_job(1, "queued", namespace, "mark"))
    reconciler(key)
    [pod] = LiveReader(api_client).list_pods(namespace, "mark")
    name = pod["metadata"]["name"]
    runners.rounds_forward.clear()

    labels = ["self-hosted", naming.pool_runner_label(namespace, "mark")]
    recorder.record_job(
        parse_delivery(delivery(job_object(1, "in_progress", labels, repository=REPO, runner=name)))
    )
    reconciler(key)
    assert runners.rounds_forward == [(namespace, "mark")]

    client.CoreV1Api(api_client).patch_namespaced_pod(
        name, namespace, {"metadata": {"labels": {BUSY_LABEL: BUSY_VALUE}}}
    )
    reconciler(key)
    assert runners.rounds_forward == [(namespace, "mark")], "a marked pod needs no early round"


def test_the_pool_gauges_say_ready_and_since_when_the_oldest_job_waits(
    api_client: client.ApiClient, namespace: str, cache: Cache, reconciler: Reconciler, clock: Clock
) -> None:
    """What the "not Ready" and "queued too long" alerts read, from the status the leader computes."""
    labels = {"namespace": namespace, "pool": "gauged"}

    def gauge(name: str) -> float | None:
        return REGISTRY.get_sample_value(name, labels)

    key = _pool_at_zero(api_client, namespace, reconciler, "gauged")
    assert gauge("runnerpool_pool_ready") == 1, "0 of 0 runners ready, with a token: Ready"
    assert gauge("runnerpool_pool_oldest_queued_job_timestamp_seconds") is None, "nothing queued"

    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    first_seen = clock.now
    recorder.record_job(_job(1, "queued", namespace, "gauged"))
    clock.now += timedelta(minutes=3)
    recorder.record_job(_job(2, "queued", namespace, "gauged"))
    reconciler(key)
    conditions = _pool(api_client, namespace, "gauged")["status"]["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert ready["status"] == "False", "two pods asked for, none ready (no node here)"
    assert gauge("runnerpool_pool_ready") == 0
    oldest = gauge("runnerpool_pool_oldest_queued_job_timestamp_seconds")
    assert oldest == pytest.approx(first_seen.timestamp(), abs=1), "the first job's, not the newest's"

    recorder.record_job(_job(1, "in_progress", namespace, "gauged"))
    reconciler(key)
    oldest = gauge("runnerpool_pool_oldest_queued_job_timestamp_seconds")
    assert oldest == pytest.approx((first_seen + timedelta(minutes=3)).timestamp(), abs=1)
    recorder.record_job(_job(2, "completed", namespace, "gauged"))
    reconciler(key)
    assert gauge("runnerpool_pool_oldest_queued_job_timestamp_seconds") is None, "the series ends"


def _condition(api_client: client.ApiClient, namespace: str, name: str, type_: str) -> tuple[str, str, str]:
    found = next(c for c in _pool(api_client, namespace, name)["status"]["conditions"] if c["type"] == type_)
    return found["status"], found["reason"], found["message"]


def test_an_organization_pool_that_can_see_no_demand_says_so_until_a_delivery_arrives(
    api_client: client.ApiClient, namespace: str, cache: Cache, reconciler: Reconciler, clock: Clock
) -> None:
    manifest = pool_manifest("blind", org="octo-org", autoscaling={"minReplicas": 0, "maxReplicas": 5})
    create_pool(api_client, namespace, manifest)
    key = f"{namespace}/blind"
    reconciler(key)
    status, reason, message = _condition(api_client, namespace, "blind", "DemandVisible")
    assert (status, reason) == ("False", "NoDemandSource")
    assert "configure the organization's webhook" in message and "spec.autoscaling.repositories" in message

    # A verified delivery for the organization, for a job this pool's labels do not match.
    body = json.dumps(
        delivery(
            job_object(1, "queued", ["self-hosted", "gpu"], repository="octo-org/other"),
            repository="octo-org/other",
        )
    ).encode()
    secret = b"cluster-wide"
    verdict = Verifier(lambda: (secret,))(body, sign(secret, body))
    assert verdict.accepted
    recorder = DemandWriter(Kube(api_client), cache, GitHubSettings(api_url=API).api_url_of, clock=clock)
    assert recorder.record_job(parse_delivery(json.loads(body)), verdict) == 0
    reconciler(key)
    assert _condition(api_client, namespace, "blind", "DemandVisible")[:2] == ("True", "WebhookDelivering")


def test_an_organization_pool_with_repositories_to_poll_is_not_blind(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    manifest = pool_manifest(
        "polled", org="octo-org", autoscaling={"maxReplicas": 5, "repositories": ["app"]}
    )
    create_pool(api_client, namespace, manifest)
    reconciler(f"{namespace}/polled")
    assert _condition(api_client, namespace, "polled", "DemandVisible")[:2] == ("True", "RepositoriesPolled")


def test_a_missing_webhook_secret_is_a_condition_that_clears_once_it_exists(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    scaling = {"maxReplicas": 5, "webhookSecretRef": {"name": "hooks", "key": "secret"}}
    create_pool(api_client, namespace, pool_manifest("own", repo=REPO, autoscaling=scaling))
    key = f"{namespace}/own"
    reconciler(key)
    status, reason, message = _condition(api_client, namespace, "own", "WebhookSecretReady")
    assert (status, reason) == ("False", "SecretNotUsable")
    assert f"Secret {namespace}/hooks not found" in message

    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(namespace, {"metadata": {"name": "hooks"}, "stringData": {"other": "x"}})
    reconciler(key)
    assert "has no key secret" in _condition(api_client, namespace, "own", "WebhookSecretReady")[2]
    core.patch_namespaced_secret("hooks", namespace, {"stringData": {"secret": "s3cr3t"}})
    reconciler(key)
    assert _condition(api_client, namespace, "own", "WebhookSecretReady")[:2] == ("True", "SecretFound")
    assert "s3cr3t" not in json.dumps(_pool(api_client, namespace, "own")), "the secret stays in its Secret"
