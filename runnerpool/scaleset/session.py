"""A scale set's message session: the long poll its demand comes from.

The protocol (``session_client.go`` and ``listener/listener.go`` of actions/scaleset):

* ``POST .../runnerscalesets/{id}/sessions`` ``{"ownerName"}`` opens it and answers the queue's
  URL, a queue token and the statistics. One session per scale set: while another owner holds a
  live one the service answers **409** (``TaskAgentSessionConflictException``); ARC's listener
  tries again every 30 s, 10 times, before it gives up, and so does ``open`` (both numbers are
  parameters, so a caller with a scheduler of its own can pass 0 retries and own the wait).
* ``GET <queue>[?lastMessageId=N]`` with the queue token and ``X-ScaleSetMaxCapacity`` is held by
  the service up to about 50 s: **202** and no body when nothing came, **200** with one message
  (``RunnerScaleSetJobMessages``, its ``body`` a JSON string of job messages, at most 50, and the
  statistics), **401** when the queue token expired: the session is refreshed (``PATCH
  .../sessions/{sessionId}``, a new token) and the poll made once more. Acknowledging (``DELETE
  <queue>/{messageId}``) and acquiring jobs (``POST .../acquirejobs``, the queue token again) do
  the same on 401.
* A message not acknowledged is delivered again; the caller acknowledges only after the
  message's effect is recorded, and passes the last id it processed so nothing counts twice.
* ``DELETE .../sessions/{sessionId}`` (204) on shutdown lets the next owner in at once.

The queue's URL comes from the answer, so it is checked as the service URL is
(``connection.ServiceHosts``) before the first poll.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import requests
from pydantic import ValidationError

from runnerpool.scaleset.client import SCALE_SETS, ScaleSetClient, parse
from runnerpool.scaleset.connection import API_VERSION
from runnerpool.scaleset.errors import (
    MessageQueueTokenExpired,
    ScaleSetError,
    ScaleSetNotFound,
    SessionConflict,
    SessionNotFound,
    error_for,
    malformed,
)
from runnerpool.scaleset.types import JobMessage, JobMessageType, Message, MessageSkip, Session, Statistics
from runnerpool.scaleset.wire import Answer, json_body

__all__ = ["CONFLICT_RETRIES", "CONFLICT_WAIT", "MAX_CAPACITY_HEADER", "MessageSession", "parse_message"]

log = logging.getLogger(__name__)

#: ARC's listener: a session another owner holds is asked for again every 30 s, 10 times.
CONFLICT_RETRIES = 10
CONFLICT_WAIT = 30.0
#: Tells the service how many runners the scale set can have at most.
MAX_CAPACITY_HEADER = "X-ScaleSetMaxCapacity"
_JOB_MESSAGES = "RunnerScaleSetJobMessages"
_KNOWN_TYPES = frozenset(JobMessageType)
_POLL = "GET message"
T = TypeVar("T")
A = TypeVar("A", bound=Answer)


def parse_message(data: Any, what: str = "GET message") -> Message:
    """A 200 answer of the queue as a ``Message``. Only an answer without a readable
    ``messageId`` is malformed: anything else is a message the caller can acknowledge, since
    one left unacknowledged comes back on every poll and holds up every later one.

    Statistics may be absent (the Go client accepts that; the caller keeps the last seen). A
    message of another type or with a body that is not a JSON list is ``skipped`` (logged, no
    jobs). Job messages of unknown types are passed over (the Go client does too), and so are
    those that do not parse, each logged by type and request id only (no field of it)."""
    message_id = data.get("messageId") if isinstance(data, dict) else None
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise malformed(what, "no messageId")
    stats = _statistics(message_id, data.get("statistics"))
    if data.get("messageType") != _JOB_MESSAGES:
        return _skipped(message_id, stats, MessageSkip.UNKNOWN_TYPE)
    raw = data.get("body") or "[]"
    try:
        items: Any = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        items = None
    if not isinstance(items, list):
        return _skipped(message_id, stats, MessageSkip.BROKEN_BODY)
    jobs = (_job(message_id, item) for item in items)
    return Message(message_id=message_id, statistics=stats, jobs=tuple(job for job in jobs if job))


def _statistics(message_id: int, data: Any) -> Statistics | None:
    """The message's statistics; None when absent or unreadable (the last seen still hold)."""
    if data is None:
        return None
    try:
        return Statistics.model_validate(data)
    except ValidationError as exc:
        log.warning("queue message %d: statistics do not parse (%d problems)", message_id, exc.error_count())
        return None


