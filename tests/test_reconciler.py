"""The reconcile of one pool, step by step, against the real API server.

GitHub is mocked with ``responses`` on its real endpoints (tests/github_mocks.py);
the secret updater is a recording stand-in (its own tests cover it), so the token is
filled by hand here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import responses
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client

from runnerpool import api, children, naming
from runnerpool.conditions import RUNNERS_DEREGISTERED
from runnerpool.domain import RegistrationFailure, Scope
from runnerpool.fakes import FakeSecretUpdater
from runnerpool.pods.expectations import Expectations
from runnerpool.reads import PodsNotCachedError, parse_pool
from runnerpool.reconciler import (
    FIRST_STATUS_TOKEN_WAIT,
    InvalidSpecError,
    Reconciler,
)
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import TerminalError
from runnerpool.runtime.kube import Kube
from runnerpool.settings import DeletionSettings, QueueSettings, RunnerSettings, Settings
from tests.github_mocks import RunnerEndpoint, gh, github, live_clients, runner_managers
from tests.helpers import wait_for
from tests.pools import (
    LiveReader,
    PodsNotCachedYet,
    create_pool,
    fill_token,
    legacy_budget,
    mark_pods_ready,
    pat_secret,
    pool_events,
    pool_manifest,
)
from tests.reconcilers import make_reconciler

__all__ = ["github"]  # the fixture, shared with the other GitHub-facing tests


FUTURE = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def tokens() -> FakeSecretUpdater:
    return FakeSecretUpdater()


@pytest.fixture
def runners(api_client: client.ApiClient) -> Iterator[RunnerManagers]:
    """The real runner managers (they deregister for the finalizer); rounds run by ``sync()``."""
    yield from runner_managers(api_client)


@pytest.fixture
def reconciler(
    api_client: client.ApiClient,
    runnerpool_crd: dict,  # type: ignore[type-arg]
    tokens: FakeSecretUpdater,
    runners: RunnerManagers,
) -> Reconciler:
    return make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        settings=Settings(
            deletion=DeletionSettings(busy_runner_wait=30.0), queue=QueueSettings(status_coalesce=0.0)
        ),
    )


def _get(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found = LiveReader(api_client).get_pool(namespace, name)
    assert found is not None
    return found


def _condition(pool: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in pool["status"]["conditions"] if c["type"] == type_)


def _versions(api_client: client.ApiClient, namespace: str, name: str) -> tuple[str, ...]:
    reader = LiveReader(api_client)
    objects = [
        reader.get_pool(namespace, name),
        reader.get_secret(namespace, naming.token_secret_name(name)),
        reader.get_disruption_budget(namespace, naming.BUSY_DISRUPTION_BUDGET),
        *reader.list_pods(namespace, name),
    ]
    return tuple(o["metadata"]["resourceVersion"] if o else "-" for o in objects)


def _pods(api_client: client.ApiClient, namespace: str, pool: str) -> list[dict[str, Any]]:
    return [
        p
        for p in LiveReader(api_client).list_pods(namespace, pool)
        if not p["metadata"].get("deletionTimestamp")
    ]


def test_a_new_pool_waits_for_its_token_without_error(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    create_pool(api_client, namespace, pool_manifest("alpha", repo="octo-org/octo-repo"))

    result = reconciler(f"{namespace}/alpha")

    assert result.requeue_after == 10.0
    pool = _get(api_client, namespace, "alpha")
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    token_ready = _condition(pool, "TokenReady")
    assert (token_ready["status"], token_ready["reason"]) == ("False", "WaitingForToken")
    secret = LiveReader(api_client).get_secret(namespace, naming.token_secret_name("alpha"))
    assert secret is not None
    assert not secret.get("data"), "the token Secret is created empty"
    assert secret["metadata"]["labels"][naming.MANAGED_BY_LABEL] == naming.MANAGED_BY_VALUE
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RunnerPool", "alpha", True)
    assert [(p.namespace, p.name, p.scope.repository) for p in tokens.started] == [
        (namespace, "alpha", "octo-org/octo-repo")
    ]
    assert _pods(api_client, namespace, "alpha") == [], "no pod starts without a token"


@pytest.mark.usefixtures("runnerpool_crd")
def test_a_new_pools_first_status_waits_for_its_token_a_few_coalescing_windows(
    api_client: client.ApiClient,
    namespace: str,
    tokens: FakeSecretUpdater,
    runners: RunnerManagers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ "Waiting for the token" is not written while the token may still come (the next write
    would replace it at once): pools made together get their tokens over seconds, and each
    wrote its status twice. It is written once the token is later than that."""
    coalesce, now = 1.5, [0.0]
    reconciler = make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        settings=Settings(queue=QueueSettings(status_coalesce=coalesce)),
        monotonic=lambda: now[0],
    )
    create_pool(api_client, namespace, pool_manifest("early"))

    first = reconciler(f"{namespace}/early")

    assert first.requeue_after == pytest.approx(coalesce * FIRST_STATUS_TOKEN_WAIT)
    pool = _get(api_client, namespace, "early")
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert not pool.get("status"), "no status while the token may still come"
    now[0] += 2 * coalesce
    reconciler(f"{namespace}/early")
    assert not _get(api_client, namespace, "early").get("status"), "two windows on: still none"

    now[0] = coalesce * FIRST_STATUS_TOKEN_WAIT
    reconciler(f"{namespace}/early")
    status = _get(api_client, namespace, "early")["status"]
    token_ready = _condition({"status": status}, "TokenReady")
    assert (token_ready["status"], token_ready["reason"]) == ("False", "WaitingForToken")

    # A token two windows late: the pass that makes the pods writes the first status, once.
    create_pool(api_client, namespace, pool_manifest("prompt"))
    reconciler(f"{namespace}/prompt")
    now[0] += 2 * coalesce
    reconciler(f"{namespace}/prompt")
    fill_token(api_client, namespace, "prompt", "tok", FUTURE)
    caplog.set_level(logging.INFO, logger="runnerpool.reconciler")
    reconciler(f"{namespace}/prompt")
    assert [r.__dict__["action"] for r in caplog.records] == ["create"]
    assert len(_pods(api_client, namespace, "prompt")) == 1
    token_ready = _condition(_get(api_client, namespace, "prompt"), "TokenReady")
    assert token_ready["status"] == "True", "one status write, the token in it"


