"""The scale set client against GitHub's answers, replayed with ``responses``.

Shapes and status codes are the ones actions/scaleset's client expects (client.go,
session_client.go, errors.go; see runnerpool/scaleset/__init__.py for the provenance): the
registration exchange, the Actions service's ``{"count", "value"}`` lists, its exception bodies
(``typeName`` with the .NET namespace and assembly, matched by substring), the long poll's
202/200/401, and the session's 409 while another owner holds it.
"""

from __future__ import annotations

import base64
import email.utils
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import responses
from responses import matchers

from runnerpool import api
from runnerpool.domain import PoolRef, Scope
from runnerpool.github import transport
from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import BadCredentials, MalformedResponse, NotSent, RateLimited, Unavailable
from runnerpool.github.types import DeleteOutcome, RegistrationToken
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason
from runnerpool.scale_set_pools import ScaleSetRunnerRemoval
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.connection import ActionsConnection
from runnerpool.scaleset.demand import Cursor, desired_runners
from runnerpool.scaleset.errors import (
    JobStillRunning,
    RunnerExists,
    RunnerGroupNotFound,
    RunnerNotFound,
    ScaleSetError,
    ScaleSetNotFound,
    SessionConflict,
)
from runnerpool.scaleset.session import MessageSession, parse_message
from runnerpool.scaleset.types import JobMessageType, Label, Message, MessageSkip, RunnerScaleSet, Statistics
from runnerpool.scaleset.wire import Policy, Wire
from tests.pools import pool_manifest
from testworld.fakegithub.scaleset import actions_exception

API = "https://api.github.com"
CONFIG_URL = "https://github.com/octo-org"
SERVICE = "https://pipelinesghubeus6.actions.githubusercontent.com/AbCdEf123/"
SCALE_SETS = SERVICE + "_apis/runtime/runnerscalesets"
AGENTS = SERVICE + "_apis/distributedtask/pools/0/agents"
QUEUE = SERVICE + "_apis/runtime/runnerscalesets/7/messages"
SESSION_ID = "e4b1b0f2-6a8c-4f3b-9a3b-2f6d0f0c1d2e"
VERSION = {"api-version": "6.0-preview"}
NOW = 1_767_000_000.0


def jwt(exp: float) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part({'exp': int(exp), 'iss': 'x'})}.c2lnbmF0dXJl"


ADMIN = jwt(NOW + 3600)


STATS = {
    "totalAvailableJobs": 0,
    "totalAcquiredJobs": 1,
    "totalAssignedJobs": 3,
    "totalRunningJobs": 2,
    "totalRegisteredRunners": 2,
    "totalBusyRunners": 2,
    "totalIdleRunners": 0,
}
SCALE_SET = {
    "id": 7,
    "name": "k8s-linux",
    "runnerGroupId": 1,
    "runnerGroupName": "Default",
    "labels": [{"type": "System", "name": "k8s-linux"}],
    "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": True},
    "createdOn": "2026-12-02T20:00:00.000Z",
    "runnerJitConfigUrl": SCALE_SETS + "/7/generatejitconfig",
    "statistics": STATS,
}


def session_json(token: str) -> dict[str, Any]:
    return {
        "sessionId": SESSION_ID,
        "ownerName": "runnerpool-0",
        "runnerScaleSet": SCALE_SET,
        "messageQueueUrl": f"{QUEUE}?sessionId={SESSION_ID}",
        "messageQueueAccessToken": token,
        "statistics": STATS,
    }


class Mock(responses.RequestsMock):
    """Keeps the calls made for the assertions after the block (``responses`` forgets them)."""

    kept: list[Any]

    def __exit__(self, *exc: Any) -> Any:
        self.kept = [call for call in self.calls]
        return super().__exit__(*exc)


class World:
    """A client on a fake clock whose waits are recorded, not slept."""

    def __init__(self) -> None:
        self.now = NOW
        self.sleeps: list[float] = []
        self.minted = 0
        self.wire = Wire(Policy(), sleep=self.sleeps.append)
        self.connection = ActionsConnection(
            API, CONFIG_URL, self.registration_token, self.wire, clock=lambda: self.now
        )
        self.client = ScaleSetClient(self.connection, self.wire)

    def registration_token(self) -> RegistrationToken:
        self.minted += 1
        return RegistrationToken(
            f"AABF3JGZDX3P5PMEXLND6TS6FCWO{self.minted}", datetime.fromtimestamp(NOW + 3600, UTC)
        )


@pytest.fixture
def world() -> World:
    return World()


