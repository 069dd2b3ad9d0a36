"""A pool as a runner scale set, with the operator as a process on deploy/'s RBAC (issue 34).

What a platform team sees: the scale set appears on GitHub under the pool's name, jobs GitHub
assigns it bring runners (JIT configs from the scale set, no REST generate-jitconfig), runners
with a job are marked busy, finished ones go and the pool falls back to its minimum, and deleting
the pool deletes the scale set and leaves no runner. The runner stand-in plays the pods
(``testworld.simulator``: it runs each pod's JIT config, the runner takes its scale set's jobs).

Then what issue 34 asks of the session on a bad day: a leader SIGKILLed between jobs (the new
one's session starts at message 0, as GitHub's listener does: no job lost, none counted twice), a
session another installation holds (shown, then taken over), revoked admin tokens and expired
queue tokens (nothing shown, jobs keep flowing), and a scale-down that leaves busy runners
alone until their jobs are done.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
from github import Auth
from kubernetes import client

from runnerpool import api, naming
from runnerpool.domain import PoolRef, Scope
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.clients import config_url
from runnerpool.scaleset.connection import ActionsConnection, from_rest
from runnerpool.scaleset.listener import ScaleSetSettings, desired_scale_set
from runnerpool.scaleset.session import MessageSession
from runnerpool.scaleset.wire import Wire
from tests.e2e.conftest import StartOperator
from tests.e2e.leaders import became_leader, leader_election_flags, lease_holder
from tests.e2e.runners import GOOD_PAT, REPO, condition, events, get_pool, wait_condition, wait_gone
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.scaleset import ScaleSetService
from testworld.simulator import OperatorProcess, RunnerSimulator

#: Runner rounds every second, so used-up pods are noticed at once.
FAST = ("--runner-sync-interval", "1")
TIMEOUT = 60.0


def _scale_set_pool(name: str, scale_set: str, **autoscaling: Any) -> dict[str, Any]:
    scaling = {"minReplicas": 0, "maxReplicas": 3, "scaleDownDelay": "1s", **autoscaling}
    return pool_manifest(name, repo=REPO, replicas=0, scaleSet={"name": scale_set}, autoscaling=scaling)


def _status(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return (get_pool(api_client, namespace, name) or {}).get("status") or {}


def _pods(api_client: client.ApiClient, namespace: str, name: str) -> list[Any]:
    selector = f"{naming.POOL_LABEL}={name}"
    return list(client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector).items)


def _rest_jit_calls(fake: FakeGitHub) -> int:
    return sum(1 for r in fake.requests if r.path.rstrip("/").endswith("generate-jitconfig"))


def _rest_runner_deletions(fake: FakeGitHub) -> int:
    return sum(1 for r in fake.requests if r.method == "DELETE" and "/actions/runners/" in r.path)


def _service_removals(service: ScaleSetService) -> int:
    return service.answered("DELETE", "/_apis/distributedtask/pools/0/agents/", 204)


def _desired(api_client: client.ApiClient, namespace: str, name: str = "arc") -> int | None:
    value = _status(api_client, namespace, name).get("desiredReplicas")
    return value if isinstance(value, int) else None


def _running(service: ScaleSetService, scale_set: str = "arc-linux") -> list[dict[str, Any]]:
    return [j for j in service.jobs(scale_set) if j["state"] == "running"]


def _busy_pods(api_client: client.ApiClient, namespace: str, name: str = "arc") -> set[str]:
    pods = _pods(api_client, namespace, name)
    return {p.metadata.name for p in pods if naming.BUSY_LABEL in (p.metadata.labels or {})}


def _listening(api_client: client.ApiClient, namespace: str, name: str = "arc") -> dict[str, Any]:
    return wait_condition(
        api_client, namespace, name, "DemandVisible", "True", reason="ScaleSetListening", timeout=TIMEOUT
    )


def _listening_pool(
    api_client: client.ApiClient, namespace: str, start_operator: StartOperator, **autoscaling: Any
) -> dict[str, Any]:
    """The operator started, pool ``arc`` (scale set ``arc-linux``) made and listening."""
    start_operator(*FAST)
    create_pool(api_client, namespace, _scale_set_pool("arc", "arc-linux", **autoscaling))
    return _listening(api_client, namespace)


def _wait_running(
    api_client: client.ApiClient, namespace: str, service: ScaleSetService, jobs: int, why: str
) -> list[dict[str, Any]]:
    """``jobs`` jobs running, as many runners wanted and as many pods: none lost, none twice."""

    def reached() -> list[dict[str, Any]] | None:
        running = _running(service)
        pods = _pods(api_client, namespace, "arc")
        if len(running) == jobs and _desired(api_client, namespace) == jobs and len(pods) == jobs:
            return running
        return None

    return wait_for(reached, TIMEOUT, message=why)


def _complete_all(
    api_client: client.ApiClient, namespace: str, service: ScaleSetService, jobs: list[int]
) -> None:
    """Every job ends ``succeeded`` and the pool falls back to 0 with no pod left."""
    for job in jobs:
        service.complete_job(job)

    def ended() -> list[tuple[str, str | None]]:
        states = {j["requestId"]: (j["state"], j["result"]) for j in service.jobs("arc-linux")}
        return [states[job] for job in jobs]

    wait_for(
        lambda: all(state == "completed" for state, _ in ended()), TIMEOUT, message="every job completed"
    )
    assert {result for _, result in ended()} == {"succeeded"}, ended()
    wait_for(
        lambda: _desired(api_client, namespace) == 0 and not _pods(api_client, namespace, "arc"),
        TIMEOUT,
        message="the pool back to its minimum of 0, its used-up pods gone",
    )


def _jobs_flow(api_client: client.ApiClient, namespace: str, service: ScaleSetService, count: int) -> None:
    """``count`` jobs GitHub assigns run on as many runners and complete."""
    jobs = [service.offer_job("arc-linux") for _ in range(count)]
    _wait_running(api_client, namespace, service, count, f"{count} jobs running on {count} runners")
    _complete_all(api_client, namespace, service, jobs)


def _no_problem_shown(
    api_client: client.ApiClient, namespace: str, before: list[Any], name: str = "arc"
) -> None:
    """Still listening, no problem in ``status.scaleSet``, no Warning Event since ``before``."""
    pool = get_pool(api_client, namespace, name)
    demand = condition(pool, "DemandVisible") or {}
    assert (demand.get("status"), demand.get("reason")) == ("True", "ScaleSetListening"), demand
    assert not (pool or {}).get("status", {}).get("scaleSet", {}).get("problem")
    warnings = [e for e in events(api_client, namespace, name) if e[0] == "Warning" and e not in before]
    assert not warnings, f"no Warning Event: {warnings}"


@pytest.mark.usefixtures("credentials")
def test_a_scale_set_pool_runs_the_jobs_github_assigns_it_and_leaves_nothing_when_deleted(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    pool = _listening_pool(api_client, namespace, start_operator)
    made = service.scale_set("arc-linux")
    assert made is not None, "the scale set exists on GitHub"
    assert pool["status"]["scaleSet"]["id"] == made["id"]
    labels = [label["name"] for label in made.get("labels") or []]
    assert naming.pool_runner_label(namespace, "arc") in labels
    assert wait_for(lambda: len(service.sessions("arc-linux")) == 1, TIMEOUT, message="one message session")
    warnings = [e for e in events(api_client, namespace, "arc") if e[0] == "Warning"]
    assert warnings == [], "a scale set's normal start is no warning"

    jobs = [service.offer_job("arc-linux") for _ in range(2)]
    running = _wait_running(api_client, namespace, service, 2, "two runners for the two jobs GitHub assigned")
    assert _rest_jit_calls(fake_github) == 0, "JIT configs come from the scale set, not REST"
    busy = {j["runnerName"] for j in running}
    wait_for(lambda: _busy_pods(api_client, namespace) == busy, TIMEOUT, message="both runners marked busy")

    _complete_all(api_client, namespace, service, jobs)

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "arc"
    )
    wait_gone(api_client, namespace, "arc", timeout=TIMEOUT)
    assert service.scale_set("arc-linux") is None, "the scale set is deleted with the pool"
    assert not [r for r in fake_github.runners(REPO) if "arc-linux" in str(r)], "no runner left"


def _leader(api_client: client.ApiClient, namespace: str, *operators: OperatorProcess) -> OperatorProcess:
    wait_for(lambda: lease_holder(api_client, namespace), TIMEOUT, message="a Lease holder")
    return wait_for(
        lambda: next((op for op in operators if became_leader(op)), None), TIMEOUT, message="a leader"
    )


@pytest.mark.usefixtures("credentials")
def test_a_new_leader_resumes_the_scale_sets_messages_no_job_lost_none_counted_twice(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    # A SIGKILLed leader cannot delete its session: the service lets the next owner in once the
    # session has not been polled for session_timeout (GitHub: minutes; here seconds).
    service.poll_wait, service.session_timeout = 1.0, 3.0
    flags = (*FAST, *leader_election_flags(api_client, namespace))
    first, second = start_operator(*flags), start_operator(*flags)
    leader = _leader(api_client, namespace, first, second)
    standby = second if leader is first else first
    create_pool(api_client, namespace, _scale_set_pool("arc", "arc-linux", maxReplicas=8))
    _listening(api_client, namespace)

    jobs = [service.offer_job("arc-linux") for _ in range(2)]
    _wait_running(api_client, namespace, service, 2, "two jobs running before the leader dies")
    before = _status(api_client, namespace, "arc")["scaleSet"]["lastMessageId"]
    assert before > 0

    assert leader.popen is not None
    leader.popen.send_signal(signal.SIGKILL)
    leader.popen.wait()
    jobs += [service.offer_job("arc-linux") for _ in range(2)]  # while no one listens

    wait_for(lambda: became_leader(standby), TIMEOUT, message="the standby to lead")
    running = _wait_running(
        api_client, namespace, service, 4, "four jobs on four runners: the two before and the two after"
    )
    assert len({j["runnerName"] for j in running}) == 4, "each job on its own runner"
    assert len(service.runners("arc-linux")) == 4, "no runner made for a job counted twice"
    assert _status(api_client, namespace, "arc")["scaleSet"]["lastMessageId"] > before

    _complete_all(api_client, namespace, service, jobs)
    leader.start().wait_ready()  # back as a standby, so teardown stops both cleanly


def _other_installation(fake: FakeGitHub, namespace: str, scale_set: str) -> MessageSession:
    """The scale set made and its message session opened by someone else (another cluster's
    listener), with the project's own scale set client and the same credentials."""
    pool = PoolRef(
        namespace, "arc", Scope(repository=REPO), naming.DEFAULT_CREDENTIAL_SECRET, api_url=fake.url
    )
    wire = Wire()
    rest = PyGithubClient.from_auth(Auth.Token(GOOD_PAT), fake.url)
    other = ScaleSetClient(
        ActionsConnection(fake.url, config_url(pool), from_rest(rest, pool.scope), wire), wire
    )
    group = other.runner_group("default")
    settings = ScaleSetSettings(
        pool, scale_set, max_runners=3, labels=(naming.pool_runner_label(namespace, "arc"),)
    )
    made = other.create_scale_set(desired_scale_set(settings, group.id, group.name))
    return MessageSession.open(other, made.id, "arc-listener-elsewhere", conflict_retries=0)