def test_a_filled_token_brings_the_pods_then_ready(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    create_pool(api_client, namespace, pool_manifest("beta", org="octo-org", replicas=2, labels=["gpu"]))
    reconciler(f"{namespace}/beta")
    fill_token(api_client, namespace, "beta", "AABBCC-registration", FUTURE)

    result = reconciler(f"{namespace}/beta")

    assert result.requeue_after is None
    pods = _pods(api_client, namespace, "beta")
    assert len(pods) == 2
    pod = pods[0]
    assert pod["metadata"]["name"].startswith("beta-")
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RunnerPool", "beta", True)
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "RUNNER_TOKEN" not in env and "AABBCC-registration" not in json.dumps(pods)
    assert env["RUNNER_ORG"] == "octo-org"
    assert env["RUNNER_LABELS"] == f"{namespace}/beta,gpu"
    assert {"POD_NAME", "POD_NAMESPACE"} <= env.keys()
    token_volume = next(v for v in pod["spec"]["volumes"] if "secret" in v)
    assert token_volume["secret"]["secretName"] == naming.token_secret_name("beta")
    # Only the register init container mounts the token; the runner container never does.
    register = next(c for c in pod["spec"]["initContainers"] if c["name"] == naming.REGISTER_CONTAINER)
    mount = next(m for m in register["volumeMounts"] if m["name"] == token_volume["name"])
    assert mount["readOnly"] is True
    assert token_volume["name"] not in {m["name"] for m in container["volumeMounts"]}
    budget = LiveReader(api_client).get_disruption_budget(namespace, naming.BUSY_DISRUPTION_BUDGET)
    assert budget is not None and budget["spec"]["minAvailable"] == children.BUSY_MIN_AVAILABLE
    assert "maxUnavailable" not in budget["spec"]
    # The 0440 token file belongs to the runner user's group, or uid 1001 cannot read it.
    assert (token_volume["secret"]["defaultMode"], pod["spec"]["securityContext"]["fsGroup"]) == (0o440, 1001)
    pool = _get(api_client, namespace, "beta")
    assert _condition(pool, "TokenReady")["status"] == "True"
    assert pool["status"]["tokenExpiresAt"] == FUTURE
    assert _condition(pool, "Ready")["reason"] == "RunnersStarting"
    assert (pool["status"]["replicas"], pool["status"]["updatedReplicas"]) == (2, 2)
    assert pool_events(api_client, namespace) == [], "a pool's normal start is in its conditions, not Events"

    mark_pods_ready(api_client, namespace, "beta", 2)
    reconciler(f"{namespace}/beta")
    pool = _get(api_client, namespace, "beta")
    assert (_condition(pool, "Ready")["status"], pool["status"]["readyReplicas"]) == ("True", 2)
    assert pool_events(api_client, namespace) == []

    # Pods made for a pool that was ready are news: the user scaled it up.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "beta", {"spec": {"replicas": 3}}
    )
    reconciler(f"{namespace}/beta")
    assert len(_pods(api_client, namespace, "beta")) == 3
    assert ("Normal", "CreatedPods", "created 1 runner pod(s)") in pool_events(api_client, namespace)
    assert ("Normal", "RunnersStarting", "2/3 runner pods ready") in pool_events(api_client, namespace)


