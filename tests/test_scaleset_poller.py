"""The scale-set long poll on the poll loop (``runnerpool.scaleset.poller``), over loopback.

The listener's path: ``MessageSession.poll_async`` awaited on the poll loop. What a scale-set
pool's owner notices: the poll goes through the pool's proxy with its login to a GitHub behind
a private CA, a poll past its deadline or with an answer too large fails as the other calls do
(not retried), connection failures and 5xx are retried with the same waits, and closing the
wire ends a held poll within a second (the listener's own stop, which deletes the session, is
in tests/test_scaleset_listener.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from runnerpool.github.errors import GitHubError, MalformedResponse, RateLimited, Unavailable
from runnerpool.github.route import Route
from runnerpool.github.types import RegistrationToken
from runnerpool.reasons import Reason
from runnerpool.scaleset import poller
from runnerpool.scaleset.client import ScaleSetClient
from runnerpool.scaleset.connection import ActionsConnection
from runnerpool.scaleset.session import MessageSession
from runnerpool.scaleset.types import Message, Session
from runnerpool.scaleset.wire import Policy, Wire
from tests.queue_server import Answer, QueueServer
from testworld.connect_proxy import ConnectProxy
from testworld.envtest.certs import PrivateServer, private_server

PROXY_LOGIN = ("alice", "s3cret/p@ss word")
#: What a loaded CI machine may add to a bound (thread start, loopback).
SLACK = 1.0
MESSAGE = {
    "messageId": 4,
    "messageType": "RunnerScaleSetJobMessages",
    "body": "[]",
    "statistics": {"totalAssignedJobs": 2, "totalRunningJobs": 1},
}


class Polls:
    """A message session on ``queue`` polled on the poll loop, whose waits are recorded, not
    slept."""

    def __init__(self, queue_url: str, policy: Policy | None = None, route: Route | None = None) -> None:
        self.sleeps: list[float] = []
        self.wire = Wire(policy or Policy(), pause=self._pause, route=route)
        connection = ActionsConnection(
            "https://api.github.com", "https://github.com/octo-org", self._never, self.wire
        )
        session = Session.model_validate(
            {"sessionId": "s-1", "messageQueueUrl": queue_url, "messageQueueAccessToken": "queue-1"}
        )
        self.session = MessageSession(ScaleSetClient(connection, self.wire), 7, session)

    async def _pause(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    @staticmethod
    def _never() -> RegistrationToken:
        raise AssertionError("a poll needs no registration token")

    def started(self, last_message_id: int = 0) -> concurrent.futures.Future[Message | None]:
        """A poll awaited on the poll loop, as a listener's task awaits it."""
        polled = self.session.poll_async(last_message_id, 5, _no_blocking_call)
        return asyncio.run_coroutine_threadsafe(polled, poller.POLLER.loop())

    def poll(self, last_message_id: int = 0) -> Message | None:
        return self.started(last_message_id).result(30)

    def failure(self) -> tuple[GitHubError, float]:
        started = time.monotonic()
        with pytest.raises(GitHubError) as failed:
            self.poll()
        return failed.value, time.monotonic() - started