def _skipped(message_id: int, statistics: Statistics | None, why: MessageSkip) -> Message:
    log.warning("queue message %d has %s; it is acknowledged and passed over", message_id, why.value)
    return Message(message_id=message_id, statistics=statistics, skipped=why)


def _job(message_id: int, item: Any) -> JobMessage | None:
    """One job message of a body, or None for one of an unknown type or that does not parse."""
    if not isinstance(item, dict) or item.get("messageType") not in _KNOWN_TYPES:
        return None
    try:
        return JobMessage.model_validate(item)
    except ValidationError as exc:
        log.warning(
            "queue message %d: a %s job message (runner request %r) does not parse (%d problems); "
            "passed over",
            message_id,
            item["messageType"],
            item.get("runnerRequestId"),
            exc.error_count(),
        )
        return None


class MessageSession:
    """An open session of one scale set; thread-safe (one call at a time, as the Go client)."""

    def __init__(self, client: ScaleSetClient, scale_set_id: int, session: Session) -> None:
        self._client = client
        self.scale_set_id = scale_set_id
        self._session = session
        self._lock = threading.RLock()

    @classmethod
    def open(
        cls,
        client: ScaleSetClient,
        scale_set_id: int,
        owner: str,
        *,
        conflict_retries: int = CONFLICT_RETRIES,
        conflict_wait: float = CONFLICT_WAIT,
    ) -> MessageSession:
        """Create the session; ``SessionConflict`` once another owner held it through every
        retry, ``ScaleSetNotFound`` when the scale set is gone."""
        what = "POST runnerscalesets/{id}/sessions"
        path = f"{SCALE_SETS}/{scale_set_id}/sessions"
        for attempt in range(conflict_retries + 1):
            try:
                data = client.call(
                    "POST", path, what=what, body={"ownerName": owner}, not_found=ScaleSetNotFound
                )
            except ScaleSetError as exc:
                if exc.status != 409 or isinstance(exc, ScaleSetNotFound):
                    raise
                if attempt == conflict_retries:
                    raise SessionConflict(
                        f"{what}: another owner holds the session ({attempt + 1} attempts)",
                        status=409,
                        type_name=exc.type_name,
                    ) from None
                log.info(
                    "scale set %s: another owner holds the session; again in %g s",
                    scale_set_id,
                    conflict_wait,
                )
                client.wire.sleep(conflict_wait)
                continue
            return cls(client, scale_set_id, _session(client, data, what))
        raise AssertionError("unreachable: the last attempt returns or raises")

    @property
    def session(self) -> Session:
        with self._lock:
            return self._session

    @property
    def statistics(self) -> Statistics | None:
        """The statistics the session was opened (or last refreshed) with."""
        return self.session.statistics

    def refresh(self) -> Session:
        """A new queue token for the same session (what a 401 from the queue calls for)."""
        what = "PATCH runnerscalesets/{id}/sessions/{sessionId}"
        with self._lock:
            path = f"{SCALE_SETS}/{self.scale_set_id}/sessions/{self._session.session_id}"
            data = self._client.call("PATCH", path, what=what, not_found=SessionNotFound)
            self._session = _session(self._client, data, what)
            return self._session

    def close(self) -> None:
        """Delete the session so another owner may open one at once."""
        what = "DELETE runnerscalesets/{id}/sessions/{sessionId}"
        with self._lock:
            path = f"{SCALE_SETS}/{self.scale_set_id}/sessions/{self._session.session_id}"
            self._client.call("DELETE", path, what=what, ok=(204,), not_found=SessionNotFound)

    def poll(self, last_message_id: int, max_capacity: int) -> Message | None:
        """The next message, or None when the service had none within its hold (202); the
        calling thread blocked meanwhile, through ``requests`` like every other call (tests and
        tools: the listeners await ``poll_async`` on the poll loop)."""
        with self._lock:
            return self._with_queue_token(lambda: self._poll(last_message_id, max_capacity))

    async def poll_async(
        self, last_message_id: int, max_capacity: int, run: Callable[[Callable[[], Any]], Awaitable[Any]]
    ) -> Message | None:
        """``poll`` awaited on the poll loop (a listener's task); ``run`` makes a blocking call
        (the queue token's refresh) off the loop. Not under the session's lock, which would
        block the loop: the listener is the one caller of its session's polls."""
        try:
            return await self._poll_async(last_message_id, max_capacity)
        except MessageQueueTokenExpired:
            await run(self.refresh)
            return await self._poll_async(last_message_id, max_capacity)

    def acknowledge(self, message_id: int) -> None:
        """Delete the message from the queue: done only after its effect is recorded."""
        with self._lock:
            self._with_queue_token(lambda: self._acknowledge(message_id))

    def acquire_jobs(self, request_ids: Iterable[int]) -> list[int]:
        """Take the offered jobs (``JobAvailable``); answers the ids acquired."""
        ids = list(request_ids)
        with self._lock:
            return self._with_queue_token(lambda: self._acquire(ids))

    # -- one attempt each ---------------------------------------------------------------------

    def _with_queue_token(self, attempt: Callable[[], T]) -> T:
        try:
            return attempt()
        except MessageQueueTokenExpired:
            self.refresh()
            return attempt()

    def _queue(
        self,
        method: str,
        url: str,
        what: str,
        *,
        headers: Mapping[str, str],
        body: Any = None,
        timeout: float | None = None,
    ) -> requests.Response:
        """One request with the queue token; 401 means it expired (``MessageQueueTokenExpired``)."""
        wire = self._client.wire
        answer = wire.send(method, url, what=what, headers=self._token(headers), body=body, timeout=timeout)
        return _checked(what, answer)

    def _token(self, headers: Mapping[str, str]) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._session.message_queue_access_token}", **headers}

    def _poll(self, last_message_id: int, max_capacity: int) -> Message | None:
        url, headers, timeout = self._poll_request(last_message_id, max_capacity)
        answer = self._queue("GET", url, _POLL, headers=headers, timeout=timeout)
        return _poll_answer(answer)

    async def _poll_async(self, last_message_id: int, max_capacity: int) -> Message | None:
        url, headers, timeout = self._poll_request(last_message_id, max_capacity)
        wire = self._client.wire
        answer = await wire.send_async("GET", url, what=_POLL, headers=self._token(headers), timeout=timeout)
        return _poll_answer(_checked(_POLL, answer))

    def _poll_request(self, last_message_id: int, max_capacity: int) -> tuple[str, dict[str, str], float]:
        """The poll's URL (with the last message id processed), headers and deadline."""
        url = self._session.message_queue_url
        if last_message_id > 0:
            url = _with_query(url, lastMessageId=str(last_message_id))
        headers = {
            "Accept": f"application/json; api-version={API_VERSION}",
            MAX_CAPACITY_HEADER: str(max_capacity),
        }
        return url, headers, self._client.wire.policy.poll_timeout

    def _acknowledge(self, message_id: int) -> None:
        what = "DELETE message"
        parts = urllib.parse.urlsplit(self._session.message_queue_url)
        url = urllib.parse.urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{message_id}"))
        answer = self._queue("DELETE", url, what, headers={"Content-Type": "application/json"})
        if answer.status_code != 204:
            raise error_for(what, answer.status_code, answer.content, answer.headers)

    def _acquire(self, ids: list[int]) -> list[int]:
        what = "POST runnerscalesets/{id}/acquirejobs"
        admin = self._client.connection.admin()
        url = admin.url(f"{SCALE_SETS}/{self.scale_set_id}/acquirejobs")
        answer = self._queue("POST", url, what, headers={"Content-Type": "application/json"}, body=ids)
        if answer.status_code != 200:
            raise error_for(what, answer.status_code, answer.content, answer.headers)
        try:
            data: Any = json_body(answer.content)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise malformed(what, "no list of acquired ids")
        value = data.get("value")
        if value is None:  # null or absent: none acquired (the Go client reads an empty list)
            return []
        if not isinstance(value, list) or not all(isinstance(i, int) for i in value):
            raise malformed(what, "no list of acquired ids")
        return list(value)


def _session(client: ScaleSetClient, data: Any, what: str) -> Session:
    """The session an answer holds, its queue URL held to the service URL's rule: polls,
    acknowledgements and their status codes go there (``connection.ServiceHosts``)."""
    session = parse(Session, data, what)
    client.connection.service_hosts.checked(what, session.message_queue_url)
    return session


def _checked(what: str, answer: A) -> A:
    if answer.status_code == 401:
        raise MessageQueueTokenExpired(f"{what}: HTTP 401: the queue token expired", status=401)
    return answer


def _poll_answer(answer: Answer) -> Message | None:
    """A poll's answer: None for 202 (nothing within the hold), else its message."""
    if answer.status_code == 202:
        return None
    if answer.status_code != 200:
        raise error_for(_POLL, answer.status_code, answer.content, answer.headers)
    try:
        data = json_body(answer.content)
    except ValueError:
        raise malformed(_POLL, "body is not JSON") from None
    return parse_message(data, _POLL)


def _with_query(url: str, **extra: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True)) | extra
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
