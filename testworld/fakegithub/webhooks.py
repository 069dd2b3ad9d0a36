"""Signed ``workflow_job`` webhook deliveries, as GitHub sends them, from the fake's jobs.

GitHub's webhook documentation ("Webhook events and payloads", "Validating webhook
deliveries"): a ``POST`` with ``Content-Type: application/json``, the event name in
``X-GitHub-Event``, the event's GUID in ``X-GitHub-Delivery`` ("shared with all deliveries for
all webhooks that subscribe to this event": two hooks get one GUID), the hook's id in
``X-GitHub-Hook-ID``, ``User-Agent: GitHub-Hookshot/<id>``, and the HMAC-SHA256 of the
body with the hook's secret as ``X-Hub-Signature-256: sha256=<hex>`` (and the legacy
SHA-1 one in ``X-Hub-Signature``). A ``workflow_job`` payload carries ``action``
(``queued``, ``in_progress``, ``completed``, ``waiting``), the job itself (the REST job
object), ``repository``, ``sender`` and, for a repository of an organization,
``organization``. GitHub does not retry a failed delivery by itself.

Deliveries leave from a few worker threads, as GitHub delivers events of one burst in
parallel, so their order across jobs is not guaranteed (nor is it by GitHub). A test may
drop deliveries on purpose (``drop``) to prove that polling repairs what was lost, or sign
with another secret (``sign_with``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import queue
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Delivery", "WebhookSender", "signature", "workflow_job_payload"]

_HOOK_IDS = itertools.count(30_000_001)


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def workflow_job_payload(
    action: str, job: dict[str, Any], repository: dict[str, Any], sender: dict[str, Any]
) -> dict[str, Any]:
    """The ``workflow_job`` event body; ``job`` and ``repository`` in their REST shapes."""
    payload: dict[str, Any] = {
        "action": action,
        "workflow_job": dict(job),
        "repository": repository,
        "sender": sender,
    }
    owner = repository.get("owner") or {}
    if owner.get("type") == "Organization":
        payload["organization"] = {
            "login": owner.get("login"),
            "id": owner.get("id"),
            "node_id": owner.get("node_id"),
            "url": repository["url"].rsplit("/repos/", 1)[0] + f"/orgs/{owner.get('login')}",
        }
    return payload


@dataclass
class Delivery:
    """One delivery as the sender saw it: ``status`` is the receiver's answer, ``None`` when
    dropped or when the receiver could not be reached."""

    guid: str
    action: str
    job_id: int
    dropped: bool = False
    status: int | None = None


class WebhookSender:
    """Sends every job change of a fake GitHub to ``url``, signed with ``secret``."""

    def __init__(self, url: str, secret: bytes, *, workers: int = 8, timeout: float = 10.0) -> None:
        self.url = url
        self.secret = secret
        self.hook_id = next(_HOOK_IDS)
        #: Return True to lose the delivery of this action of this job (GitHub's payload).
        self.drop: Callable[[str, dict[str, Any]], bool] | None = None
        #: Sign with this instead of ``secret`` (a receiver configured with another secret).
        self.sign_with: bytes | None = None
        self.deliveries: list[Delivery] = []
        self._timeout = timeout
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Delivery, bytes] | None] = queue.Queue()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"webhook-{i}", daemon=True) for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def __call__(self, payload: dict[str, Any], guid: str | None = None) -> None:
        """Queue the delivery of one event (called by the fake under its lock: never blocks);
        ``guid``: the event's, which every hook's delivery of it shares (a new one if not given)."""
        job = payload["workflow_job"]
        delivery = Delivery(guid=guid or str(uuid.uuid4()), action=payload["action"], job_id=int(job["id"]))
        drop = self.drop
        with self._lock:
            self.deliveries.append(delivery)
            if drop is not None and drop(delivery.action, job):
                delivery.dropped = True
                return
            self._pending += 1
        self._queue.put((delivery, json.dumps(payload).encode()))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every queued delivery has been answered (or failed)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=self._timeout + 1)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            delivery, body = item
            try:
                delivery.status = self._post(delivery, body)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _post(self, delivery: Delivery, body: bytes) -> int | None:
        key = self.sign_with if self.sign_with is not None else self.secret
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": f"GitHub-Hookshot/{self.hook_id:x}",
                "X-GitHub-Event": "workflow_job",
                "X-GitHub-Delivery": delivery.guid,
                "X-GitHub-Hook-ID": str(self.hook_id),
                "X-GitHub-Hook-Installation-Target-Type": "repository",
                "X-Hub-Signature": "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest(),
                "X-Hub-Signature-256": signature(key, body),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return None