async def _no_blocking_call(call: Any) -> Any:
    raise AssertionError(f"no blocking call expected, got {call}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PrivateServer:
    return private_server(tmp_path_factory.mktemp("ghes-ca"))


@pytest.fixture
def queue() -> Iterator[QueueServer]:
    with QueueServer() as running:
        yield running


@pytest.fixture
def private_queue(pki: PrivateServer) -> Iterator[QueueServer]:
    with QueueServer(tls=pki.server_context()) as running:
        yield running


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    with ConnectProxy(credentials=PROXY_LOGIN) as running:
        yield running


def _through(proxy: ConnectProxy, password: str = PROXY_LOGIN[1]) -> tuple[tuple[str, str], ...]:
    """The route's proxies as ``spec.proxy`` makes them: the login in the URL, quoted."""
    parts = urllib.parse.urlsplit(proxy.url)
    login = f"{urllib.parse.quote(PROXY_LOGIN[0], safe='')}:{urllib.parse.quote(password, safe='')}"
    return (("https", f"{parts.scheme}://{login}@{parts.netloc}"),)


def test_a_poll_goes_through_the_pools_proxy_with_its_login_to_a_private_ca_server(
    pki: PrivateServer, private_queue: QueueServer, proxy: ConnectProxy
) -> None:
    private_queue.answer(Answer.of_json(MESSAGE))
    polls = Polls(private_queue.url, route=Route(ca_pem=pki.ca_pem, proxies=_through(proxy)))

    got = polls.poll()

    assert got is not None and got.message_id == 4 and got.statistics.total_assigned_jobs == 2
    assert proxy.tunnels == [("127.0.0.1", private_queue.port)] and not proxy.refused
    assert private_queue.seen[0].headers["Authorization"] == "Bearer queue-1"


def test_a_wrong_proxy_login_or_a_missing_ca_fails_the_poll_with_the_cause_named(
    pki: PrivateServer, private_queue: QueueServer, proxy: ConnectProxy
) -> None:
    no_retries = Policy(retries=0)
    refused = Polls(private_queue.url, no_retries, Route(ca_pem=pki.ca_pem, proxies=_through(proxy, "nope")))
    err, _ = refused.failure()
    assert isinstance(err, Unavailable) and "Proxy" in err.message
    assert [status for status, _ in proxy.refused] == [407]

    untrusted = Polls(private_queue.url, no_retries, Route(proxies=_through(proxy)))
    err, _ = untrusted.failure()
    assert isinstance(err, Unavailable) and "Certificate" in err.message
    assert private_queue.seen == [], "no request was sent to a server the pool does not trust"
    assert "s3cret" not in err.message


def test_a_poll_that_outlives_its_deadline_fails_at_it_and_is_not_retried(queue: QueueServer) -> None:
    queue.answer(Answer(hold=10.0))
    polls = Polls(queue.url, Policy(poll_timeout=0.5))

    err, took = polls.failure()

    assert err.reason == Reason.GITHUB_DEADLINE_EXCEEDED and "within 0.5 s" in err.message
    assert took <= 0.5 + SLACK
    assert polls.sleeps == [] and len(queue.seen) == 1


def test_a_poll_past_its_deadline_does_not_hold_the_host_slow_for_other_sessions(queue: QueueServer) -> None:
    """The service holds polls silent for about 50 s by design: one stalled poll counted as a
    slow host, and every other session's poll to it was refused (``GITHUB_HOST_SLOW``)."""
    queue.answer(Answer(hold=10.0), Answer.of_json(MESSAGE))
    stalled = Polls(queue.url, Policy(poll_timeout=0.5))
    err, _ = stalled.failure()
    assert err.reason == Reason.GITHUB_DEADLINE_EXCEEDED

    got = Polls(queue.url).poll()

    assert got is not None and got.message_id == 4
    assert len(queue.seen) == 2, "the other session's poll was sent"


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "until-close"])
def test_an_answer_larger_than_the_cap_is_refused(queue: QueueServer, announced: bool) -> None:
    queue.answer(Answer(200, b"[" + b" " * 5000 + b"]", length=announced))
    polls = Polls(queue.url, Policy(max_response_bytes=1000))

    err, _ = polls.failure()

    assert isinstance(err, MalformedResponse)
    assert err.reason == Reason.GITHUB_RESPONSE_TOO_LARGE and "1000 bytes" in err.message
    assert polls.sleeps == []


def test_server_errors_and_refused_connections_are_retried_with_growing_waits(queue: QueueServer) -> None:
    queue.answer(Answer(503), Answer(502), Answer(429, headers={"Retry-After": "3"}), Answer.of_json(MESSAGE))
    polls = Polls(queue.url)
    got = polls.poll()
    assert got is not None and got.message_id == 4
    assert polls.sleeps == [1.0, 2.0, 3.0], "the service's Retry-After is the third wait"

    queue.answer(Answer(429, headers={"Retry-After": "120"}))
    with pytest.raises(RateLimited) as limited:
        polls.poll()
    assert limited.value.retry_after == 120.0 and polls.sleeps == [1.0, 2.0, 3.0]

    closed = QueueServer()
    gone = closed.url
    closed.server_close()
    unreachable = Polls(gone, Policy(retries=2))
    err, _ = unreachable.failure()
    assert isinstance(err, Unavailable) and "ClientConnectorError" in err.message
    assert unreachable.sleeps == [1.0, 2.0]


def test_closing_the_wire_ends_a_held_poll_within_a_second(queue: QueueServer) -> None:
    """A rotated credential closes the pool's client: its listener's held poll ends at once."""
    queue.answer(Answer(hold=30.0))
    polls = Polls(queue.url)
    held = polls.started(4)
    assert queue.wait_held()
    started = time.monotonic()
    polls.wire.close()
    with pytest.raises(Unavailable, match="closed"):
        held.result(1.0 + SLACK)
    assert time.monotonic() - started <= 1.0 + SLACK
    assert "lastMessageId=4" in queue.seen[-1].path
    with pytest.raises(Unavailable, match="closed"):
        polls.poll()
    assert polls.sleeps == [] and len(queue.seen) == 1