def registration(rsps: Mock, token: str = ADMIN, status: int = 200) -> None:
    body = {"url": SERVICE, "token": token, "token_schema": "OAuthAccessToken"}
    rsps.post(API + "/actions/runner-registration", json=body, status=status)


def test_registration_token_is_traded_for_the_service_and_admin_token(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(
            SERVICE + "_apis/runtime/runnergroups/",
            match=[matchers.query_param_matcher({"groupName": "default", **VERSION})],
            json={"count": 1, "value": [{"id": 1, "name": "Default", "size": 4, "isDefaultGroup": True}]},
        )
        group = world.client.runner_group("default")
    assert (group.id, group.is_default) == (1, True)
    exchange, lookup = (call.request for call in rsps.kept)
    assert exchange.headers["Authorization"] == "RemoteAuth AABF3JGZDX3P5PMEXLND6TS6FCWO1"
    assert json.loads(exchange.body or b"") == {"url": CONFIG_URL, "runner_event": "register"}
    assert lookup.headers["Authorization"] == f"Bearer {ADMIN}"
    assert lookup.headers["Content-Type"] == "application/json"


def test_the_admin_token_is_traded_again_a_minute_before_it_expires(world: World) -> None:
    short, later = jwt(NOW + 600), jwt(NOW + 4000)
    with Mock() as rsps:
        rsps.post(API + "/actions/runner-registration", json={"url": SERVICE, "token": short})
        rsps.post(API + "/actions/runner-registration", json={"url": SERVICE, "token": later})
        rsps.get(AGENTS + "/5", json={"id": 5, "name": "r-5", "runnerScaleSetId": 7})
        world.client.runner(5)
        world.now = NOW + 500  # 100 s left: still fine
        world.client.runner(5)
        world.now = NOW + 541  # 59 s left: traded before the call
        world.client.runner(5)
    bearers = [c.request.headers["Authorization"] for c in rsps.kept if "agents" in c.request.url]
    assert bearers == [f"Bearer {short}", f"Bearer {short}", f"Bearer {later}"]
    assert world.minted == 2


def test_runner_registration_refusals_are_retried_then_reported(world: World) -> None:
    with Mock() as rsps:
        rsps.post(API + "/actions/runner-registration", status=401, json={"message": "Bad credentials"})
        registration(rsps)
        rsps.get(AGENTS + "/5", json={"id": 5, "name": "r-5", "runnerScaleSetId": 7})
        assert world.client.runner(5).name == "r-5"
    assert world.sleeps == [1.0]

    other = World()
    with Mock() as rsps:
        rsps.post(API + "/actions/runner-registration", status=404, json={"message": "Not Found"})
        with pytest.raises(Exception) as raised:
            other.client.runner(5)
    assert "HTTP 404" in str(raised.value)
    assert "AABF" not in str(raised.value)


def test_an_admin_token_without_expiry_is_malformed(world: World) -> None:
    with Mock() as rsps:
        registration(rsps, token="not-a-jwt")
        with pytest.raises(Exception, match="not a JWT"):
            world.client.runner(5)


GHES = "https://ghe.example.com/api/v3"
#: A GHE.com (data residency) enterprise's API: its GitHub is octocorp.ghe.com.
GHE_COM = "https://api.octocorp.ghe.com"

#: Service URLs a hostile answer for the pool's API (a tenant's spec.proxy and
#: spec.githubServerTLS can give one) names: an internal service, plain http to GitHub's own
#: domain, a look-alike host, GitHub's domain on another port; for a GHE.com pool, another
#: enterprise's Actions service, and a GHE.com service for a github.com pool.
NOT_THE_SERVICE = [
    (API, "http://10.0.0.5:8080/internal/"),
    (API, "http://pipelines.actions.githubusercontent.com/AbC/"),
    (API, "https://pipelines.actions.githubusercontent.com.evil.example/AbC/"),
    (API, "https://pipelines.actions.githubusercontent.com:8443/AbC/"),
    (API, "https://metadata.internal/"),
    (API, "https://[::1/"),
    (API, "https://pipelines.actions.octocorp.ghe.com/AbC/"),
    (GHE_COM, "https://pipelines.actions.othercorp.ghe.com/AbC/"),
    (GHE_COM, "https://actions.octocorp.ghe.com.evil.example/AbC/"),
    (GHE_COM, "http://pipelines.actions.octocorp.ghe.com/AbC/"),
    (GHE_COM, "https://pipelines.actions.octocorp.ghe.com:8443/AbC/"),
    (GHE_COM, "https://ghe.com/AbC/"),
]


def client_of(api: str, hosts: tuple[str, ...] = ()) -> ScaleSetClient:
    """A client of a pool whose GitHub API is ``api``, allowed ``hosts`` (``--github-api-host``)."""
    wire = Wire(Policy(retries=0))
    token = RegistrationToken("AABF3JGZDX3P5PMEXLND6TS6FCWO1", datetime.fromtimestamp(NOW + 3600, UTC))
    connection = ActionsConnection(api, CONFIG_URL, lambda: token, wire, clock=lambda: NOW, hosts=hosts)
    return ScaleSetClient(connection, wire)


@pytest.mark.parametrize(("api", "url"), NOT_THE_SERVICE)
def test_a_service_url_that_is_not_githubs_actions_service_is_refused_unsent(api: str, url: str) -> None:
    with Mock() as rsps:
        rsps.post(api + "/actions/runner-registration", json={"url": url, "token": ADMIN})
        with pytest.raises(MalformedResponse, match="not called") as raised:
            client_of(api).runner_group("default")
    assert [call.request.url for call in rsps.kept] == [api + "/actions/runner-registration"]
    assert raised.value.reason == Reason.MALFORMED_RESPONSE
    assert any(why in str(raised.value) for why in ("not https", "not GitHub's Actions service", "not a URL"))


@pytest.mark.parametrize(
    ("api", "service", "hosts"),
    [
        (API, "https://pipelinesghubeus6.actions.githubusercontent.com/AbC/", ()),
        (GHES, "https://ghe.example.com/_services/pipelines/AbC/", ()),
        (GHES, "https://actions.ghe.example.com/AbC/", ("actions.ghe.example.com:443",)),
        ("http://127.0.0.1:8081", "http://127.0.0.1:8081/_actions/", ()),  # the test world's GitHub
        (GHE_COM, "https://pipelines.actions.octocorp.ghe.com/AbC/", ()),  # GHE.com: its own service
        (GHE_COM, "https://actions.octocorp.ghe.com/AbC/", ()),
    ],
)
def test_githubs_actions_service_the_pools_own_github_and_allowed_hosts_are_called(
    api: str, service: str, hosts: tuple[str, ...]
) -> None:
    with Mock() as rsps:
        rsps.post(api + "/actions/runner-registration", json={"url": service, "token": ADMIN})
        rsps.get(service + "_apis/distributedtask/pools/0/agents/5", json={"id": 5, "name": "r-5"})
        assert client_of(api, hosts).runner(5).name == "r-5"


def test_an_actions_service_redirect_is_not_followed(world: World) -> None:
    with Mock(assert_all_requests_are_fired=False) as rsps:
        registration(rsps)
        rsps.get(AGENTS + "/5", status=302, headers={"Location": "http://10.0.0.5:8080/internal"})
        rsps.get("http://10.0.0.5:8080/internal", json={"id": 5, "name": "internal"})
        with pytest.raises(ScaleSetError, match="HTTP 302"):
            world.client.runner(5)
    assert "http://10.0.0.5:8080/internal" not in [call.request.url for call in rsps.kept]


def test_a_message_queue_url_that_is_not_githubs_actions_service_is_refused_unpolled(world: World) -> None:
    hostile = {**session_json("queue-1"), "messageQueueUrl": "http://10.0.0.5:8080/queue?sessionId=s"}
    with Mock() as rsps:
        registration(rsps)
        rsps.post(SCALE_SETS + "/7/sessions", json=hostile)
        with pytest.raises(MalformedResponse, match="not https; not called"):
            MessageSession.open(world.client, 7, "runnerpool-0")


def test_scale_set_lookup_create_update_delete(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        by_name = matchers.query_param_matcher({"runnerGroupId": "1", "name": "k8s linux", **VERSION})
        rsps.get(SCALE_SETS, match=[by_name], json={"count": 0, "value": []})
        rsps.post(SCALE_SETS, json=SCALE_SET)
        rsps.patch(
            SCALE_SETS + "/7",
            json={**SCALE_SET, "labels": [*SCALE_SET["labels"], {"type": "User", "name": "gpu"}]},
        )
        rsps.delete(SCALE_SETS + "/7", status=204)
        assert world.client.scale_set(1, "k8s linux") is None
        created = world.client.create_scale_set(RunnerScaleSet(name="k8s-linux", runner_group_id=1))
        updated = world.client.update_scale_set(
            7,
            RunnerScaleSet(
                name="k8s-linux", labels=(Label(name="k8s-linux"), Label(name="gpu", type="User"))
            ),
        )
        world.client.delete_scale_set(7)
    assert created.id == 7 and created.statistics is not None and created.statistics.total_assigned_jobs == 3
    assert [label.name for label in updated.labels] == ["k8s-linux", "gpu"]
    create_body = json.loads(rsps.kept[2].request.body or b"")
    assert create_body["labels"] == [{"name": "k8s-linux", "type": "System"}]
    assert create_body["runnerGroupId"] == 1 and "id" not in create_body


def test_a_deleted_scale_set_is_scale_set_not_found(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(SCALE_SETS + "/7", status=404)
        rsps.delete(SCALE_SETS + "/7", status=404)
        rsps.post(SCALE_SETS + "/7/sessions", status=404)
        with pytest.raises(ScaleSetNotFound):
            world.client.scale_set_by_id(7)
        with pytest.raises(ScaleSetNotFound):
            world.client.delete_scale_set(7)
        with pytest.raises(ScaleSetNotFound):
            MessageSession.open(world.client, 7, "runnerpool-0")


def test_an_unknown_runner_group_is_named(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(SERVICE + "_apis/runtime/runnergroups/", json={"count": 0, "value": []})
        with pytest.raises(RunnerGroupNotFound, match="'gpu-runners'"):
            world.client.runner_group("gpu-runners")


@pytest.mark.parametrize("empty", [{"count": 0, "value": None}, {"count": 0}], ids=["null", "absent"])
def test_an_empty_listing_with_a_null_or_absent_value_is_empty_as_the_go_client_reads_it(
    world: World, empty: dict[str, Any]
) -> None:
    """A scale set not made yet is made, and an unknown group named, not a malformed answer."""
    with Mock() as rsps:
        registration(rsps)
        rsps.get(SCALE_SETS, json=empty)
        rsps.get(SERVICE + "_apis/runtime/runnergroups/", json=empty)
        assert world.client.scale_set(1, "k8s-linux") is None
        with pytest.raises(RunnerGroupNotFound, match="'gpu-runners'"):
            world.client.runner_group("gpu-runners")


def test_a_listing_without_a_value_list_that_is_not_empty_is_malformed(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(SCALE_SETS, json={"count": 1, "value": None})
        with pytest.raises(MalformedResponse, match="no value list"):
            world.client.scale_set(1, "k8s-linux")


def test_jit_config_and_the_runner_exceptions(world: World) -> None:
    jit = {
        "runner": {"id": 41, "name": "pool-abc", "runnerScaleSetId": 7},
        "encodedJITConfig": "eyJzZWNyZXQiOiJ4In0=",
    }
    with Mock() as rsps:
        registration(rsps)
        rsps.post(SCALE_SETS + "/7/generatejitconfig", json=jit)
        rsps.post(
            SCALE_SETS + "/7/generatejitconfig",
            status=409,
            json=actions_exception("AgentExistsException", "Agent exists with name pool-abc"),
        )
        rsps.delete(
            AGENTS + "/41", status=409, json=actions_exception("JobStillRunningException", "still running")
        )
        rsps.delete(AGENTS + "/42", status=404, json=actions_exception("AgentNotFoundException", "missing"))
        rsps.delete(AGENTS + "/41", status=204)
        config = world.client.generate_jit_config(7, "pool-abc")
        with pytest.raises(RunnerExists):
            world.client.generate_jit_config(7, "pool-abc")
        with pytest.raises(JobStillRunning):
            world.client.remove_runner(41)
        with pytest.raises(RunnerNotFound):
            world.client.remove_runner(42)
        world.client.remove_runner(41)
    assert config.runner.id == 41
    assert "eyJzZWNyZXQi" not in repr(config)
    assert json.loads(rsps.kept[1].request.body or b"") == {"name": "pool-abc", "workFolder": "_work"}


def test_a_scale_set_pools_runners_are_removed_by_the_service_with_rest_outcomes(world: World) -> None:
    pools = {
        name: ParsedPool(raw, api.RunnerPool.model_validate(raw))
        for name, raw in (
            (
                "arc",
                pool_manifest(
                    "arc",
                    org="octo-org",
                    scaleSet={"name": "arc-linux"},
                    autoscaling={"minReplicas": 0, "maxReplicas": 2},
                ),
            ),
            ("labelled", pool_manifest("labelled", org="octo-org")),
        )
    }

    class Reads:
        def pool(self, namespace: str, name: str) -> ParsedPool | None:
            return pools.get(name)

    class Clients:
        def get(self, pool: PoolRef) -> ScaleSetClient:
            if pool.credential_secret_name == "deleted":
                raise CredentialError(CredentialError.MISSING, "Secret team-a/deleted not found")
            return world.client

    removal = ScaleSetRunnerRemoval(Reads(), Clients())  # type: ignore[arg-type]
    ref = PoolRef("team-a", "arc", Scope(organization="octo-org"), "cred", api_url=API)
    assert removal.remover(PoolRef("team-a", "labelled", ref.scope, "cred")) is None, "REST for others"
    assert removal.remover(PoolRef("team-a", "gone", ref.scope, "cred")) is None
    unreadable = PoolRef("team-a", "arc", ref.scope, "deleted", api_url=API)
    assert removal.remover(unreadable) is None, "REST, with the last client that worked"
    remove = removal.remover(ref)
    assert remove is not None
    with Mock() as rsps:
        registration(rsps)
        rsps.delete(AGENTS + "/41", status=409, json=actions_exception("JobStillRunningException", "busy"))
        rsps.delete(AGENTS + "/42", status=404, json=actions_exception("AgentNotFoundException", "gone"))
        rsps.delete(AGENTS + "/43", status=204)
        outcomes = [remove(41), remove(42), remove(43)]
    assert outcomes == [DeleteOutcome.BUSY, DeleteOutcome.ALREADY_GONE, DeleteOutcome.DELETED]
    assert not [c for c in rsps.kept if "/actions/runners" in c.request.url], "no REST call per runner"


def test_a_session_another_owner_holds_is_asked_for_again(world: World) -> None:
    conflict = actions_exception(
        "TaskAgentSessionConflictException", "The session for this agent already exists."
    )
    with Mock() as rsps:
        registration(rsps)
        rsps.post(SCALE_SETS + "/7/sessions", status=409, json=conflict)
        rsps.post(SCALE_SETS + "/7/sessions", status=409, json=conflict)
        rsps.post(SCALE_SETS + "/7/sessions", json=session_json("queue-1"))
        session = MessageSession.open(world.client, 7, "runnerpool-0")
    assert world.sleeps == [30.0, 30.0]
    assert session.session.session_id == SESSION_ID
    assert json.loads(rsps.kept[1].request.body or b"") == {"ownerName": "runnerpool-0"}

    with Mock() as rsps:
        rsps.post(SCALE_SETS + "/7/sessions", status=409, json=conflict)
        with pytest.raises(SessionConflict, match="3 attempts"):
            MessageSession.open(world.client, 7, "runnerpool-0", conflict_retries=2, conflict_wait=5)
    assert world.sleeps[2:] == [5.0, 5.0]


def message(message_id: int, jobs: list[dict[str, Any]], **stats: int) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "messageType": "RunnerScaleSetJobMessages",
        "body": json.dumps(jobs),
        "statistics": {**STATS, **stats},
    }


JOB = {
    "runnerRequestId": 1001,
    "repositoryName": "app",
    "ownerName": "octo-org",
    "jobId": "c0ffee",
    "jobWorkflowRef": "octo-org/app/.github/workflows/ci.yml@refs/heads/main",
    "jobDisplayName": "build",
    "workflowRunId": 555,
    "eventName": "push",
    "requestLabels": ["k8s-linux"],
    "queueTime": "2026-12-02T20:00:00Z",
    "scaleSetAssignTime": "2026-12-02T20:00:01Z",
    "runnerAssignTime": "0001-01-01T00:00:00",
    "finishTime": "0001-01-01T00:00:00",
}


def opened(world: World, rsps: Mock, token: str = "queue-1") -> MessageSession:
    registration(rsps)
    rsps.post(SCALE_SETS + "/7/sessions", json=session_json(token))
    return MessageSession.open(world.client, 7, "runnerpool-0")


def test_poll_answers_nothing_then_a_message_with_its_jobs_and_statistics(world: World) -> None:
    body = [
        {**JOB, "messageType": "JobAvailable", "acquireJobUrl": SERVICE + "acquire"},
        {**JOB, "messageType": "JobAssigned"},
        {**JOB, "messageType": "JobStarted", "runnerId": 41, "runnerName": "pool-abc"},
        {**JOB, "messageType": "SomethingNew"},
        {
            **JOB,
            "messageType": "JobCompleted",
            "result": "canceled",
            "runnerId": 41,
            "runnerName": "pool-abc",
        },
    ]
    with Mock() as rsps:
        session = opened(world, rsps)
        rsps.get(QUEUE, status=202)
        rsps.get(QUEUE, json=message(12, body, totalAssignedJobs=4))
        assert session.poll(0, 10) is None
        got = session.poll(11, 10)
    assert got is not None and got.message_id == 12
    assert got.statistics.total_assigned_jobs == 4
    assert [job.message_type for job in got.jobs] == [
        "JobAvailable",
        "JobAssigned",
        "JobStarted",
        "JobCompleted",
    ]
    assert got.of(JobMessageType.STARTED)[0].runner_name == "pool-abc"
    assert got.of(JobMessageType.COMPLETED)[0].result == "canceled"
    first, second = (c.request for c in rsps.kept if c.request.url.startswith(QUEUE))
    assert first.headers["Authorization"] == "Bearer queue-1"
    assert first.headers["X-ScaleSetMaxCapacity"] == "10"
    assert first.headers["Accept"] == "application/json; api-version=6.0-preview"
    assert first.headers["User-Agent"] == "runnerpool-scaleset"
    assert "lastMessageId" not in (first.url or "")
    assert second.url == f"{QUEUE}?sessionId={SESSION_ID}&lastMessageId=11"


def test_a_message_without_statistics_or_body_parses_as_the_go_client_does() -> None:
    """session_client_test.go of actions/scaleset answers exactly this and its client takes it:
    refusing it left the message unacknowledged, delivered again ahead of every later one."""
    got = parse_message({"messageId": 1, "messageType": "RunnerScaleSetJobMessages"})
    assert (got.message_id, got.statistics, got.jobs, got.skipped) == (1, None, (), None)


def test_null_job_fields_are_their_defaults_as_go_leaves_them() -> None:
    nulls = {**JOB, "messageType": "JobAvailable", "runnerName": None, "requestLabels": None, "result": None}
    got = parse_message({**message(2, [nulls]), "statistics": None})
    assert [(job.runner_request_id, job.runner_name, job.request_labels) for job in got.jobs] == [
        (1001, "", ())
    ]
    assert got.statistics is None


def test_a_job_message_that_does_not_parse_is_passed_over_and_logged_without_its_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = {
        **JOB,
        "messageType": "JobStarted",
        "runnerId": "not-a-number",
        "jobDisplayName": "deploy s3cr3t",
    }
    good = {**JOB, "messageType": "JobAssigned", "runnerRequestId": 1002}
    got = parse_message(message(3, [broken, good]))
    assert [job.runner_request_id for job in got.jobs] == [1002] and got.skipped is None
    assert "JobStarted job message (runner request 1001) does not parse" in caplog.text
    assert "s3cr3t" not in caplog.text and "not-a-number" not in caplog.text


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({**message(4, [JOB]), "messageType": "RunnerScaleSetSomethingNew"}, MessageSkip.UNKNOWN_TYPE),
        ({**message(4, []), "body": "{not json"}, MessageSkip.BROKEN_BODY),
        ({**message(4, []), "body": json.dumps({"messageType": "JobAvailable"})}, MessageSkip.BROKEN_BODY),
    ],
)
def test_a_message_of_another_type_or_with_a_broken_body_is_skipped_not_malformed(
    answer: dict[str, Any], why: MessageSkip
) -> None:
    """With a readable id it can be acknowledged, so it is: refused, it stalled the queue."""
    got = parse_message(answer)
    assert (got.message_id, got.jobs, got.skipped) == (4, (), why)


def test_only_an_answer_without_a_readable_message_id_is_malformed() -> None:
    for answer in ({"messageType": "RunnerScaleSetJobMessages"}, {"messageId": "5"}, [], None):
        with pytest.raises(MalformedResponse, match="no messageId"):
            parse_message(answer)


def test_an_expired_queue_token_refreshes_the_session_and_polls_again(world: World) -> None:
    with Mock() as rsps:
        session = opened(world, rsps)
        rsps.get(QUEUE, status=401, match=[matchers.header_matcher({"Authorization": "Bearer queue-1"})])
        rsps.patch(SCALE_SETS + f"/7/sessions/{SESSION_ID}", json=session_json("queue-2"))
        rsps.get(
            QUEUE,
            json=message(3, [{**JOB, "messageType": "JobAssigned"}]),
            match=[matchers.header_matcher({"Authorization": "Bearer queue-2"})],
        )
        rsps.delete(f"{QUEUE}/3", status=204)
        got = session.poll(2, 5)
        session.acknowledge(3)
    assert got is not None and got.message_id == 3
    ack = rsps.kept[-1].request
    assert ack.url == f"{QUEUE}/3?sessionId={SESSION_ID}"
    assert ack.headers["Authorization"] == "Bearer queue-2"


def test_acquire_jobs_uses_the_queue_token_and_close_deletes_the_session(world: World) -> None:
    with Mock() as rsps:
        session = opened(world, rsps)
        rsps.post(SCALE_SETS + "/7/acquirejobs", json={"count": 1, "value": [1001]})
        rsps.delete(SCALE_SETS + f"/7/sessions/{SESSION_ID}", status=204)
        assert session.acquire_jobs([1001, 1002]) == [1001]
        session.close()
    acquire = rsps.kept[2].request
    assert acquire.headers["Authorization"] == "Bearer queue-1"
    assert json.loads(acquire.body or b"") == [1001, 1002]
    assert rsps.kept[3].request.headers["Authorization"] == f"Bearer {ADMIN}"


@pytest.mark.parametrize("answer", [{"count": 0, "value": None}, {"count": 0}], ids=["null", "absent"])
def test_acquired_jobs_null_or_absent_are_none_acquired_as_the_go_client_reads_them(
    world: World, answer: dict[str, Any]
) -> None:
    """Refused as malformed, the message that offered the jobs was never acknowledged."""
    with Mock() as rsps:
        session = opened(world, rsps)
        rsps.post(SCALE_SETS + "/7/acquirejobs", json=answer)
        assert session.acquire_jobs([1001]) == []


#: The UTF-8 byte-order mark the Actions service may put before a body.
BOM = b"\xef\xbb\xbf"


def with_bom(rsps: Mock, method: str, url: str, data: Any, status: int = 200) -> None:
    body = BOM + json.dumps(data).encode()
    rsps.add(method, url, body=body, status=status, content_type="application/json; charset=utf-8")


def test_answers_that_start_with_a_utf8_byte_order_mark_are_read(world: World) -> None:
    """actions/scaleset's client trims a byte-order mark from every answer; ``requests`` refused
    one ("Unexpected UTF-8 BOM") and the pool showed ``ScaleSetUnreachable``."""
    busy = actions_exception("JobStillRunningException", "still running")
    with Mock() as rsps:
        with_bom(rsps, "POST", API + "/actions/runner-registration", {"url": SERVICE, "token": ADMIN})
        with_bom(rsps, "POST", SCALE_SETS + "/7/sessions", session_json("queue-1"))
        with_bom(rsps, "GET", QUEUE, message(3, [{**JOB, "messageType": "JobAvailable"}]))
        with_bom(rsps, "POST", SCALE_SETS + "/7/acquirejobs", {"count": 1, "value": [1001]})
        with_bom(rsps, "DELETE", AGENTS + "/41", busy, status=409)
        session = MessageSession.open(world.client, 7, "runnerpool-0")
        got = session.poll(0, 5)
        assert session.acquire_jobs([1001]) == [1001]
        with pytest.raises(JobStillRunning):  # the error body's exception name is read too
            world.client.remove_runner(41)
    assert session.session.session_id == SESSION_ID
    assert got is not None and got.message_id == 3 and [job.runner_request_id for job in got.jobs] == [1001]


def test_server_errors_are_retried_with_growing_waits(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(AGENTS + "/5", status=503)
        rsps.get(AGENTS + "/5", status=502)
        rsps.get(AGENTS + "/5", json={"id": 5, "name": "r-5", "runnerScaleSetId": 7})
        assert world.client.runner(5).id == 5
    assert world.sleeps == [1.0, 2.0]

    with Mock() as rsps:
        rsps.get(AGENTS + "/5", status=500, json=actions_exception("VssServiceException", "boom"))
        with pytest.raises(Unavailable, match="HTTP 500"):
            world.client.runner(5)
    assert world.sleeps[2:] == [1.0, 2.0, 4.0, 8.0]
    assert len(rsps.kept) == 5


@pytest.mark.parametrize("went_before", [False, True], ids=["first attempt", "after a 502"])
def test_a_call_held_unsent_says_so_only_when_no_attempt_went(world: World, went_before: bool) -> None:
    """Refused unsent (a host held slow) after an attempt that went and failed (a 502), the call
    was NotSent all the same: a JIT config the service may have made was taken for none, and a
    deleted pool let go without looking for its runner."""
    with Mock() as rsps:
        registration(rsps)
        if went_before:
            rsps.get(AGENTS + "/5", status=502)
        rsps.get(AGENTS + "/5", body=transport.HostSlow("the host is held slow"))
        with pytest.raises(Unavailable) as raised:
            world.client.runner(5)
    assert isinstance(raised.value, NotSent) is not went_before


def test_a_long_retry_after_is_the_callers_wait_not_a_sleep(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        rsps.get(AGENTS + "/5", status=429, headers={"Retry-After": "120"})
        with pytest.raises(RateLimited) as raised:
            world.client.runner(5)
    assert raised.value.retry_after == 120.0
    assert world.sleeps == []


def test_a_short_retry_after_on_every_attempt_is_kept_for_the_callers_wait(world: World) -> None:
    """The wire's retries waited as asked, and the last 429 came back as a RateLimited that
    asked for nothing: the listener's next try came after its own second or two."""
    with Mock() as rsps:
        registration(rsps)
        rsps.get(AGENTS + "/5", status=429, headers={"Retry-After": "20"})
        with pytest.raises(RateLimited) as raised:
            world.client.runner(5)
    assert world.sleeps == [20.0] * 4
    assert raised.value.retry_after == 20.0


def test_a_retry_after_given_as_a_date_is_honoured(world: World) -> None:
    """RFC 9110 allows an HTTP date; read as no wait, the five attempts went within 15 s."""
    later = email.utils.formatdate(time.time() + 25, usegmt=True)
    with Mock() as rsps:
        registration(rsps)
        rsps.get(AGENTS + "/5", status=429, headers={"Retry-After": later})
        with pytest.raises(RateLimited) as raised:
            world.client.runner(5)
    assert len(world.sleeps) == 4 and all(20.0 <= wait <= 25.0 for wait in world.sleeps), world.sleeps
    assert raised.value.retry_after is not None and 20.0 <= raised.value.retry_after <= 25.0


def test_a_revoked_admin_token_is_traded_again_once_and_the_call_made_again(world: World) -> None:
    """GitHub revokes admin tokens before their ``exp``: a 401 is answered with a new one."""
    revoked, fresh = jwt(NOW + 3600), jwt(NOW + 3601)
    with Mock() as rsps:
        registration(rsps, token=revoked)
        registration(rsps, token=fresh)
        refused = matchers.header_matcher({"Authorization": f"Bearer {revoked}"})
        rsps.get(AGENTS + "/5", status=401, match=[refused])
        rsps.get(
            AGENTS + "/5",
            json={"id": 5, "name": "r-5", "runnerScaleSetId": 7},
            match=[matchers.header_matcher({"Authorization": f"Bearer {fresh}"})],
        )
        assert world.client.runner(5).name == "r-5"
        assert world.client.runner(5).name == "r-5"  # the new token is kept
    assert world.minted == 2
    bearers = [c.request.headers["Authorization"] for c in rsps.kept if "agents" in c.request.url]
    assert bearers == [f"Bearer {revoked}", f"Bearer {fresh}", f"Bearer {fresh}"]


def test_an_admin_token_refused_again_after_a_new_trade_is_bad_credentials(world: World) -> None:
    with Mock() as rsps:
        registration(rsps)
        registration(rsps)
        rsps.get(AGENTS + "/5", status=401)
        with pytest.raises(BadCredentials):
            world.client.runner(5)
    assert world.minted == 2, "traded once more, not in a loop"
    assert sum(1 for c in rsps.kept if "agents" in c.request.url) == 2


def test_desired_runners_follow_assigned_jobs_within_bounds() -> None:
    stats = Statistics(total_assigned_jobs=3)
    assert desired_runners(stats, 0, 10) == 3
    assert desired_runners(stats, 0, 10, min_idle=2) == 5
    assert desired_runners(stats, 0, 4, min_idle=2) == 4
    assert desired_runners(Statistics(), 2, 10) == 2


def test_a_redelivered_message_does_not_move_the_cursor() -> None:
    first = Message(message_id=5, statistics=Statistics(total_assigned_jobs=2))
    again = Message(message_id=5, statistics=Statistics(total_assigned_jobs=9))
    cursor = Cursor().advance(first)
    assert cursor.advance(again) is cursor
    assert cursor == Cursor(5, Statistics(total_assigned_jobs=2))


def test_a_message_without_statistics_keeps_the_cursors_last_ones() -> None:
    cursor = Cursor().advance(Message(message_id=5, statistics=Statistics(total_assigned_jobs=2)))
    assert cursor.advance(Message(message_id=6)) == Cursor(6, Statistics(total_assigned_jobs=2))