def test_reconciling_a_converged_pool_writes_nothing(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, caplog: pytest.LogCaptureFixture
) -> None:
    create_pool(api_client, namespace, pool_manifest("gamma"))
    reconciler(f"{namespace}/gamma")
    fill_token(api_client, namespace, "gamma", "tok", FUTURE)
    reconciler(f"{namespace}/gamma")
    mark_pods_ready(api_client, namespace, "gamma", 1)
    reconciler(f"{namespace}/gamma")  # takes in the pod's readiness
    before = _versions(api_client, namespace, "gamma")
    events_before = pool_events(api_client, namespace)

    caplog.set_level(logging.INFO, logger="runnerpool.reconciler")
    result = reconciler(f"{namespace}/gamma")

    assert result.requeue_after is None
    assert [(r.__dict__["action"], r.__dict__["writes"]) for r in caplog.records] == [("noop", [])]
    assert _versions(api_client, namespace, "gamma") == before
    assert pool_events(api_client, namespace) == events_before


def test_an_invalid_stored_spec_is_terminal_and_says_what_to_fix(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """A pool stored under an older, looser schema: no retry can help, so no backoff either."""
    create_pool(api_client, namespace, pool_manifest("omicron"))
    stored = _get(api_client, namespace, "omicron")
    loose = {**stored, "spec": {"repository": "not a repository", "replicas": -1}}
    invalid = make_reconciler(
        api_client, reads=_Stored(LiveReader(api_client), loose), expectations=Expectations()
    )

    with pytest.raises(InvalidSpecError) as info:
        invalid(f"{namespace}/omicron")

    assert isinstance(info.value, TerminalError)
    assert "spec.replicas" in str(info.value)
    warnings = [(reason, message) for type_, reason, message in pool_events(api_client, namespace)]
    assert any(reason == "InvalidSpec" and "fix the RunnerPool spec" in m for reason, m in warnings)
    assert naming.POOL_FINALIZER not in (
        _get(api_client, namespace, "omicron")["metadata"].get("finalizers") or []
    )


def test_a_deleted_pool_stored_before_todays_rules_still_deregisters_its_runners_and_goes(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    tokens: FakeSecretUpdater,
    runners: RunnerManagers,
    github: responses.RequestsMock,
) -> None:
    """A label a later CRD forbids: refused as invalid, the finalizer never ran, the runners
    stayed on GitHub and the namespace stayed Terminating."""
    reads = _Edited(api_client, labels=["team/gpu"])  # a rule of today's: no '/' in a label
    _converged(api_client, namespace, reconciler, "rho")
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(21, "rho-a", [f"{namespace}/rho", "self-hosted"])
    endpoint.add(22, "other-b", [f"{namespace}/other"])
    settings = Settings(queue=QueueSettings(status_coalesce=0.0))
    stored = make_reconciler(api_client, reads=reads, tokens=tokens, runners=runners, settings=settings)

    _finalize(api_client, namespace, stored, "rho")

    assert [runner_id for runner_id, _ in endpoint.deleted] == [21]
    assert list(endpoint.runners) == [22]


def test_a_deleted_pool_whose_old_spec_names_no_single_scope_stays_refused() -> None:
    """Rules off for a deletion, but never what every reader takes for granted: one scope."""
    deleted = {"namespace": "team-a", "name": "tau", "deletionTimestamp": FUTURE, "finalizers": ["x"]}
    two_scopes = pool_manifest("tau", org="octo-org", repository="octo-org/octo-repo")
    one_bad_label = pool_manifest("tau", labels=["team/gpu"])

    assert parse_pool({**two_scopes, "metadata": deleted}).model is None
    parsed = parse_pool({**one_bad_label, "metadata": deleted})
    assert parsed.model is not None and "labels" in parsed.problems
    assert parse_pool({**one_bad_label, "metadata": {**deleted, "deletionTimestamp": None}}).model is None


class _Stored(LiveReader):
    """Serves one pool as stored, whatever the API server's schema says today."""

    def __init__(self, live: LiveReader, pool: dict[str, Any]) -> None:
        self.__dict__.update(live.__dict__)
        self._pool = pool

    def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._pool


def test_a_cache_that_has_not_seen_the_creates_yet_does_not_cause_more(
    api_client: client.ApiClient, namespace: str, tokens: FakeSecretUpdater
) -> None:
    stale = make_reconciler(
        api_client, reads=PodsNotCachedYet(api_client), tokens=tokens, expectations=Expectations()
    )
    create_pool(api_client, namespace, pool_manifest("omicron", replicas=2))
    stale(f"{namespace}/omicron")
    fill_token(api_client, namespace, "omicron", "tok", FUTURE)
    stale(f"{namespace}/omicron")
    stale(f"{namespace}/omicron")
    assert len(_pods(api_client, namespace, "omicron")) == 2


def test_scale_creates_pods_and_a_template_change_surges(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    custom = client.CustomObjectsApi(api_client)
    create_pool(api_client, namespace, pool_manifest("delta"))
    reconciler(f"{namespace}/delta")
    fill_token(api_client, namespace, "delta", "tok", FUTURE)
    reconciler(f"{namespace}/delta")

    custom.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "delta", {"spec": {"replicas": 3}}
    )
    reconciler(f"{namespace}/delta")
    pool = _get(api_client, namespace, "delta")
    assert pool["status"]["observedGeneration"] == pool["metadata"]["generation"]
    assert len(_pods(api_client, namespace, "delta")) == 3

    # What `kubectl scale runnerpool delta --replicas=5` does.
    custom.patch_namespaced_custom_object_scale(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "delta", {"spec": {"replicas": 5}}
    )
    reconciler(f"{namespace}/delta")
    old = {p["metadata"]["name"] for p in _pods(api_client, namespace, "delta")}
    assert len(old) == 5

    custom.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "delta", {"spec": {"runnerImage": "runner:2"}}
    )
    reconciler(f"{namespace}/delta")
    pods = _pods(api_client, namespace, "delta")
    new = [p for p in pods if p["metadata"]["name"] not in old]
    assert old <= {p["metadata"]["name"] for p in pods}, "the reconciler never deletes a runner pod"
    assert len(new) == 2, "surge: 25 % of 5, rounded up"
    assert all(p["spec"]["containers"][0]["image"] == "runner:2" for p in new)
    pool = _get(api_client, namespace, "delta")
    assert (pool["status"]["replicas"], pool["status"]["updatedReplicas"]) == (7, 2)
    assert _condition(pool, "Ready")["reason"] in ("RunnersStarting", "RollingOut")


