"""A log line about an API error says what went wrong, on one line, without HTTP headers.

``str(ApiException)`` is several lines: the status, every response header (``Audit-Id``...)
and the raw body; ``logger.exception`` adds a traceback. Issue 22 saw both in the operator's
log (a poll racing a pool's deletion; the informer's "Error during initial list" every 5 s).
Every call site now goes through ``runnerpool.api_errors``: status code, reason and the API's
message on one line, the traceback at DEBUG only. The 404 and 409 here come from the real API
server (with its headers); 403 and 500 are built the same way the client builds them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.informer import SharedInformer
from urllib3 import HTTPResponse

from runnerpool import api
from runnerpool.api_errors import describe, is_access_denied
from runnerpool.demand.writer import DemandWriteFailed, DemandWriter
from runnerpool.github.fake import FakeGitHubClients
from runnerpool.runners.listing import ListingKey
from runnerpool.runners.manager import RunnerManagers
from runnerpool.runtime import listwatch, runnables
from runnerpool.runtime.kube import Kube
from runnerpool.settings import GitHubSettings, RunnerSettings
from tests.helpers import wait_for
from tests.test_demand_recording import API as DEMAND_API
from tests.test_demand_recording import Pools, create, job
from tests.test_runner_listing import Cache, Pods

HEADER_TEXT = ("Audit-Id", "HTTP response headers", "HTTP response body", "Traceback")


def _built(code: int, reason: str, message: str) -> ApiException:
    """As the client raises it: urllib3's response, the API server's headers and Status body."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    response = HTTPResponse(
        body=json.dumps({**body, "code": code}).encode(),
        headers={"Audit-Id": "0b5c6b1e-5a3e-4c44-9d7e-2f1f7c1c8a11", "Content-Type": "application/json"},
        status=code,
        reason=reason,
        preload_content=True,
    )
    return ApiException(http_resp=response)


