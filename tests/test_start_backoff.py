"""A pool whose runners keep failing at start backs off, against the real API server
(runnerpool/pods/start_backoff.py).

Nothing runs pods here: the test writes what the kubelet reports of a runner container that
exits at once (``command: [false]``), and deletes each used-up pod as the runner managers do.
The pool registers in JIT mode, so each pod costs the operator a GitHub request for its
config (the token scheduler's fill, recorded by the stand-in): pods and GitHub requests are
counted per minute of a clock the test moves, one reconcile a second (as watch events bring
them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, metrics, naming
from runnerpool.fakes import FakeSecretUpdater
from runnerpool.pods.start_backoff import StartBackoff
from runnerpool.reconciler import Reconciler
from runnerpool.settings import QueueSettings, Settings
from tests.helpers import WallClock
from tests.pools import LiveReader, create_pool, pool_events, pool_manifest
from tests.reconcilers import make_reconciler

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture
def clock() -> WallClock:
    return WallClock()


@pytest.fixture
def tokens() -> FakeSecretUpdater:
    return FakeSecretUpdater()


@pytest.fixture
def reconciler(api_client: client.ApiClient, clock: WallClock, tokens: FakeSecretUpdater) -> Reconciler:
    return make_reconciler(
        api_client, tokens=tokens, clock=clock, settings=Settings(queue=QueueSettings(status_coalesce=0.0))
    )


#: The runner image's termination message for a runner GitHub refuses as outdated (its last
#: lines, then the entrypoint's), and the exit code without
#: ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE.
OUTDATED = (
    "An error occurred: Runner version v2.334.0 is deprecated and cannot receive messages.\n"
    "Runner listener exit with terminated error, stop the service, no retry needed.\n"
    "runner exited with code 0\n",
    0,
)


def _exited(
    api_client: client.ApiClient, namespace: str, pod: str, at: datetime, said: tuple[str, int] = ("", 1)
) -> None:
    """What the kubelet reports of a runner container that exited right after it started
    (``said``: its termination message and exit code)."""
    stamp = at.strftime(RFC3339)
    message, code = said
    terminated = {"exitCode": code, "reason": "Error" if code else "Completed", "startedAt": stamp}
    container = {
        "name": naming.RUNNER_CONTAINER,
        "image": api.DEFAULT_RUNNER_IMAGE,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {
            "terminated": {**terminated, "finishedAt": stamp, **({"message": message} if message else {})}
        },
    }
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Running", "containerStatuses": [container]}}
    )


def _crash_loop(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    clock: WallClock,
    seconds: int,
    said: tuple[str, int] = ("", 1),
    spared: str = "",
) -> list[str]:
    """``seconds`` of a crash-looping pool (but its pod ``spared``, which runs); returns the
    uids of the pods it made."""
    core, made, crashed = client.CoreV1Api(api_client), [], set()
    for _ in range(seconds):
        clock.now += timedelta(seconds=1)
        reconciler(f"{namespace}/crash")
        for pod in LiveReader(api_client).list_pods(namespace, "crash"):
            meta: dict[str, Any] = pod["metadata"]
            if meta["name"] == spared:
                continue
            if meta["uid"] not in made:
                made.append(meta["uid"])
            if meta["uid"] in crashed:  # used up: the runner managers delete it
                core.delete_namespaced_pod(meta["name"], namespace, grace_period_seconds=0)
            else:
                _exited(api_client, namespace, meta["name"], clock.now, said)
                crashed.add(meta["uid"])
    return made


def _asked(tokens: FakeSecretUpdater) -> set[str]:
    """The pods a JIT config was asked of GitHub for (one request each)."""
    return {uid for _, uid, _ in tokens.jit.fills}


def _ready(api_client: client.ApiClient, namespace: str) -> dict[str, Any]:
    pool = LiveReader(api_client).get_pool(namespace, "crash")
    assert pool is not None
    return next(c for c in pool["status"]["conditions"] if c["type"] == "Ready")


def test_a_crash_looping_pool_backs_off_says_why_and_resumes_on_a_new_spec(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    clock: WallClock,
    tokens: FakeSecretUpdater,
) -> None:
    create_pool(api_client, namespace, pool_manifest("crash", org="octo-org", registration="jit"))

    first = _crash_loop(api_client, namespace, reconciler, clock, 60)
    second = _crash_loop(api_client, namespace, reconciler, clock, 60)

    # Before: a pod every 2 s (30 a minute), each a JIT config asked of GitHub. Now: 10 s
    # doubling (pods at 0, ~12, ~34, ~76 s), then at most one every 5 minutes.
    assert len(first) <= 4, f"{len(first)} pods in the first minute"
    assert len(second) <= 2, f"{len(second)} pods in the second minute"
    assert len(_asked(tokens)) <= len(first) + len(second), "a GitHub request per pod, no more"
    ready = _ready(api_client, namespace)
    assert (ready["status"], ready["reason"]) == ("False", "RunnerPodsFailing"), ready
    assert "ExitedAtStart (container runner: Error, exit code 1; the next pod waits" in ready["message"]
    warnings = [m for t, r, m in pool_events(api_client, namespace) if r == "RunnerPodsFailing"]
    assert warnings and all("Error, exit code 1" in m for m in warnings), warnings
    assert metrics.RUNNER_PODS_FAILING.labels(namespace, "crash", "ExitedAtStart")._value.get() >= 3

    # The user fixes the spec: the new generation makes its pod at once.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "crash", {"spec": {"runnerImage": "localhost/fixed:1"}}
    )
    reconciler(f"{namespace}/crash")
    live = [
        p
        for p in LiveReader(api_client).list_pods(namespace, "crash")
        if p["metadata"]["uid"] not in {*first, *second}
    ]
    assert len(live) == 1, "the new spec is not held by the old one's backoff"


def test_a_runner_github_refuses_as_outdated_backs_off_and_says_so_whatever_its_exit_code(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: WallClock
) -> None:
    """The runner exits 0 unless its image sets ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE:
    its termination message tells it. Before: every pod counted as started, a pod every 2 s."""
    create_pool(api_client, namespace, pool_manifest("crash", org="octo-org", registration="jit"))

    made = _crash_loop(api_client, namespace, reconciler, clock, 60, OUTDATED)

    assert len(made) <= 4, f"{len(made)} pods in a minute"
    ready = _ready(api_client, namespace)
    assert (ready["status"], ready["reason"]) == ("False", "RunnerVersionOutdated"), ready
    assert (
        "RunnerVersionOutdated (container runner: GitHub refuses runner version 2.334.0 as outdated; "
        "use a newer runner image; the next pod waits"
    ) in ready["message"], ready["message"]
    warnings = [m for t, r, m in pool_events(api_client, namespace) if r == "RunnerVersionOutdated"]
    assert len(warnings) == 1 and "runner version 2.334.0" in warnings[0], warnings
    assert metrics.RUNNER_PODS_FAILING.labels(namespace, "crash", "RunnerVersionOutdated")._value.get() >= 3


def _demand(api_client: client.ApiClient, namespace: str, queued: int) -> None:
    """What the demand writer records of ``queued`` jobs for the pool."""
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "crash", {"status": {"demand": {"queued": queued}}}
    )


def test_a_pool_that_wants_no_pod_is_not_failing_for_its_last_pods_failure(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: WallClock
) -> None:
    """Found by the chaos soak: a pool following demand whose pod failed at start (its runner
    could not reach GitHub during an outage), and whose jobs then ended, wanted no pod and made
    none, yet reported RunnerPodsFailing until its next job came (hours, for a quiet pool). The
    streak is kept for its next create's backoff; it is not reported while no pod is wanted."""
    auto = {"maxReplicas": 2, "scaleDownDelay": "1m"}
    create_pool(
        api_client, namespace, pool_manifest("crash", org="octo-org", registration="jit", autoscaling=auto)
    )
    _demand(api_client, namespace, queued=1)
    _crash_loop(api_client, namespace, reconciler, clock, 5)
    assert _ready(api_client, namespace)["reason"] == "RunnerPodsFailing"

    _demand(api_client, namespace, queued=0)
    clock.now += timedelta(minutes=2)
    made = _crash_loop(api_client, namespace, reconciler, clock, 3)  # the used-up pod goes

    assert LiveReader(api_client).list_pods(namespace, "crash") == [], made
    ready = _ready(api_client, namespace)
    assert ready["status"] == "True", ready
    assert metrics.RUNNER_PODS_FAILING.labels(namespace, "crash", "ExitedAtStart")._value.get() == 0