def test_deleted_pods_and_hand_edits_are_repaired(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    core, policy = client.CoreV1Api(api_client), client.PolicyV1Api(api_client)
    create_pool(api_client, namespace, pool_manifest("eps"))
    reconciler(f"{namespace}/eps")
    fill_token(api_client, namespace, "eps", "tok", FUTURE)
    reconciler(f"{namespace}/eps")
    [pod] = _pods(api_client, namespace, "eps")

    core.delete_namespaced_pod(pod["metadata"]["name"], namespace)  # a node went away, say
    wait_for(lambda: not _pods(api_client, namespace, "eps"), message="the pod to go")
    reconciler(f"{namespace}/eps")
    assert len(_pods(api_client, namespace, "eps")) == 1, "replaced"

    budget = naming.BUSY_DISRUPTION_BUDGET
    policy.patch_namespaced_pod_disruption_budget(budget, namespace, {"spec": {"minAvailable": 5}})
    reconciler(f"{namespace}/eps")
    assert policy.read_namespaced_pod_disruption_budget(budget, namespace).spec.min_available == (
        children.BUSY_MIN_AVAILABLE
    )
    # As an earlier version made it: maxUnavailable 0, which let surplus busy pods be evicted.
    policy.patch_namespaced_pod_disruption_budget(
        budget, namespace, {"spec": {"minAvailable": None, "maxUnavailable": 0}}
    )
    reconciler(f"{namespace}/eps")
    spec = policy.read_namespaced_pod_disruption_budget(budget, namespace).spec
    assert (spec.min_available, spec.max_unavailable) == (children.BUSY_MIN_AVAILABLE, None)

    core.patch_namespaced_secret(
        naming.token_secret_name("eps"), namespace, {"metadata": {"labels": {naming.MANAGED_BY_LABEL: None}}}
    )
    reconciler(f"{namespace}/eps")
    secret = core.read_namespaced_secret(naming.token_secret_name("eps"), namespace)
    assert secret.metadata.labels[naming.MANAGED_BY_LABEL] == naming.MANAGED_BY_VALUE
    assert secret.data, "repairing the Secret's labels keeps the token"


def test_the_per_pool_budget_of_an_earlier_version_goes(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler
) -> None:
    """Two budgets over one busy pod make the eviction API answer 500, so drains stop waiting."""
    policy = client.PolicyV1Api(api_client)
    create_pool(api_client, namespace, pool_manifest("old"))
    legacy_budget(api_client, namespace, "old")
    reconciler(f"{namespace}/old")
    fill_token(api_client, namespace, "old", "tok", FUTURE)
    reconciler(f"{namespace}/old")

    names = [b.metadata.name for b in policy.list_namespaced_pod_disruption_budget(namespace).items]
    assert names == [naming.BUSY_DISRUPTION_BUDGET]


def test_a_token_failure_shows_its_reason(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    create_pool(api_client, namespace, pool_manifest("zeta"))
    tokens.failures[(namespace, "zeta")] = RegistrationFailure(
        reason="BadCredentials", message="GitHub rejected the credentials", since=datetime.now(UTC)
    )
    reconciler(f"{namespace}/zeta")
    cond = _condition(_get(api_client, namespace, "zeta"), "TokenReady")
    assert (cond["status"], cond["reason"]) == ("False", "BadCredentials")
    assert ("Warning", "BadCredentials", "GitHub rejected the credentials") in pool_events(
        api_client, namespace
    )


def _rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_token_expired_or_about_to_makes_no_pod_and_says_so(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    """The Secret keeps its token past the expiry while the refresh fails: a pod made with it
    would start, ask GitHub to register and be refused. So would one whose token expires before
    its runner is up."""
    create_pool(api_client, namespace, pool_manifest("stale", replicas=2))
    reconciler(f"{namespace}/stale")

    for expires_in in (timedelta(seconds=-30), timedelta(seconds=30)):
        fill_token(api_client, namespace, "stale", "tok", _rfc3339(datetime.now(UTC) + expires_in))
        result = reconciler(f"{namespace}/stale")

        assert _pods(api_client, namespace, "stale") == [], (
            f"no pod for a token expiring in {expires_in.total_seconds():g} s"
        )
        pool = _get(api_client, namespace, "stale")
        token_ready, ready = _condition(pool, "TokenReady"), _condition(pool, "Ready")
        assert (token_ready["status"], token_ready["reason"]) == ("False", "WaitingForToken")
        assert (ready["status"], ready["reason"]) == ("False", "TokenNotReady")
        assert result.requeue_after == 10.0, "looked at again after the token wait"

    tokens.failures[(namespace, "stale")] = RegistrationFailure(
        reason="RateLimited", message="HTTP 429", since=datetime.now(UTC)
    )
    reconciler(f"{namespace}/stale")
    token_ready = _condition(_get(api_client, namespace, "stale"), "TokenReady")
    assert (token_ready["status"], token_ready["reason"]) == ("False", "RateLimited")
    assert _pods(api_client, namespace, "stale") == []

    del tokens.failures[(namespace, "stale")]
    fill_token(api_client, namespace, "stale", "tok2", FUTURE)
    reconciler(f"{namespace}/stale")
    assert len(_pods(api_client, namespace, "stale")) == 2, "a fresh token brings the pods"


@pytest.mark.usefixtures("runnerpool_crd")
def test_a_token_whose_refresh_fails_stops_being_ready_when_it_expires(
    api_client: client.ApiClient, namespace: str, tokens: FakeSecretUpdater, runners: RunnerManagers
) -> None:
    """The refresh's first failure wakes the pool (TokenReady True, RefreshFailing); the same
    failure again does not, the Secret does not change and nothing resyncs: without a pass
    due at the expiry, the pool said "the current token is still valid" long after it was not."""
    now = [datetime.now(UTC).replace(microsecond=0)]
    reconciler = make_reconciler(
        api_client,
        tokens=tokens,
        runners=runners,
        settings=Settings(queue=QueueSettings(status_coalesce=0.0)),
        clock=lambda: now[0],
    )
    create_pool(api_client, namespace, pool_manifest("lapse"))
    reconciler(f"{namespace}/lapse")
    expiry = now[0] + timedelta(minutes=5)
    fill_token(api_client, namespace, "lapse", "tok", _rfc3339(expiry))
    tokens.failures[(namespace, "lapse")] = RegistrationFailure(
        reason="RateLimited", message="HTTP 429", since=now[0]
    )

    result = reconciler(f"{namespace}/lapse")

    token_ready = _condition(_get(api_client, namespace, "lapse"), "TokenReady")
    assert (token_ready["status"], token_ready["reason"]) == ("True", "RefreshFailing")
    assert result.requeue_after is not None, "looked at again before the token expires"
    assert 0 < result.requeue_after <= (expiry - now[0]).total_seconds() - 60, "a minute before it"

    now[0] += timedelta(seconds=result.requeue_after)
    result = reconciler(f"{namespace}/lapse")

    pool = _get(api_client, namespace, "lapse")
    token_ready, ready = _condition(pool, "TokenReady"), _condition(pool, "Ready")
    assert (token_ready["status"], token_ready["reason"]) == ("False", "RateLimited")
    assert (ready["status"], ready["reason"]) == ("False", "TokenNotReady")
    assert result.requeue_after == 10.0


def _converged(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str, *, delete: bool = True
) -> None:
    pat_secret(api_client, namespace)
    create_pool(api_client, namespace, pool_manifest(name, repo="octo-org/octo-repo"))
    reconciler(f"{namespace}/{name}")
    fill_token(api_client, namespace, name, "tok", FUTURE)
    reconciler(f"{namespace}/{name}")
    if delete:
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )


def _finalize(api_client: client.ApiClient, namespace: str, reconciler: Reconciler, name: str) -> None:
    """Reconcile until the finalizer is done, waiting for the runner pods between passes."""
    result = reconciler(f"{namespace}/{name}")
    while result.requeue_after:  # the pool's pods are going away, or the scope's listing is due
        if result.requeue_after <= RunnerSettings().kick_gap:
            time.sleep(result.requeue_after)  # the work queue's delay: drains share a listing per gap
        else:
            wait_for(
                lambda: (
                    not client.CoreV1Api(api_client)
                    .list_namespaced_pod(namespace, label_selector=f"{naming.POOL_LABEL}={name}")
                    .items
                ),
                message="runner pods to go",
            )
        result = reconciler(f"{namespace}/{name}")
    wait_for(lambda: LiveReader(api_client).get_pool(namespace, name) is None, message="the pool to go")


def test_the_namespaces_busy_budget_goes_with_its_last_pool(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """It has no owner, so without this every namespace that ever had a pool kept one after an
    uninstall."""
    RunnerEndpoint(github, "/repos/octo-org/octo-repo")  # no runners to deregister
    policy = client.PolicyV1Api(api_client)

    def budgets() -> list[str]:
        return [b.metadata.name for b in policy.list_namespaced_pod_disruption_budget(namespace).items]

    _converged(api_client, namespace, reconciler, "first", delete=False)
    create_pool(api_client, namespace, pool_manifest("second", repo="octo-org/octo-repo"))
    reconciler(f"{namespace}/second")
    assert budgets() == [naming.BUSY_DISRUPTION_BUDGET]

    for name, left in (("first", [naming.BUSY_DISRUPTION_BUDGET]), ("second", [])):
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, name
        )
        _finalize(api_client, namespace, reconciler, name)
        reconciler(f"{namespace}/{name}")  # the pool's deletion event: gone from the cache
        assert budgets() == left, f"after {name} went"


def test_deleting_a_pool_deregisters_exactly_its_runners(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    tokens: FakeSecretUpdater,
    github: responses.RequestsMock,
) -> None:
    _converged(api_client, namespace, reconciler, "eta")
    pool = _get(api_client, namespace, "eta")
    assert (
        pool["metadata"].get("deletionTimestamp") and naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    )
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(11, "eta-a", [f"{namespace}/eta", "self-hosted"])
    endpoint.add(12, "other-b", [f"{namespace}/other"])
    endpoint.add(13, "eta-c", [f"{namespace}/eta"])

    _finalize(api_client, namespace, reconciler, "eta")

    assert list(endpoint.runners) == [12], "the pool's runners are gone, the other pool's runner stays"
    assert sorted(runner_id for runner_id, _ in endpoint.deleted) == [11, 13]
    assert (namespace, "eta") in tokens.stopped
    assert (namespace, "eta") in tokens.emptied, "the token updater empties the Secret"


def test_a_github_outage_keeps_the_finalizer_says_why_and_looks_again_when_github_may_be_asked(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    _converged(api_client, namespace, reconciler, "theta")
    github.get(gh("/repos/octo-org/octo-repo/actions/runners"), status=503, json={"message": "down"})

    first = reconciler(f"{namespace}/theta")
    asked = len(github.calls)
    # A namespace being deleted sends the pool a pass per pod and Secret event. Each keeps the
    # scope's wait (found by the chaos soak: raised, the work queue's per-pool backoff doubled
    # with every pass, and the pool came back minutes after GitHub did).
    again = [reconciler(f"{namespace}/theta").requeue_after for _ in range(20)]

    cap = RunnerSettings().sync_interval  # the scope's longest backoff for a plain failure
    assert first.requeue_after is not None and 0 < first.requeue_after <= cap
    assert all(wait is not None and 0 < wait <= cap for wait in again), again
    assert len(github.calls) - asked <= 2 * asked, "the passes meanwhile mostly wait, without a request"
    pool = _get(api_client, namespace, "theta")
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert any(reason == "DeregistrationFailed" for _, reason, _ in pool_events(api_client, namespace))
    cond = _condition(pool, RUNNERS_DEREGISTERED)
    assert (cond["status"], cond["reason"]) == ("False", "GitHubUnavailable")


def test_a_busy_runner_delays_deletion_without_error(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    _converged(api_client, namespace, reconciler, "iota")
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(21, "iota-a", [f"{namespace}/iota"], busy=True)

    result = reconciler(f"{namespace}/iota")

    assert result.requeue_after == 30.0
    assert _pods(api_client, namespace, "iota"), "a busy runner's pods are not deleted"
    pool = _get(api_client, namespace, "iota")
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert _condition(pool, RUNNERS_DEREGISTERED)["reason"] == "RunnersBusy"
    assert endpoint.deleted == [], "a runner listed busy is not even asked to go"


def test_a_runner_that_took_a_job_is_retried_then_deregistered(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """Listed idle, busy by the time of the DELETE (422): requeue, no error; then 204."""
    _converged(api_client, namespace, reconciler, "lambda")
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(31, "lambda-a", [f"{namespace}/lambda"])
    endpoint.busy_on_delete.add(31)

    result = reconciler(f"{namespace}/lambda")

    assert result.requeue_after == 30.0
    assert endpoint.deleted == [(31, 422)]
    pool = _get(api_client, namespace, "lambda")
    assert naming.POOL_FINALIZER in pool["metadata"]["finalizers"]
    cond = _condition(pool, RUNNERS_DEREGISTERED)
    assert (cond["status"], cond["reason"]) == ("False", "RunnersBusy")
    assert ("Normal", "WaitingForBusyRunners", "1 runner(s) still running a job") in pool_events(
        api_client, namespace
    )

    endpoint.busy_on_delete.clear()  # the job ended
    _finalize(api_client, namespace, reconciler, "lambda")

    assert endpoint.deleted == [(31, 422), (31, 204)]


def test_a_runner_already_gone_counts_as_deregistered(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, github: responses.RequestsMock
) -> None:
    """GitHub removes an ephemeral runner after its job: a 404 on DELETE is success."""
    _converged(api_client, namespace, reconciler, "mu")
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(41, "mu-a", [f"{namespace}/mu"])
    endpoint.gone_on_delete.add(41)

    _finalize(api_client, namespace, reconciler, "mu")

    assert endpoint.deleted[0] == (41, 404)


def test_status_runners_come_from_the_runner_managers_listing(
    api_client: client.ApiClient,
    namespace: str,
    reconciler: Reconciler,
    runners: RunnerManagers,
    github: responses.RequestsMock,
) -> None:
    _converged(api_client, namespace, reconciler, "nu", delete=False)
    assert "runners" not in _get(api_client, namespace, "nu")["status"], "no listing yet, no counts"
    endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
    endpoint.add(51, "nu-a", [f"{namespace}/nu"])
    endpoint.add(52, "nu-b", [f"{namespace}/nu"], busy=True)
    endpoint.add(53, "nu-c", [f"{namespace}/nu"], status="offline")
    endpoint.add(54, "xi-a", [f"{namespace}/xi"])
    scope = Scope(repository="octo-org/octo-repo")
    [key] = [key for key in runners.scopes() if key.scope_key == scope.key]
    runners.sync(key)  # what the scope's runner manager does once per interval
    listed = list(endpoint.listed)

    reconciler(f"{namespace}/nu")

    assert _get(api_client, namespace, "nu")["status"]["runners"] == {"online": 1, "busy": 1, "offline": 1}
    assert listed == [(1, 200)]
    assert endpoint.listed == listed, "the reconciler reads the runner managers' counts, it does not list"


class _PodsUncached(LiveReader):
    """The cache's reads, while the namespace's pods are not listed (``pods_cached`` False)."""

    pods_cached = True

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        if not self.pods_cached:
            raise PodsNotCachedError(f"the pods of namespace {namespace} are not cached")
        return super().list_pods(namespace, pool)


def test_a_runner_manager_judges_no_runner_by_pods_it_cannot_see(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: Any, github: responses.RequestsMock
) -> None:
    """The pool's namespace no longer enabled (its pod informer stopped) or not listed yet: an
    offline runner without a pod there is not one the round may take for a leftover."""
    reads = _PodsUncached(api_client)
    managers = RunnerManagers(
        reads,
        live_clients(api_client),
        KubePods(Kube(api_client)),
        lambda key: None,
        scheduler=BackgroundScheduler(timezone=UTC),  # never started: rounds run by sync()
    )
    try:
        _converged(api_client, namespace, make_reconciler(api_client, runners=managers), "pi", delete=False)
        endpoint = RunnerEndpoint(github, "/repos/octo-org/octo-repo")
        endpoint.add(61, "pi-gone", [f"{namespace}/pi"], status="offline")
        [key] = managers.scopes()
        reads.pods_cached = False
        managers.sync(key)
        assert endpoint.deleted == [], "judged by pods it could not see"
        reads.pods_cached = True
        managers.sync(key)
        assert endpoint.deleted == [(61, 204)], "a leftover once its pods are seen"
    finally:
        managers.stop_all()


def test_a_pass_whose_namespace_stopped_being_watched_meanwhile_comes_back_quietly(
    api_client: client.ApiClient, namespace: str, runnerpool_crd: Any, github: responses.RequestsMock
) -> None:
    """Another pass found the namespace no longer enabled and stopped its informers after this
    pass's gate: the next pass finds it refused. Not an error in the log, nor the work queue's
    backoff."""
    reads = _PodsUncached(api_client)
    reconciler = make_reconciler(api_client, reads=reads)
    _converged(api_client, namespace, reconciler, "rho", delete=False)
    reads.pods_cached = False
    assert reconciler(f"{namespace}/rho").requeue_after == 1.0


def test_an_edited_credential_secret_restarts_the_token_job_at_once(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    """A job in slow retry after bad credentials must not wait minutes once they are fixed."""
    create_pool(api_client, namespace, pool_manifest("kappa"))
    reconciler(f"{namespace}/kappa")
    pat_secret(api_client, namespace, token="ghp_fixed")
    reconciler(f"{namespace}/kappa")
    client.CoreV1Api(api_client).patch_namespaced_secret(
        naming.DEFAULT_CREDENTIAL_SECRET, namespace, {"stringData": {"token": "ghp_rotated"}}
    )
    reconciler(f"{namespace}/kappa")
    versions = [ref.credentials_version for ref in tokens.started]
    assert versions[0] == "missing"
    assert len(set(versions)) == 3, "each credential change hands the job a new PoolRef"


def test_a_credential_secret_whose_metadata_alone_changed_keeps_the_token_job(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    """Its resourceVersion keyed the jobs: the operator's own protection label, or any tool that
    annotates Secrets, replaced every job of the credential, and each scope fetched again a
    token it had."""
    create_pool(api_client, namespace, pool_manifest("lambda"))
    pat_secret(api_client, namespace, token="ghp_kept")
    reconciler(f"{namespace}/lambda")
    client.CoreV1Api(api_client).patch_namespaced_secret(
        naming.DEFAULT_CREDENTIAL_SECRET,
        namespace,
        {"metadata": {"annotations": {"backup.example/at": "now"}}},
    )
    reconciler(f"{namespace}/lambda")
    assert len({ref.credentials_version for ref in tokens.started}) == 1


def test_status_keeps_counting_running_pods_while_the_token_is_missing(
    api_client: client.ApiClient, namespace: str, reconciler: Reconciler, tokens: FakeSecretUpdater
) -> None:
    """A token Secret emptied by hand: pods still run, and the status must not say 0."""
    _converged(api_client, namespace, reconciler, "omicron", delete=False)
    mark_pods_ready(api_client, namespace, "omicron", 1)
    client.CoreV1Api(api_client).patch_namespaced_secret(
        naming.token_secret_name("omicron"), namespace, {"data": {naming.TOKEN_SECRET_KEY: None}}
    )

    result = reconciler(f"{namespace}/omicron")

    status = _get(api_client, namespace, "omicron")["status"]
    assert (status["replicas"], status["readyReplicas"]) == (1, 1)
    assert _condition(_get(api_client, namespace, "omicron"), "TokenReady")["status"] == "False"
    assert result.requeue_after == 10.0, "still waiting for the token"
    assert tokens.checked[-1] == (namespace, "omicron", False), "the secret updater was told"


class _Edited(LiveReader):
    """Serves each pool as the API server has it, with ``spec`` fields as an older CRD let them be."""

    def __init__(self, api_client: client.ApiClient, **spec: Any) -> None:
        super().__init__(api_client)
        self._spec = spec

    def get_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        live = super().get_pool(namespace, name)
        return None if live is None else {**live, "spec": {**live["spec"], **self._spec}}
