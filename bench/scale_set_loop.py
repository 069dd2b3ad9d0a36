"""The event-loop way of holding scale-set message sessions, for ``bench.scale_sets`` only.

A minimal asyncio long-poller with aiohttp: what the listeners' long polls would cost if one
event loop held them instead of a thread each. Each session is first made as the operator makes
it, with its synchronous client (``runnerpool.scaleset``: runner group, scale set found or
created, message session opened), 16 at a time; then one task per session makes the same
``GET`` message polls as ``MessageSession.poll`` (the queue URL, ``lastMessageId``, the queue
token, ``Accept`` with the API version, ``X-ScaleSetMaxCapacity``, the same ``User-Agent``),
acknowledges a message (``DELETE``) and refreshes the queue token on a 401 (in the executor,
with the synchronous client). It does not write a status or acquire jobs: the benchmark
measures idle sessions. Not the operator's code: nothing in ``runnerpool`` imports it.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from runnerpool.scaleset.clients import ScaleSetClients
from runnerpool.scaleset.connection import API_VERSION
from runnerpool.scaleset.listener import ScaleSetSettings, desired_scale_set
from runnerpool.scaleset.session import MAX_CAPACITY_HEADER, MessageSession, parse_message
from runnerpool.scaleset.types import DEFAULT_RUNNER_GROUP
from runnerpool.scaleset.wire import Policy

__all__ = ["hold", "open_session"]

log = logging.getLogger(__name__)

USER_AGENT = "runnerpool-scaleset"
SETUP_WORKERS = 16


def open_session(clients: ScaleSetClients, settings: ScaleSetSettings, owner: str) -> MessageSession:
    """The scale set ensured and its session opened, with the operator's synchronous client."""
    client = clients.get(settings.pool)
    group = client.runner_group(settings.runner_group or DEFAULT_RUNNER_GROUP)
    found = client.scale_set(group.id, settings.name)
    if found is None:
        found = client.create_scale_set(desired_scale_set(settings, group.id, group.name))
    return MessageSession.open(client, found.id, owner, conflict_retries=0)


def _url(base: str, last_message_id: int) -> str:
    if last_message_id <= 0:
        return base
    parts = urllib.parse.urlsplit(base)
    query = dict(urllib.parse.parse_qsl(parts.query)) | {"lastMessageId": str(last_message_id)}
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


async def _poll_forever(
    http: aiohttp.ClientSession,
    session: MessageSession,
    max_capacity: int,
    timeout: float,
    first_after: float,
) -> None:
    await asyncio.sleep(first_after)
    loop = asyncio.get_running_loop()
    last = 0
    limit = aiohttp.ClientTimeout(total=timeout)
    while True:
        held = session.session
        headers = {
            "User-Agent": USER_AGENT,
            "Authorization": f"Bearer {held.message_queue_access_token}",
            "Accept": f"application/json; api-version={API_VERSION}",
            MAX_CAPACITY_HEADER: str(max_capacity),
        }
        try:
            async with http.get(_url(held.message_queue_url, last), headers=headers, timeout=limit) as answer:
                status = answer.status
                data = await answer.json(content_type=None) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("scale set %d: poll failed: %s", session.scale_set_id, exc)
            await asyncio.sleep(1.0)
            continue
        if status == 202:
            continue
        if status == 401:
            await loop.run_in_executor(None, session.refresh)
            continue
        if status != 200:
            log.warning("scale set %d: poll answered %d", session.scale_set_id, status)
            await asyncio.sleep(1.0)
            continue
        message = parse_message(data)
        parts = urllib.parse.urlsplit(held.message_queue_url)
        ack = urllib.parse.urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{message.message_id}"))
        async with http.delete(ack, headers={**headers, "Content-Type": "application/json"}) as done:
            if done.status == 204:
                last = message.message_id


async def _hold(sessions: Sequence[tuple[MessageSession, int]], timeout: float, start_gap: float) -> None:
    connector = aiohttp.TCPConnector(limit=0)  # one connection per held poll
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(
            *(
                _poll_forever(http, s, capacity, timeout, first_after=i * start_gap)
                for i, (s, capacity) in enumerate(sessions)
            )
        )


def hold(
    clients: ScaleSetClients, pools: Sequence[ScaleSetSettings], owner: str, start_gap: float = 0.0
) -> None:
    """Open every pool's session, then poll them all on one event loop, until killed.

    ``start_gap``: seconds between two sessions' first polls. 0 starts them together, so
    their empty polls end together every hold and one loop wake-up serves many turnovers;
    the operator starts its listeners ``runnable.START_GAP`` apart, as GitHub's sessions of a
    real fleet end at their own times, and each turnover then pays a wake-up of its own.
    """
    with ThreadPoolExecutor(SETUP_WORKERS) as setup:
        opened = list(setup.map(lambda s: open_session(clients, s, owner), pools))
    sessions = [(session, s.max_runners) for session, s in zip(opened, pools, strict=True)]
    asyncio.run(_hold(sessions, Policy().poll_timeout, start_gap))