@pytest.fixture
def api_errors(api_client: client.ApiClient, namespace: str) -> dict[int, ApiException]:
    core = client.CoreV1Api(api_client)
    errors: dict[int, ApiException] = {}
    try:
        core.read_namespaced_secret("no-such-secret", namespace)
    except ApiException as err:
        errors[404] = err
    config_map = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="twice"))
    core.create_namespaced_config_map(namespace, config_map)
    try:
        core.create_namespaced_config_map(namespace, config_map)
    except ApiException as err:
        errors[409] = err
    errors[403] = _built(
        403,
        "Forbidden",
        'pods is forbidden: User "system:serviceaccount:runnerpool-system:runnerpool-operator" '
        'cannot list resource "pods" in API group "" in the namespace "x"',
    )
    errors[500] = _built(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
    assert set(errors) == {403, 404, 409, 500}
    return errors


def _message(err: ApiException) -> str:
    return str(json.loads(err.body)["message"])


def _check(records: list[logging.LogRecord], err: ApiException) -> logging.LogRecord:
    """Exactly the lines above DEBUG: one, naming the code, reason and message, nothing else."""
    shown = [r for r in records if r.levelno > logging.DEBUG]
    assert len(shown) >= 1, "nothing logged"
    for record in shown:
        text = record.getMessage()
        assert "\n" not in text, text
        assert record.exc_info is None and not record.exc_text, "a traceback above DEBUG"
        for forbidden in HEADER_TEXT:
            assert forbidden not in text, text
    text = shown[0].getMessage()
    assert str(err.status) in text and _message(err) in text, text
    assert json.loads(err.body)["reason"] in text, text
    return shown[0]


@pytest.mark.parametrize("code", [404, 409, 403, 500])
def test_describe_gives_code_reason_and_message_on_one_line(
    api_errors: dict[int, ApiException], code: int
) -> None:
    err = api_errors[code]
    assert "Audit-Id" in str(err), "the exception itself carries the headers (else this proves nothing)"

    text = describe(err)

    assert text.startswith(f"{code} {json.loads(err.body)['reason']}: ")
    assert _message(err) in text and "\n" not in text
    assert not any(forbidden in text for forbidden in HEADER_TEXT)


@pytest.mark.parametrize("code", [404, 409, 403, 500])
def test_the_informers_failing_initial_list_is_one_line_every_time(
    api_errors: dict[int, ApiException], code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The library logs it with ``logger.exception`` every 5 s while the list fails."""
    err = api_errors[code]
    tried = threading.Event()

    def failing_list(**_: Any) -> object:
        tried.set()
        raise err

    assert listwatch.__name__  # the import installs the folding
    caplog.set_level(logging.DEBUG)
    informer = SharedInformer(failing_list)
    informer.start()
    try:
        wait_for(tried.is_set, message="the informer's first list")
        wait_for(
            lambda: any("initial list" in r.getMessage() for r in caplog.records),
            message="the informer's log line",
        )
    finally:
        informer.stop()
    records = [r for r in caplog.records if r.name.startswith("kubernetes.informer")]
    line = _check(records, err)
    assert "Error during initial list" in line.getMessage()
    traces = [r for r in caplog.records if r.exc_info and r.name == listwatch.__name__]
    assert traces and all(r.levelno == logging.DEBUG for r in traces), "the traceback, at DEBUG"


@pytest.mark.parametrize("code", [404, 409, 403, 500])
def test_a_runner_managers_pool_failure_is_one_line(
    api_errors: dict[int, ApiException], code: int, caplog: pytest.LogCaptureFixture
) -> None:
    err = api_errors[code]

    class FailingPods(Cache):
        def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
            raise err

    cache = FailingPods()
    ref = cache.add("build", org="octo-org")
    managers = RunnerManagers(
        cache,
        FakeGitHubClients(),
        Pods(),  # type: ignore[arg-type]
        lambda key: None,
        settings=RunnerSettings(sync_interval=60),
        scheduler=BackgroundScheduler(timezone=UTC),
    )
    managers.start(ref)
    caplog.set_level(logging.DEBUG, logger="runnerpool.runners.manager")

    managers.sync(ListingKey.of(ref))

    line = _check([r for r in caplog.records if "runner manager for pool" in r.getMessage()], err)
    assert line.levelno == logging.WARNING


@pytest.mark.parametrize("code", [404, 409, 403, 500])
def test_a_part_that_fails_to_start_is_one_line(
    api_errors: dict[int, ApiException], code: int, caplog: pytest.LogCaptureFixture
) -> None:
    err = api_errors[code]

    def start() -> None:
        raise err

    manager = runnables.Supervisor([runnables.Runnable("informers", start)])
    caplog.set_level(logging.DEBUG, logger=runnables.__name__)
    thread = threading.Thread(target=manager.run)
    thread.start()
    thread.join(10)

    assert not thread.is_alive()
    line = _check([r for r in caplog.records if r.name == runnables.__name__], err)
    assert line.levelno == logging.ERROR and "failed to start" in line.getMessage()


@pytest.mark.parametrize("code", [404, 409, 403, 500])
def test_the_lease_locks_failure_is_one_line(
    api_errors: dict[int, ApiException], code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The library's LeaseLock prints the exception into its message ("Failed to create lock
    as " + str(err)); its logger is folded once runnerpool.runtime.leader is imported."""
    from runnerpool.runtime import leader  # noqa: PLC0415 - the import is what is tested

    assert leader.__name__
    err = api_errors[code]
    caplog.set_level(logging.INFO, logger="leaderelection")

    logging.getLogger("leaderelection").info("Failed to create lock as {}".format(err))  # noqa: UP032

    line = _check([r for r in caplog.records if r.name == "leaderelection"], err)
    assert line.getMessage().startswith("Failed to create lock as ")


def test_a_poll_racing_a_pools_deletion_logs_nothing(
    api_client: client.ApiClient,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cache still lists the pool, the API server no longer has it: its demand is gone too."""
    create(api_client, namespace, "gone", repository="octo-org/hello-world", autoscaling={"maxReplicas": 5})
    pools = Pools(api_client, namespace)
    (pool,) = pools.autoscaling_pools()
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "gone"
    )
    writer = DemandWriter(
        Kube(api_client), _Stale(pools, pool), GitHubSettings(api_url=DEMAND_API).api_url_of
    )
    caplog.set_level(logging.DEBUG)

    writer.repair(pool, [job(7, "queued", ["self-hosted"])], ["octo-org/hello-world"], timedelta(minutes=1))

    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []


class _Stale:
    """The informer cache a moment before the pool's deletion reached it."""

    def __init__(self, pools: Pools, pool: api.RunnerPool) -> None:
        self._pools, self._pool = pools, pool

    def __getattr__(self, name: str) -> Callable[..., Any]:
        found: Callable[..., Any] = getattr(self._pools, name)
        return found

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        return []


@pytest.mark.parametrize("code", [403, 500])
def test_a_demand_write_that_fails_says_why_on_one_line(
    api_client: client.ApiClient,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    api_errors: dict[int, ApiException],
    code: int,
) -> None:
    """What the poller and the webhook receiver log when the API server refuses the write."""
    err = api_errors[code]
    create(api_client, namespace, "build", repository="octo-org/hello-world", autoscaling={"maxReplicas": 5})
    pools = Pools(api_client, namespace)

    class Refusing(Kube):
        def patch(self, *args: Any, **kwargs: Any) -> Any:
            raise err

    writer = DemandWriter(Refusing(api_client), pools, GitHubSettings(api_url=DEMAND_API).api_url_of)

    with pytest.raises(DemandWriteFailed) as failed:
        writer.record_job(job(8, "queued", ["self-hosted"]))

    text = str(failed.value)
    assert "\n" not in text and _message(err) in text and str(code) in text
    assert not any(forbidden in text for forbidden in HEADER_TEXT), text


@pytest.mark.parametrize(
    ("message", "denied"),
    [
        (
            'secrets is forbidden: User "system:serviceaccount:runnerpool-system:runnerpool-operator" '
            'cannot create resource "secrets" in API group "" in the namespace "team-a"',
            True,
        ),
        (
            'secrets "runner-token-build" is forbidden: exceeded quota: no-secrets, requested: secrets=1, '
            "used: secrets=0, limited: secrets=0",
            False,
        ),
        ('admission webhook "policy.example.com" denied the request: budgets must allow a disruption', False),
    ],
    ids=["rbac", "quota", "webhook"],
)
def test_only_the_authorizers_403_counts_as_access_taken_away(message: str, denied: bool) -> None:
    """A quota's or a policy's 403 had the gates ask the API server again about the namespace
    (six access reviews) at every pass that met it."""
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}
    assert is_access_denied(ApiException(status=403, reason="Forbidden", body=json.dumps(status))) is denied
