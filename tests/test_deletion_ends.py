"""A deleted pool always goes, against the real API server (runnerpool/deregistration.py).

A pool that never registered a runner (it never had a credential, so never a token) goes at
once, without GitHub, and a namespace holding one finishes Terminating. A pool whose
credential Secret vanished after it registered runners says which runners may be left on
GitHub and how to remove them, and goes after ``--credential-lost-wait`` (short here, on a
clock the test moves). A pool whose pod is stuck Terminating on a lost node (a Node object no
kubelet answers for) says so and goes without it an hour past the pod's deletion time. GitHub is
mocked on its real endpoints (tests/github_mocks.py): any request the test did not expect fails;
the runner managers are the real ones.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.conditions import NAMESPACE_ENABLED, RUNNERS_DEREGISTERED, Stamp
from runnerpool.domain import Drain, PoolRef
from runnerpool.fakes import FakeRunnerJobs, FakeSecretUpdater
from runnerpool.gates import Verdict
from runnerpool.github.errors import BadCredentials
from runnerpool.namespace_access import Access
from runnerpool.pods.expectations import Expectations
from runnerpool.reads import ParsedPool, parse_pool
from runnerpool.reasons import Reason
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import Result
from runnerpool.runtime.kube import PODS, Kube
from runnerpool.scaleset.errors import ScaleSetStillUsed
from runnerpool.settings import DeletionSettings, QueueSettings, RunnerSettings, Settings, TenantSettings
from runnerpool.tenants import parse_allow_rule
from tests.github_mocks import RunnerEndpoint, gh, github, live_clients, runner_managers
from tests.helpers import WallClock, wait_for
from tests.pools import (
    LiveReader,
    PodsNotCachedYet,
    create_pool,
    fill_token,
    pat_secret,
    pool_events,
    pool_manifest,
)
from tests.reconcilers import make_reconciler

__all__ = ["github"]

pytestmark = pytest.mark.usefixtures("runnerpool_crd")

FUTURE = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
#: ``--credential-lost-wait`` in these tests.
LOST_WAIT = 60.0


@pytest.fixture
def clock() -> WallClock:
    return WallClock(datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def runners(api_client: client.ApiClient) -> Iterator[RunnerManagers]:
    yield from runner_managers(api_client)


@pytest.fixture
def reconciler(api_client: client.ApiClient, runners: RunnerManagers, clock: WallClock) -> Reconciler:
    return make_reconciler(
        api_client,
        runners=runners,
        clock=clock,
        settings=Settings(
            deletion=DeletionSettings(busy_runner_wait=30.0, credential_lost_wait=LOST_WAIT),
            queue=QueueSettings(status_coalesce=0.0),
        ),
    )


def _delete(api_client: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name
    )


def _pool(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return LiveReader(api_client).get_pool(namespace, name)


def _events(api_client: client.ApiClient, namespace: str, reason: str) -> list[tuple[str, str]]:
    return [(kind, message) for kind, why, message in pool_events(api_client, namespace) if why == reason]


def test_a_pool_that_never_had_a_credential_is_deleted_at_once_without_github(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    create_pool(api_client, namespace, pool_manifest("orphan"))
    reconciler(f"{namespace}/orphan")  # the finalizer is added; no token ever comes
    found = _pool(api_client, namespace, "orphan")
    assert found is not None and naming.POOL_FINALIZER in found["metadata"]["finalizers"]
    _delete(api_client, namespace, "orphan")

    result = reconciler(f"{namespace}/orphan")

    assert result.requeue_after is None
    assert _pool(api_client, namespace, "orphan") is None, "the finalizer let go in one pass"
    assert len(github.calls) == 0, "nothing to deregister: no request to GitHub"
    assert not _events(api_client, namespace, "DeregistrationFailed")


def test_a_jit_pool_whose_pods_never_got_a_config_is_deleted_at_once(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """A JIT pool makes its pods before their configs; without a credential none is ever issued,
    so none of its pods registered a runner."""
    create_pool(api_client, namespace, pool_manifest("jitless", registration="jit"))
    reconciler(f"{namespace}/jitless")  # the pod, waiting for its config
    reconciler(f"{namespace}/jitless")  # its JIT Secret, empty: the fill fails without a credential
    assert LiveReader(api_client).list_pods(namespace, "jitless")
    _delete(api_client, namespace, "jitless")

    assert reconciler(f"{namespace}/jitless").requeue_after is None
    assert _pool(api_client, namespace, "jitless") is None
    assert len(github.calls) == 0


def _jit_pool_deleted_with_a_runner_made(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> tuple[FakeSecretUpdater, FakeRunnerJobs, Reconciler]:
    """JIT pool ``landing``, deleted after its fills made a runner (their ``stop`` says so)."""
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = make_reconciler(api_client, tokens=tokens, runners=runners, clock=clock)
    create_pool(api_client, namespace, pool_manifest("landing", registration="jit"))
    reconciler(f"{namespace}/landing")
    tokens.jit.issued.add((namespace, "landing"))
    _delete(api_client, namespace, "landing")
    return tokens, runners, reconciler


def test_a_jit_pool_whose_runner_started_is_drained_while_the_cache_shows_its_secret_empty(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The pod cache shows the runner running while the Secret cache, its watch reconnecting,
    still shows the JIT Secret empty, and the fill forgot the pod once it was seen started: the
    finalizer found no config anywhere and let the pool go without GitHub, its runner left
    registered and its pod taken mid-job. A started runner container had its config."""
    tokens, runners = FakeSecretUpdater(), FakeRunnerJobs()
    reconciler = make_reconciler(api_client, tokens=tokens, runners=runners, clock=clock)
    create_pool(api_client, namespace, pool_manifest("started", registration="jit"))
    reconciler(f"{namespace}/started")
    (pod,) = LiveReader(api_client).list_pods(namespace, "started")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"name": naming.RUNNER_CONTAINER, "image": "runner", "imageID": "", "ready": True}
    running |= {"restartCount": 0, "state": {"running": {"startedAt": now}}}
    client.CoreV1Api(api_client).patch_namespaced_pod_status(
        pod["metadata"]["name"], namespace, {"status": {"phase": "Running", "containerStatuses": [running]}}
    )
    _delete(api_client, namespace, "started")

    reconciler(f"{namespace}/started")

    assert [ref.name for ref in runners.drains] == ["started"], "let go without asking GitHub"