@pytest.mark.usefixtures("credentials")
def test_a_session_another_owner_holds_is_shown_then_taken_over_when_it_ends(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    service.poll_wait = 1.0
    elsewhere = _other_installation(fake_github, namespace, "arc-linux")
    start_operator(*FAST)
    create_pool(api_client, namespace, _scale_set_pool("arc", "arc-linux"))

    held = wait_condition(
        api_client, namespace, "arc", "DemandVisible", "False", reason="ScaleSetSessionHeld", timeout=TIMEOUT
    )
    message = (condition(held, "DemandVisible") or {}).get("message", "")
    assert "another listener holds the message session" in message and "arc-linux" in message, message
    assert (
        wait_for(
            lambda: [e for e in events(api_client, namespace, "arc") if e[1] == "ScaleSetSessionHeld"],
            TIMEOUT,
            message="an Event saying the session is held",
        )[0][0]
        == "Warning"
    )
    assert service.sessions("arc-linux") == ["arc-listener-elsewhere"]

    elsewhere.close()
    _listening(api_client, namespace)
    assert len(service.sessions("arc-linux")) == 1 and service.sessions("arc-linux") != [
        "arc-listener-elsewhere"
    ]
    _jobs_flow(api_client, namespace, service, 2)


@pytest.mark.usefixtures("credentials")
def test_revoked_admin_tokens_and_expired_queue_tokens_are_renewed_and_jobs_keep_flowing(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    service.poll_wait = 1.0  # the held poll ends soon after the queue token expires
    _listening_pool(api_client, namespace, start_operator)
    _jobs_flow(api_client, namespace, service, 1)
    trades = fake_github.count("actions/runner-registration", status=200)
    told = events(api_client, namespace, "arc")
    refreshes = service.answered("PATCH", "/sessions/", 200)

    service.revoke_admin_tokens()
    service.expire_queue_tokens()
    _jobs_flow(api_client, namespace, service, 2)

    queue_refusals = service.answered(None, "/messages", 401) + service.answered("POST", "/acquirejobs", 401)
    assert queue_refusals, "the queue refused the expired token"
    assert service.answered("PATCH", "/sessions/", 401), "the service refused the revoked admin token"
    assert service.answered("PATCH", "/sessions/", 200) > refreshes, "a new queue token"
    assert fake_github.count("actions/runner-registration", status=200) > trades, "a new admin token"
    _no_problem_shown(api_client, namespace, told)


@pytest.mark.usefixtures("credentials")
def test_a_scale_down_removes_idle_runners_and_leaves_busy_ones_until_their_jobs_end(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    service = fake_github.scale_sets
    _listening_pool(api_client, namespace, start_operator, minReplicas=4, maxReplicas=4)
    wait_for(
        lambda: sum(1 for r in service.runners("arc-linux") if r["status"] == "online") == 4,
        TIMEOUT,
        message="four idle runners online",
    )
    jobs = [service.offer_job("arc-linux") for _ in range(2)]
    wait_for(lambda: len(_running(service)) == 2, TIMEOUT, message="two jobs running")
    busy = {j["runnerName"] for j in _running(service)}
    wait_for(lambda: _busy_pods(api_client, namespace) == busy, TIMEOUT, message="the two busy pods marked")

    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "arc", {"spec": {"autoscaling": {"minReplicas": 0}}}
    )
    seen: list[set[str]] = []

    def idle_gone() -> bool:
        names = {p.metadata.name for p in _pods(api_client, namespace, "arc")}
        seen.append(names)
        return _desired(api_client, namespace) == 2 and names == busy

    wait_for(idle_gone, TIMEOUT, message="the two idle runners' pods gone, the busy ones kept")
    assert all(busy <= names for names in seen), "a busy runner's pod was deleted"
    assert {j["runnerName"] for j in _running(service)} == busy, "both jobs still running where they were"
    assert _service_removals(service) >= 2, "the idle runners were removed by the Actions service"
    assert _rest_runner_deletions(fake_github) == 0, "no REST call per runner"

    _complete_all(api_client, namespace, service, jobs)