def _running(api_client: client.ApiClient, namespace: str, pod: str, since: datetime) -> None:
    """What the kubelet reports of a ready runner pod whose runner has run since ``since``."""
    container = {
        "name": naming.RUNNER_CONTAINER,
        "image": api.DEFAULT_RUNNER_IMAGE,
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": since.strftime(RFC3339)}},
    }
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": since.strftime(RFC3339)}
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod,
        namespace,
        {"status": {"phase": "Running", "conditions": [ready], "containerStatuses": [container]}},
    )


def test_a_pool_with_the_ready_pods_it_wants_is_not_failing_for_a_surge_pods_failure(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: WallClock
) -> None:
    """The same with a floor: the pool's old pod runs, a job's extra pod fails at start, the job
    ends elsewhere. The pool has its one ready pod and makes no other, so nothing ends the
    streak: RunnerPodsFailing "1/1 runner pods ready" until the next scale-up."""
    auto = {"minReplicas": 1, "maxReplicas": 2, "scaleDownDelay": "1m"}
    create_pool(
        api_client, namespace, pool_manifest("crash", org="octo-org", registration="jit", autoscaling=auto)
    )
    reconciler(f"{namespace}/crash")
    (old,) = LiveReader(api_client).list_pods(namespace, "crash")
    _running(api_client, namespace, old["metadata"]["name"], clock.now - timedelta(hours=1))
    _demand(api_client, namespace, queued=2)  # one more than the floor
    reconciler(f"{namespace}/crash")
    (extra,) = [
        p
        for p in LiveReader(api_client).list_pods(namespace, "crash")
        if p["metadata"]["name"] != old["metadata"]["name"]
    ]
    _exited(api_client, namespace, extra["metadata"]["name"], clock.now)
    reconciler(f"{namespace}/crash")
    assert _ready(api_client, namespace)["reason"] == "RunnerPodsFailing"

    _demand(api_client, namespace, queued=0)
    clock.now += timedelta(minutes=2)
    client.CoreV1Api(api_client).delete_namespaced_pod(
        extra["metadata"]["name"], namespace, grace_period_seconds=0
    )
    reconciler(f"{namespace}/crash")

    ready = _ready(api_client, namespace)
    assert (ready["status"], ready["reason"]) != ("False", "RunnerPodsFailing"), ready