def test_a_jit_pool_whose_config_was_written_a_moment_before_its_deletion_is_drained(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The JIT fill wrote a config the caches do not show yet: the finalizer, told so when it
    stops the pool's jobs, marks the pool and asks GitHub instead of letting it go without."""
    _, runners, reconciler = _jit_pool_deleted_with_a_runner_made(api_client, namespace, clock)

    assert reconciler(f"{namespace}/landing").requeue_after is None

    assert [ref.name for ref in runners.drains] == ["landing"], "GitHub was asked"
    assert _pool(api_client, namespace, "landing") is None


def test_a_jit_pool_whose_mark_write_failed_is_still_drained_on_the_next_pass(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The JIT fills answered "a runner was made" once, when the finalizer stopped them: a pass
    whose mark write then failed (a 409, a timeout) let the pool go on the next without asking
    GitHub. They now answer until the finalizer says the mark is written."""
    tokens, runners, reconciler = _jit_pool_deleted_with_a_runner_made(api_client, namespace, clock)
    real, failed = reconciler._annotate, []

    def annotate_failing_once(run: Any, annotations: dict[str, str | None]) -> None:
        if not failed:
            failed.append(annotations)
            raise ApiException(status=500, reason="Internal Server Error")
        real(run, annotations)

    reconciler._annotate = annotate_failing_once  # type: ignore[method-assign]
    with pytest.raises(ApiException):
        reconciler(f"{namespace}/landing")
    assert tokens.jit.issued == {(namespace, "landing")}, "no mark written: the fills keep telling"

    assert reconciler(f"{namespace}/landing").requeue_after is None
    assert tokens.jit.issued == set(), "marked, then gone"
    assert [ref.name for ref in runners.drains] == ["landing"], "GitHub was asked"
    assert _pool(api_client, namespace, "landing") is None


@dataclass
class _Uncached:
    """A pool with one pod created that its (stand-in) pod cache never shows."""

    reconcile: Reconciler
    expectations: Expectations
    runners: FakeRunnerJobs
    pod: str


def _pool_with_an_uncached_pod(
    api_client: client.ApiClient, namespace: str, name: str, clock: WallClock
) -> _Uncached:
    expectations, runners = Expectations(), FakeRunnerJobs()
    reconciler = make_reconciler(
        api_client,
        reads=PodsNotCachedYet(api_client),
        runners=runners,
        clock=clock,
        expectations=expectations,
    )
    create_pool(api_client, namespace, pool_manifest(name))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "AABBCC", FUTURE)
    reconciler(f"{namespace}/{name}")
    (pod,) = LiveReader(api_client).list_pods(namespace, name)
    return _Uncached(reconciler, expectations, runners, pod["metadata"]["name"])


def test_a_pool_deleted_before_its_new_pod_reached_the_cache_waits_for_it_before_draining(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The drain reads the pod cache: a pod created just before the deletion, not in it yet, was
    taken for none, and the pool went while that pod could still register a runner."""
    late = _pool_with_an_uncached_pod(api_client, namespace, "late", clock)
    _delete(api_client, namespace, "late")

    assert late.reconcile(f"{namespace}/late").requeue_after is not None
    assert late.runners.drains == [] and _pool(api_client, namespace, "late") is not None

    late.expectations.observe(f"{namespace}/late", late.pod)  # the pod's watch event
    late.reconcile(f"{namespace}/late")
    assert [ref.name for ref in late.runners.drains] == ["late"]


def test_a_new_pod_deleted_before_the_cache_ever_showed_it_does_not_hold_the_deletion(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """A watch that re-listed meanwhile never tells of such a pod: waiting for its event held
    the pool (and its namespace) for the expectations' 5 minutes."""
    brief = _pool_with_an_uncached_pod(api_client, namespace, "brief", clock)
    client.CoreV1Api(api_client).delete_namespaced_pod(brief.pod, namespace, grace_period_seconds=0)
    _delete(api_client, namespace, "brief")

    brief.reconcile(f"{namespace}/brief")

    assert [ref.name for ref in brief.runners.drains] == ["brief"], "drained at once, not after 5 minutes"
    assert brief.expectations.expected(f"{namespace}/brief") == frozenset()


def test_a_pod_whose_watch_event_came_before_its_create_answer_does_not_hold_the_deletion(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The pod's watch event can reach the cache before the creating thread gets the API
    server's answer back (a loaded host). Recorded as expected after its only event, the create
    stayed "unseen" for the expectations' 5 minutes, and the deleted pool waited that long before
    deregistering its runner (the bench's ten-pool deletion timed out once in CI)."""
    expectations, runners = Expectations(), FakeRunnerJobs()
    reconciler = make_reconciler(api_client, runners=runners, clock=clock, expectations=expectations)
    kube = reconciler._pods._kube
    create = kube.create

    def create_seen_by_the_watch_first(resource: Any, ns: str | None, body: Any, **kwargs: Any) -> Any:
        answer = create(resource, ns, body, **kwargs)
        if resource is PODS:
            expectations.observe(f"{namespace}/quick", answer["metadata"]["name"])  # the informer won
        return answer

    kube.create = create_seen_by_the_watch_first  # type: ignore[method-assign]
    create_pool(api_client, namespace, pool_manifest("quick"))
    reconciler(f"{namespace}/quick")
    fill_token(api_client, namespace, "quick", "AABBCC", FUTURE)
    reconciler(f"{namespace}/quick")
    assert len(LiveReader(api_client).list_pods(namespace, "quick")) == 1
    _delete(api_client, namespace, "quick")

    reconciler(f"{namespace}/quick")

    assert [ref.name for ref in runners.drains] == ["quick"], "drained at once, not after 5 minutes"


#: A scale-set pool ``arc`` (its runners' scale set ``arc-linux``).
_SCALE_SET_POOL = pool_manifest(
    "arc", org="octo-org", scaleSet={"name": "arc-linux"}, autoscaling={"minReplicas": 0, "maxReplicas": 2}
)


class RecordedScaleSets:
    """``PoolJobs.scale_sets``, keeping what the finalizer asked to delete."""

    def __init__(self) -> None:
        self.deleted: list[tuple[str, int | None]] = []

    def listen(self, namespace: str, name: str) -> None: ...

    def delete(self, pool: PoolRef, scale_set_id: int | None) -> None:
        self.deleted.append((pool.name, scale_set_id))


class _PoolFrom(LiveReader):
    """Reads from the API server, but for the pool while ``stale`` is set: a copy read earlier."""

    stale: dict[str, Any] | None = None

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        return parse_pool(copy.deepcopy(self.stale)) if self.stale else super().pool(namespace, name)


def test_a_pass_on_a_cache_without_the_mark_an_earlier_pass_wrote_keeps_the_scale_set(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The JIT fills said a runner was made, the first pass marked the pool and its runner was
    busy. A second pass woken before the cache showed the mark found no runner anywhere (the
    fills had said so once) and let go: the scale set was deleted on GitHub, busy runner and
    all, before the finalizer's patch met its 409."""
    tokens, scale_sets = FakeSecretUpdater(), RecordedScaleSets()
    runners = FakeRunnerJobs(outcome=Drain(busy=1, deregistered=0))
    reads = _PoolFrom(api_client)
    reconciler = make_reconciler(
        api_client, reads=reads, tokens=tokens, runners=runners, clock=clock, scale_sets=scale_sets
    )
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    reconciler(f"{namespace}/arc")
    tokens.jit.issued.add((namespace, "arc"))
    _delete(api_client, namespace, "arc")
    before_the_mark = _pool(api_client, namespace, "arc")

    assert reconciler(f"{namespace}/arc").requeue_after is not None, "its runner is busy"
    reads.stale = before_the_mark
    reconciler(f"{namespace}/arc")

    assert scale_sets.deleted == [], "the scale set went while its runner ran a job"
    assert [ref.name for ref in runners.drains] == ["arc", "arc"]


def test_a_pool_the_allow_list_refuses_since_its_runners_started_is_drained_before_its_scale_set_goes(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """Allowed, the pool made runners; the rules then changed (an operator restart) and the
    pool was deleted: its finalizer skipped the drain and deleted the scale set at once, its
    busy runners and their jobs with it (and a token pool's runners stayed registered)."""
    tokens, scale_sets = FakeSecretUpdater(), RecordedScaleSets()
    runners = FakeRunnerJobs(outcome=Drain(busy=1, deregistered=0))
    allowed = make_reconciler(api_client, tokens=tokens, runners=runners, clock=clock, scale_sets=scale_sets)
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    allowed(f"{namespace}/arc")
    tokens.jit.issued.add((namespace, "arc"))
    refusing = make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        clock=clock,
        scale_sets=scale_sets,
        settings=Settings(tenants=TenantSettings(allow=(parse_allow_rule(f"{namespace}=org:another-org"),))),
    )
    _delete(api_client, namespace, "arc")

    assert refusing(f"{namespace}/arc").requeue_after is not None, "its runner is busy"
    assert scale_sets.deleted == [], "the scale set went while its runner ran a job"
    assert [ref.name for ref in runners.drains] == ["arc"]

    runners.outcome = Drain(busy=0, deregistered=1)
    refusing(f"{namespace}/arc")
    assert scale_sets.deleted == [("arc", None)]
    assert _pool(api_client, namespace, "arc") is None


@dataclass
class SwitchedNamespace:
    """The namespace gate as the test switches it (``runnerpool.gates.NamespaceGate``)."""

    enabled: bool = True
    on_deletion = True
    #: The namespaces whose last pool went.
    gone: list[str] = field(default_factory=list)

    def check(self, pool: api.RunnerPool, stamp: Stamp) -> Verdict:
        found = Access(self.enabled, "enabled" if self.enabled else "may not create pods", recheck=30.0)
        return Verdict(found.condition(stamp), recheck=found.recheck, withdraw=self.enabled)

    def refused(self, namespace: str) -> None:
        """Nothing cached."""

    def released(self, namespace: str) -> None:
        self.gone.append(namespace)


def test_a_pool_deleted_where_the_operator_may_no_longer_write_waits_saying_why(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """The enabling RoleBinding taken away past its finalizer: the operator can neither see nor
    delete the pool's pods there any more, and a drain reading "no pod" would let the pool go
    under its runners. Its deletion waits, says why, and drains once the namespace is enabled."""
    gate, runners = SwitchedNamespace(), FakeRunnerJobs(outcome=Drain(busy=0, deregistered=1))
    reconciler = make_reconciler(api_client, runners=runners, clock=clock, namespace_gate=gate)
    create_pool(api_client, namespace, pool_manifest("cut"))
    reconciler(f"{namespace}/cut")
    fill_token(api_client, namespace, "cut", "tok", FUTURE)
    gate.enabled = False
    _delete(api_client, namespace, "cut")

    assert reconciler(f"{namespace}/cut").requeue_after == 30.0
    pool = _pool(api_client, namespace, "cut") or {}
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    found = {c["type"]: (c["status"], c["reason"]) for c in pool["status"]["conditions"]}
    assert found[NAMESPACE_ENABLED] == ("False", Reason.NAMESPACE_NOT_ENABLED)
    assert runners.drains == [], "no drain on a cache that cannot show the pool's pods"
    assert _events(api_client, namespace, Reason.NAMESPACE_NOT_ENABLED)

    gate.enabled = True
    reconciler(f"{namespace}/cut")
    assert [ref.name for ref in runners.drains] == ["cut"]
    assert _pool(api_client, namespace, "cut") is None
    assert gate.gone == []
    reconciler(f"{namespace}/cut")  # the gone pool's pass
    assert gate.gone == [namespace], "its last pool gone, the namespace's informers go too"


class _Terminating(LiveReader):
    """Its namespace is being deleted once ``terminating`` says so."""

    terminating = False

    def namespace_terminating(self, namespace: str) -> bool:
        return self.terminating


def test_a_pool_whose_namespace_deletion_took_the_operators_access_goes_after_the_lost_wait(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """A namespace enabled by a Role (which its deletion deletes at once) or whose binding was
    let go by hand: access will not come back, and waiting for it held the namespace in
    Terminating for good. As with a lost credential: say which runners may be left, then go."""
    gate, runners = SwitchedNamespace(), FakeRunnerJobs(outcome=Drain(busy=0, deregistered=1))
    reads = _Terminating(api_client)
    reconciler = make_reconciler(
        api_client,
        reads=reads,
        runners=runners,
        clock=clock,
        namespace_gate=gate,
        settings=Settings(deletion=DeletionSettings(busy_runner_wait=30.0, credential_lost_wait=LOST_WAIT)),
    )
    create_pool(api_client, namespace, pool_manifest("gone-with-it"))
    reconciler(f"{namespace}/gone-with-it")
    fill_token(api_client, namespace, "gone-with-it", "tok", FUTURE)
    gate.enabled, reads.terminating = False, True
    _delete(api_client, namespace, "gone-with-it")

    assert reconciler(f"{namespace}/gone-with-it").requeue_after == 30.0
    assert _pool(api_client, namespace, "gone-with-it") is not None
    [(_, said)] = _events(api_client, namespace, Reason.CREDENTIAL_LOST)
    assert "is being deleted and took the operator's access" in said
    assert "rolebinding" not in said and "credential" not in said, "no fix that cannot work there"
    clock.now += timedelta(seconds=LOST_WAIT)
    assert reconciler(f"{namespace}/gone-with-it").requeue_after is None
    assert _pool(api_client, namespace, "gone-with-it") is None
    assert _events(api_client, namespace, Reason.RUNNERS_LEFT_ON_GITHUB)
    assert runners.drains == [], "nothing of the namespace could be read"


class StillUsedScaleSet(RecordedScaleSets):
    """Another deleted pool naming the scale set is not gone yet."""

    still_used = True

    def delete(self, pool: PoolRef, scale_set_id: int | None) -> None:
        if self.still_used:
            raise ScaleSetStillUsed("pool(s) team-0/arc, being deleted too, name scale set arc-linux")
        super().delete(pool, scale_set_id)


@pytest.mark.parametrize("had_runners", [True, False], ids=["drained", "never had runners"])
def test_a_pool_whose_scale_set_another_deleted_pool_still_uses_waits_as_for_busy_runners(
    api_client: client.ApiClient, namespace: str, clock: WallClock, had_runners: bool
) -> None:
    """Drained, it waits for the other pool before deleting the shared scale set: said once, as
    a wait (not a Warning each pass), and not flipped to "deregistered" and back every pass."""
    scale_sets, tokens = StillUsedScaleSet(), FakeSecretUpdater()
    reconciler = make_reconciler(
        api_client,
        clock=clock,
        tokens=tokens,
        runners=FakeRunnerJobs(outcome=Drain(busy=0, deregistered=0)),
        scale_sets=scale_sets,
        settings=Settings(deletion=DeletionSettings(busy_runner_wait=30.0)),
    )
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    reconciler(f"{namespace}/arc")
    if had_runners:
        tokens.jit.issued.add((namespace, "arc"))
    _delete(api_client, namespace, "arc")

    waits = [reconciler(f"{namespace}/arc").requeue_after for _ in range(2)]
    pool = _pool(api_client, namespace, "arc")
    assert pool is not None
    version = pool["metadata"]["resourceVersion"]
    assert reconciler(f"{namespace}/arc").requeue_after == 30.0
    assert waits == [30.0, 30.0]
    condition = next(c for c in pool["status"]["conditions"] if c["type"] == RUNNERS_DEREGISTERED)
    assert (condition["status"], condition["reason"]) == ("False", "ScaleSetStillUsed")
    assert _pool(api_client, namespace, "arc")["metadata"]["resourceVersion"] == version, "rewritten"  # type: ignore[index]
    assert _events(api_client, namespace, "DeregistrationFailed") == []

    scale_sets.still_used = False
    assert reconciler(f"{namespace}/arc").requeue_after is None
    assert scale_sets.deleted == [("arc", None)]
    assert _pool(api_client, namespace, "arc") is None


class RefusedScaleSets(RecordedScaleSets):
    """GitHub refuses the credential (401) while ``refused`` is set: a PAT being rotated."""

    refused = True

    def delete(self, pool: PoolRef, scale_set_id: int | None) -> None:
        if self.refused:
            raise BadCredentials("401 Bad credentials", status=401)
        super().delete(pool, scale_set_id)


def test_a_scale_set_pool_whose_credential_github_refuses_waits_for_it_before_leaving_its_scale_set(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """One 401 (a PAT being rotated) let the pool go at once and left its scale set on GitHub,
    where jobs naming it queue for ever. It waits ``--credential-lost-wait`` as a drain does,
    deletes the scale set once the credential is back, and, were it not to come back, would
    name the scale set among what is left."""
    scale_sets = RefusedScaleSets()
    reconciler = make_reconciler(
        api_client,
        clock=clock,
        scale_sets=scale_sets,
        settings=Settings(deletion=DeletionSettings(credential_lost_wait=LOST_WAIT)),
    )
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    reconciler(f"{namespace}/arc")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "arc", {"status": {"scaleSet": {"id": 7}}}
    )  # what the listener records once it made the scale set
    _delete(api_client, namespace, "arc")

    assert reconciler(f"{namespace}/arc").requeue_after is not None
    assert _pool(api_client, namespace, "arc") is not None, "not let go on one refusal"
    [(_, said)] = _events(api_client, namespace, Reason.CREDENTIAL_LOST)
    assert "runner scale set arc-linux" in said

    scale_sets.refused = False
    assert reconciler(f"{namespace}/arc").requeue_after is None
    assert scale_sets.deleted == [("arc", 7)]
    assert _pool(api_client, namespace, "arc") is None
    assert _events(api_client, namespace, Reason.RUNNERS_LEFT_ON_GITHUB) == []


def test_a_scale_set_pool_whose_credential_never_worked_is_let_go_at_once(
    api_client: client.ApiClient, namespace: str, clock: WallClock
) -> None:
    """No scale set recorded and a credential GitHub refuses: its listener never made one, and
    waiting 15 minutes for a credential that never worked (a typo'd Secret) held the namespace."""
    reconciler = make_reconciler(
        api_client,
        clock=clock,
        scale_sets=RefusedScaleSets(),
        settings=Settings(deletion=DeletionSettings(credential_lost_wait=LOST_WAIT)),
    )
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    reconciler(f"{namespace}/arc")
    _delete(api_client, namespace, "arc")

    assert reconciler(f"{namespace}/arc").requeue_after is None
    assert _pool(api_client, namespace, "arc") is None
    assert _events(api_client, namespace, Reason.CREDENTIAL_LOST) == []


def test_a_scale_set_pool_deleted_before_its_listener_wrote_the_id_still_deletes_its_scale_set(
    api_client: client.ApiClient, namespace: str, clock: WallClock, github: responses.RequestsMock
) -> None:
    """The listener may have made the scale set before its status write of the id: the
    finalizer asks for it by the pool's name all the same (it skipped GitHub without an id)."""
    scale_sets = RecordedScaleSets()
    reconciler = make_reconciler(api_client, clock=clock, scale_sets=scale_sets)
    create_pool(api_client, namespace, _SCALE_SET_POOL)
    reconciler(f"{namespace}/arc")
    _delete(api_client, namespace, "arc")

    assert reconciler(f"{namespace}/arc").requeue_after is None
    assert scale_sets.deleted == [("arc", None)]
    assert _pool(api_client, namespace, "arc") is None


def test_a_namespace_holding_a_credential_less_pool_finishes_terminating(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    create_pool(api_client, namespace, pool_manifest("stuck"))
    reconciler(f"{namespace}/stuck")
    core = client.CoreV1Api(api_client)

    core.delete_namespace(namespace)
    # The namespace controller marks the pool deleted; its deletion brings it to the operator.
    wait_for(
        lambda: (_pool(api_client, namespace, "stuck") or {}).get("metadata", {}).get("deletionTimestamp"),
        message="the namespace controller to delete the pool",
    )
    reconciler(f"{namespace}/stuck")

    def gone() -> bool:
        return namespace not in {n.metadata.name for n in core.list_namespace().items}

    wait_for(gone, timeout=60.0, message="the namespace to finish Terminating")
    assert len(github.calls) == 0


def _lost_pool(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str, github: Any
) -> tuple[RunnerEndpoint, list[str]]:
    """A pool that had a credential and a token, made its pods, whose runners registered; then
    its credential Secret is deleted, and the pool."""
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest(name, repo="octo-org/octo-repo", replicas=2))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(f"{namespace}/{name}")
    pods = sorted(p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, name))
    assert len(pods) == 2
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    for number, pod in enumerate(pods):
        endpoint.add(100 + number, pod, [f"{namespace}/{name}"])
    client.CoreV1Api(api_client).delete_namespaced_secret(naming.DEFAULT_CREDENTIAL_SECRET, namespace)
    _delete(api_client, namespace, name)
    return endpoint, pods


def test_a_pool_whose_credential_vanished_says_what_is_left_and_goes_after_the_wait(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    clock: WallClock,
    github: responses.RequestsMock,
) -> None:
    endpoint, pods = _lost_pool(api_client, namespace, reconciler, "lost", github)

    result = reconciler(f"{namespace}/lost")  # waiting for the credential is not an error

    assert result.requeue_after is not None and result.requeue_after <= LOST_WAIT
    pool = _pool(api_client, namespace, "lost")
    assert pool is not None and naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    cond = next(c for c in pool["status"]["conditions"] if c["type"] == RUNNERS_DEREGISTERED)
    assert (cond["status"], cond["reason"]) == ("False", "CredentialLost")
    for text in (cond["message"], *(m for _, m in _events(api_client, namespace, "CredentialLost"))):
        assert "CredentialSecretMissing" in text, text
        assert all(pod in text for pod in pods), f"names the runners that may be left: {text}"
        assert "/repos/octo-org/octo-repo/actions/runners" in text, f"says how to remove them: {text}"
        assert "2026-01-01T00:01:00Z" in text, f"says when the pool is let go: {text}"
    [(kind, _)] = _events(api_client, namespace, "CredentialLost")
    assert kind == "Warning"

    clock.now += timedelta(seconds=LOST_WAIT - 1)
    reconciler(f"{namespace}/lost")
    assert _pool(api_client, namespace, "lost") is not None, "held until the wait is over"

    clock.now += timedelta(seconds=1)
    assert reconciler(f"{namespace}/lost").requeue_after is None
    assert _pool(api_client, namespace, "lost") is None
    [(kind, message)] = _events(api_client, namespace, "RunnersLeftOnGitHub")
    assert kind == "Warning" and all(pod in message for pod in pods), message
    assert endpoint.deleted == [] and endpoint.listed == [], "no credential: GitHub was never asked"


def test_a_credential_back_within_the_wait_deregisters_as_usual(
    github: responses.RequestsMock,
    clock: WallClock,
    reconciler: Reconciler,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    endpoint, _ = _lost_pool(api_client, namespace, reconciler, "back", github)
    reconciler(f"{namespace}/back")
    assert (_pool(api_client, namespace, "back") or {})["metadata"]["annotations"].get(
        naming.CREDENTIAL_LOST_ANNOTATION
    )

    pat_secret(api_client, namespace)
    clock.now += timedelta(seconds=10)
    reconciler(f"{namespace}/back")

    assert sorted(runner for runner, _ in endpoint.deleted) == [100, 101]
    pool = _pool(api_client, namespace, "back")
    annotations = (pool or {}).get("metadata", {}).get("annotations") or {}
    assert naming.CREDENTIAL_LOST_ANNOTATION not in annotations, "a credential lost again gets a whole wait"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(403, "Forbidden"), (404, "ScopeNotFound")],
    ids=["token-lost-admin-rights", "repository-deleted"],
)
def test_a_pool_whose_credential_github_refuses_goes_after_the_wait(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    clock: WallClock,
    github: responses.RequestsMock,
    status: int,
    reason: str,
) -> None:
    """Not GitHub failing for a while: a human must act, so the wait is bounded, as for a
    missing Secret (before, such a pool and its namespace stayed for ever)."""
    name = f"refused-{status}"
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest(name, repo="octo-org/octo-repo", replicas=1))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(f"{namespace}/{name}")
    assert LiveReader(api_client).list_pods(namespace, name)
    message = {403: "Resource not accessible by personal access token", 404: "Not Found"}[status]
    github.get(
        gh("/repos/octo-org/octo-repo/actions/runners"),
        status=status,
        json={"message": message, "documentation_url": "https://docs.github.com/rest", "status": str(status)},
    )
    _delete(api_client, namespace, name)

    reconciler(f"{namespace}/{name}")

    pool = _pool(api_client, namespace, name)
    assert pool is not None, "held for the wait"
    cond = next(c for c in pool["status"]["conditions"] if c["type"] == RUNNERS_DEREGISTERED)
    assert (cond["status"], cond["reason"]) == ("False", "CredentialLost")
    assert reason in cond["message"]
    clock.now += timedelta(seconds=LOST_WAIT)
    assert reconciler(f"{namespace}/{name}").requeue_after is None
    assert _pool(api_client, namespace, name) is None
    assert _events(api_client, namespace, "RunnersLeftOnGitHub")


def test_a_pool_whose_namespace_took_its_token_secret_and_pods_first_still_deregisters(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """The namespace controller deletes Secrets and pods whatever their owner, possibly before
    the finalizer's first pass: the token Secret's mark goes with it, and a runner registered
    less than a listing ago is in no status.runners. The pool's TokenReady says a token was
    issued, so the finalizer still asks GitHub."""
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest("raced", repo="octo-org/octo-repo", replicas=1))
    reconciler(f"{namespace}/raced")
    fill_token(api_client, namespace, "raced", "tok", FUTURE)
    reconciler(f"{namespace}/raced")
    [pod] = [p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, "raced")]
    ready = next(
        c for c in _pool(api_client, namespace, "raced")["status"]["conditions"] if c["type"] == "TokenReady"
    )
    assert ready["reason"] == "TokenIssued"
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(300, pod, [f"{namespace}/raced"])
    core = client.CoreV1Api(api_client)
    core.delete_namespaced_secret(naming.token_secret_name("raced"), namespace)
    core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    wait_for(lambda: not LiveReader(api_client).list_pods(namespace, "raced"), message="the pod to go")
    _delete(api_client, namespace, "raced")

    for _ in range(3):  # the drain lists, deregisters, then confirms with a later listing
        reconciler(f"{namespace}/raced")

    assert endpoint.deleted == [(300, 204)], "the runner was left on GitHub"


@pytest.fixture
def lost_node(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """A Node object no kubelet answers for (powered off): a pod bound to it and deleted stays
    Terminating for as long as the object exists. Nothing is scheduled there."""
    name = f"lost-{namespace}"
    core = client.CoreV1Api(api_client)
    taint = {"key": "runnerpool.dev/test-lost-node", "effect": "NoSchedule"}
    core.create_node({"metadata": {"name": name}, "spec": {"unschedulable": True, "taints": [taint]}})
    yield name
    core.delete_node(name)


def _settled(reconciler: Reconciler, clock: WallClock, key: str) -> Result:
    """A pass, and more while the scope's next listing is due (the clock moved over each wait)."""
    result = reconciler(key)
    while result.requeue_after is not None and result.requeue_after <= RunnerSettings().kick_gap:
        clock.now += timedelta(seconds=result.requeue_after)
        result = reconciler(key)
    return result


def _one_pod_on(
    api_client: client.ApiClient, namespace: str, name: str, node: str, clock: WallClock
) -> tuple[Reconciler, RunnerManagers, str]:
    """A one-replica pool's pod, bound to ``node``, and the real reconciler and runner managers
    on ``clock`` (their scheduler never started: only their drain runs)."""
    managers = RunnerManagers(
        LiveReader(api_client),
        live_clients(api_client),
        KubePods(Kube(api_client)),
        lambda key: None,
        scheduler=BackgroundScheduler(timezone=UTC),
        clock=clock,
    )
    settings = Settings(
        deletion=DeletionSettings(busy_runner_wait=30.0), queue=QueueSettings(status_coalesce=0.0)
    )
    reconciler = make_reconciler(api_client, runners=managers, clock=clock, settings=settings)
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest(name, repo="octo-org/octo-repo", replicas=1))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(f"{namespace}/{name}")
    [pod] = [p["metadata"]["name"] for p in LiveReader(api_client).list_pods(namespace, name)]
    binding = {"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    client.CoreV1Api(api_client).create_namespaced_pod_binding(
        pod, namespace, binding, _preload_content=False
    )
    return reconciler, managers, pod


def test_a_pool_whose_pod_is_stuck_terminating_on_a_lost_node_says_so_and_goes_without_it(
    api_client: client.ApiClient, namespace: str, lost_node: str, github: responses.RequestsMock
) -> None:
    """Before, the finalizer said Deregistered and waited for the pod for ever, the pool and its
    namespace Terminating with it. Now the pod is named with its node once past its deletion
    time, and an hour later, GitHub having no runner of its name, the pool goes without it."""
    clock, key = WallClock(), f"{namespace}/lost"
    reconciler, managers, pod = _one_pod_on(api_client, namespace, "lost", lost_node, clock)
    core = client.CoreV1Api(api_client)
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(7, pod, [f"{namespace}/lost"], status="offline")  # its node lost power
    core.delete_namespaced_pod(pod, namespace, grace_period_seconds=30)
    deleted_at = core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp
    _delete(api_client, namespace, "lost")
    waiting = DeletionSettings().pods_gone_wait
    try:
        assert _settled(reconciler, clock, key).requeue_after == waiting
        assert endpoint.deleted == [(7, 204)]

        clock.now = deleted_at  # its grace is over: a kubelet would have removed it by now
        for _ in range(2):
            assert _settled(reconciler, clock, key).requeue_after == waiting
        pool = _pool(api_client, namespace, "lost")
        assert pool is not None
        cond = next(c for c in pool["status"]["conditions"] if c["type"] == RUNNERS_DEREGISTERED)
        assert (cond["status"], cond["reason"]) == ("True", "RunnerPodsStuckTerminating")
        given_up_at = (deleted_at + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert f"{pod} on node {lost_node}" in cond["message"] and given_up_at in cond["message"], cond
        assert "or their runner ignored its stop" in cond["message"], "a hurried pod's kubelet may still wait"
        assert _events(api_client, namespace, "RunnerPodsStuckTerminating") == [("Warning", cond["message"])]

        clock.now = deleted_at + timedelta(hours=1)
        assert _settled(reconciler, clock, key).requeue_after is None

        assert _pool(api_client, namespace, "lost") is None
        assert endpoint.looked_up == [(pod, 200)], "GitHub confirmed it has no runner of that name"
        told = [message for _, message in _events(api_client, namespace, "RunnerPodsStuckTerminating")]
        assert any("let go" in message and f"{pod} on node {lost_node}" in message for message in told), told
        assert core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp, "the pod is left alone"
    finally:
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        managers.stop_all()


def test_a_deleted_pools_pod_whose_runner_outlives_its_stop_is_deleted_again_with_a_short_grace(
    api_client: client.ApiClient, namespace: str, lost_node: str, github: responses.RequestsMock
) -> None:
    """Its runner container still runs a minute after the drain deleted the pod (here the node's
    status stands still; on a live node, a lost signal or a listener hung on its way out), and
    GitHub has no runner of its name. Before, the pod kept its hour of grace, and the pool and
    its namespace waited as long. Now the API server takes a second deletion whose grace ends
    30 s later: a kubelet that had not begun to stop it (its node cut off) kills it then; one
    already stopping it keeps the grace it began with (kubernetes/kubernetes#113606), and the
    pool's message says so once the new deletion time has passed."""
    clock, key = WallClock(), f"{namespace}/hung"
    reconciler, managers, pod = _one_pod_on(api_client, namespace, "hung", lost_node, clock)
    core = client.CoreV1Api(api_client)
    started = (clock.now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"name": naming.RUNNER_CONTAINER, "image": "runner", "imageID": "", "ready": True}
    running |= {"restartCount": 0, "state": {"running": {"startedAt": started}}}
    core.patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Running", "containerStatuses": [running]}}
    )
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")  # its runner is gone already
    wait_for(
        lambda: LiveReader(api_client).list_pods(namespace, "hung")[0]["status"].get("containerStatuses"),
        message="the pod's running container in the cache",
    )
    _delete(api_client, namespace, "hung")
    try:
        _settled(reconciler, clock, key)
        told = core.read_namespaced_pod(pod, namespace).metadata
        assert told.deletion_grace_period_seconds == 3690, "deleted with its own grace first"
        _settled(reconciler, clock, key)
        assert core.read_namespaced_pod(pod, namespace).metadata.deletion_grace_period_seconds == 3690

        clock.now += timedelta(seconds=61)
        _settled(reconciler, clock, key)

        # The API server counts the new grace from the first deletion (what the operator's clock
        # makes 61 s and a little ago): it asks for that plus 30 s, and the grace ends then.
        again = core.read_namespaced_pod(pod, namespace).metadata
        grace = again.deletion_grace_period_seconds
        assert 91 <= grace <= 100, grace
        first = told.deletion_timestamp - timedelta(seconds=3690)
        assert again.deletion_timestamp == first + timedelta(seconds=grace)
        assert endpoint.looked_up == [(pod, 200), (pod, 304)], "GitHub, asked by its name, had none each time"
        clock.now += timedelta(seconds=61)
        _settled(reconciler, clock, key)
        assert core.read_namespaced_pod(pod, namespace).metadata.deletion_grace_period_seconds == grace, (
            "once"
        )
    finally:
        core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        managers.stop_all()