def test_a_rollout_whose_new_pods_fail_at_start_says_so_while_the_old_ones_run(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, clock: WallClock
) -> None:
    """The old template's ready pods keep the jobs going, but the new image never starts: the
    pool says RunnerPodsFailing, not a rollout in progress that never ends."""
    create_pool(api_client, namespace, pool_manifest("crash", org="octo-org", registration="jit", replicas=1))
    reconciler(f"{namespace}/crash")
    (old,) = LiveReader(api_client).list_pods(namespace, "crash")
    _running(api_client, namespace, old["metadata"]["name"], clock.now - timedelta(hours=1))
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP,
        api.VERSION,
        namespace,
        api.PLURAL,
        "crash",
        {"spec": {"runnerImage": "localhost/broken:1"}},
    )

    made = _crash_loop(api_client, namespace, reconciler, clock, 20, spared=old["metadata"]["name"])

    assert made, "the rollout made new pods"
    ready = _ready(api_client, namespace)
    assert ready["reason"] == "RunnerPodsFailing", ready
    assert "ExitedAtStart" in ready["message"], ready


def _ended_pod(
    name: str, started: datetime, finished: datetime, code: int, message: str = "", busy: bool = False
) -> dict[str, Any]:
    """A runner pod of template ``t`` whose runner ran from ``started`` to ``finished`` and
    exited ``code``, saying ``message``; ``busy``: it carries the operator's busy mark."""
    terminated = {
        "exitCode": code,
        "reason": "Error",
        "startedAt": started.strftime(RFC3339),
        "finishedAt": finished.strftime(RFC3339),
        **({"message": message} if message else {}),
    }
    labels = {naming.TEMPLATE_HASH_LABEL: "t", **({naming.BUSY_LABEL: naming.BUSY_VALUE} if busy else {})}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "status": {
            "containerStatuses": [{"name": naming.RUNNER_CONTAINER, "state": {"terminated": terminated}}]
        },
    }


def _young_pod(name: str, started: datetime, finished: datetime, deletion_asked: datetime) -> dict[str, Any]:
    """A runner pod deleted with a 30 s grace period, whose runner ran from ``started`` to
    ``finished`` and exited 143 (SIGTERM)."""
    grace = 30
    pod = _ended_pod(name, started, finished, 143)
    pod["metadata"]["deletionTimestamp"] = (deletion_asked + timedelta(seconds=grace)).strftime(RFC3339)
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def test_a_young_pod_a_scale_down_deleted_is_no_failure_at_start_but_one_that_ended_before_is() -> None:
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    backoff = StartBackoff(clock=lambda: now)
    second = timedelta(seconds=1)
    # Found by the chaos soak: retired at 16 s of age, its runner SIGTERMed by the deletion.
    retired = _young_pod("retired", now - 16 * second, now - 1 * second, deletion_asked=now - 2 * second)

    backoff.observe("ns/auto", 1, "t", [retired])

    assert backoff.failing("ns/auto", 1) is None, "a scale-down is not a crash loop"
    assert backoff.wait("ns/auto", 1) is None, "the next pod is not held back"
    crashed = _young_pod("crashed", now - 9 * second, now - 8 * second, deletion_asked=now - 5 * second)
    backoff.observe("ns/auto", 1, "t", [retired, crashed])
    failing = backoff.failing("ns/auto", 1)
    assert failing is not None and failing.reason == "ExitedAtStart", "ended before anyone deleted it"


def test_a_job_that_writes_the_outdated_words_and_kills_its_runner_costs_its_pool_nothing() -> None:
    """GitHub gives an outdated runner no job, so a runner that took one (busy-marked) and says
    it is outdated was told so by its job: a job can write the words to /dev/termination-log and
    kill the entrypoint (exit 137). Before: RunnerVersionOutdated, and the pool's next pods backed
    off up to 5 minutes each."""
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    backoff = StartBackoff(clock=lambda: now)
    words, second = OUTDATED[0], timedelta(seconds=1)
    forged = [
        _ended_pod("busy", now - 601 * second, now - 1 * second, 137, words, busy=True),
        _ended_pod("busy-young", now - 6 * second, now - 1 * second, 137, words, busy=True),
    ]

    for pod in forged:
        backoff.observe("ns/ci", 1, "t", [pod])
        assert backoff.failing("ns/ci", 1) is None, f"{pod['metadata']['name']}: a job's words"
        assert backoff.wait("ns/ci", 1) is None

    # A real outdated runner may be refused after STARTED_AFTER (dind waits for dockerd first).
    refused = _ended_pod("refused", now - 46 * second, now - 1 * second, 7, words)
    backoff.observe("ns/ci", 1, "t", [refused])
    failing = backoff.failing("ns/ci", 1)
    assert failing is not None and failing.reason == "RunnerVersionOutdated", "a runner that never took a job"


def _failed_pod(name: str, now: datetime) -> dict[str, Any]:
    return _ended_pod(name, now - timedelta(seconds=3), now - timedelta(seconds=1), 1)


def _live_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": {naming.TEMPLATE_HASH_LABEL: "t"}}}


def test_pods_that_fail_together_are_one_failure_of_their_pool() -> None:
    """Found by review of the chaos soak: three replicas that failed in one GitHub outage counted
    three in a row, their replacements waited 40 s and the pool said RunnerPodsFailing 76 s
    after GitHub came back."""
    clock = WallClock(datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC))
    backoff = StartBackoff(clock=clock)
    first = _failed_pod("a", clock.now)
    backoff.observe("ns/p", 1, "t", [first, _live_pod("b"), _live_pod("c")])
    clock.now += timedelta(seconds=2)
    backoff.observe("ns/p", 1, "t", [first, _failed_pod("b", clock.now), _failed_pod("c", clock.now)])

    failure = backoff.failure("ns/p", 1)
    assert failure is not None and failure.failures == 1, failure
    assert backoff.wait("ns/p", 1) == pytest.approx(8.0), "the first failure's 10 s, not 40 s"

    # A replacement made after the failure that fails again is the next one in the streak.
    clock.now += timedelta(seconds=20)
    backoff.observe("ns/p", 1, "t", [_failed_pod("d", clock.now)])
    failure = backoff.failure("ns/p", 1)
    assert failure is not None and failure.failures == 2 and failure.delay == 20.0, failure


def test_a_streak_whose_next_pod_was_never_wanted_is_forgotten() -> None:
    """A pool at zero that fails at start, then gets a job an hour later, neither waits nor says
    RunnerPodsFailing for a failure of an hour ago; its next failure starts a new streak."""
    clock = WallClock(datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC))
    backoff = StartBackoff(clock=clock)
    backoff.observe("ns/p", 1, "t", [_failed_pod("a", clock.now)])
    assert backoff.failing("ns/p", 1) is not None

    clock.now += timedelta(seconds=10 + 299)
    assert backoff.failing("ns/p", 1) is not None, "within the longest delay: still the streak"
    clock.now += timedelta(hours=1)
    assert backoff.failing("ns/p", 1) is None
    assert backoff.wait("ns/p", 1) is None
    backoff.observe("ns/p", 1, "t", [_live_pod("b")])  # the job's pod starts
    assert backoff.failing("ns/p", 1) is None, "its start does not bring the old failure back"
    backoff.observe("ns/p", 1, "t", [_failed_pod("b", clock.now)])
    failure = backoff.failure("ns/p", 1)
    assert failure is not None and failure.failures == 1, failure


def test_a_streak_whose_next_pod_is_slow_to_fail_is_kept() -> None:
    """A crash-looping pool whose next pod takes long to fail (a slow image pull, a node to wait
    for) keeps its streak: forgotten, its backoff started again at 10 s."""
    clock = WallClock(datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC))
    backoff = StartBackoff(clock=clock)
    backoff.observe("ns/p", 1, "t", [_failed_pod("a", clock.now)])
    for _ in range(12):  # ten minutes of a pod that has not run yet
        clock.now += timedelta(seconds=50)
        backoff.observe("ns/p", 1, "t", [_live_pod("b")])

    backoff.observe("ns/p", 1, "t", [_failed_pod("b", clock.now)])
    failure = backoff.failure("ns/p", 1)
    assert failure is not None and failure.failures == 2, failure
