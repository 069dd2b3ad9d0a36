"""The webhook endpoint: ``POST /webhook`` on its own port, for GitHub ``workflow_job`` deliveries.

Order of checks, so that nothing unverified gets further than it must:

1. size: a body over ``max_body`` (1 MiB; a ``workflow_job`` payload is a few KiB, GitHub's
   own cap is 25 MB) gets 413 without being read; no ``Content-Length`` gets 411;
2. signature (``verification.Verifier``): the cluster-wide secret, else the own secrets of
   the pools the delivery is about; missing, malformed or signed by none gets 401 and
   changes nothing; no secret configured gets 503 (the operator refuses unsigned webhooks);
3. event: ``ping`` gets 200; anything but ``workflow_job`` gets 202 and is ignored;
4. duplicate ``X-GitHub-Delivery``: 200, counted once;
5. the job is recorded, on the pools it counts for whose secret signed it, before the
   answer: 200 once written,
   503 if the API server did not take it (GitHub then shows a failed delivery that can be
   redelivered; polling repairs it anyway).

The standard library's threading HTTP server is enough here, as for the probes
(``runnerpool.health``): deliveries are small and few per second.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

from runnerpool.api_errors import describe
from runnerpool.demand import metrics
from runnerpool.demand.deliveries import DeliveryLog
from runnerpool.demand.signature import HEADER
from runnerpool.demand.verification import Verdict, Verifier
from runnerpool.github.jobs import InvalidJob, Job, parse_delivery
from runnerpool.health import BackgroundServer

__all__ = ["DEFAULT_MAX_BODY", "PATH", "WebhookServer"]

log = logging.getLogger(__name__)

PATH = "/webhook"
DEFAULT_MAX_BODY = 1 << 20


@dataclass
class _Receiver:
    """What every request of one receiver shares."""

    verify: Callable[[bytes, str | None], Verdict]
    record: Callable[[Job, Verdict], int]
    max_body: int
    seen: DeliveryLog


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    receiver: ClassVar[_Receiver]

    def _answer(self, code: int, text: str, event: str, result: str) -> None:
        metrics.DELIVERIES.labels(event, result).inc()
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        event = self.headers.get("X-GitHub-Event") or "unknown"
        if event not in ("ping", "workflow_job"):
            event = "other"  # a bounded metric label
        verified = self._verified_body(event)
        if verified is not None:
            self._handle(event, *verified)

    def _verified_body(self, event: str) -> tuple[bytes, Verdict] | None:
        """Steps 1 and 2: the body, once its size and signature are right; else the answer is sent."""
        max_body = self.receiver.max_body
        if self.path.split("?", 1)[0] != PATH:
            self.close_connection = True
            self._answer(404, f"deliveries go to {PATH}", event, "invalid")
            return None
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._answer(411, "Content-Length required", event, "invalid")
            return None
        if int(length) > max_body:
            self.close_connection = True  # the unread body must not be taken as a request
            self._answer(413, f"body larger than {max_body} bytes", event, "too_large")
            return None
        body = self.rfile.read(int(length))
        verdict = self.receiver.verify(body, self.headers.get(HEADER))
        if not verdict.accepted and not verdict.configured:
            self._answer(503, "no webhook secret configured", event, "unsigned")
            return None
        if not verdict.accepted:
            result = "unsigned" if self.headers.get(HEADER) is None else "bad_signature"
            self._answer(401, f"missing or invalid {HEADER}", event, result)
            return None
        return body, verdict

    def _handle(self, event: str, body: bytes, verdict: Verdict) -> None:
        if event == "ping":
            self._answer(200, "pong", event, "accepted")
            return
        if event != "workflow_job":
            self._answer(202, "event ignored: only workflow_job is used", event, "ignored")
            return
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            self._answer(415, "set the webhook's content type to application/json", event, "invalid")
            return
        delivery = self.headers.get("X-GitHub-Delivery")
        if not delivery:
            self._answer(400, "X-GitHub-Delivery missing", event, "invalid")
            return
        try:
            job = parse_delivery(json.loads(body))
        except (ValueError, InvalidJob) as err:
            self._answer(400, f"not a workflow_job delivery: {err}", event, "invalid")
            return
        self._record(event, delivery, job, verdict)

    def _record(self, event: str, delivery: str, job: Job, verdict: Verdict) -> None:
        """Steps 4 and 5: once per delivery, answered only once the job is written."""
        seen = self.receiver.seen
        if not seen.claim(delivery):
            self._answer(200, "duplicate delivery, already counted", event, "duplicate")
            return
        try:
            pools = self.receiver.record(job, verdict)
        except Exception as err:
            seen.release(delivery)
            log.warning("delivery %s (job %s) not recorded: %s", delivery, job.id, describe(err))
            self._answer(503, "could not record the job; redeliver later", event, "failed")
            return
        self._answer(200, f"job {job.id} {job.state or 'ignored'}: {pools} pool(s)", event, "accepted")

    def log_message(self, format: str, *args: object) -> None:
        return  # every delivery is counted in runnerpool_webhook_deliveries_total


class WebhookServer(BackgroundServer):
    """``record`` stores a job on the pools the verdict admits and returns the number of pools
    it was recorded on; it raises to fail. ``secrets``: the cluster-wide secrets, or a
    ``Verifier`` that also knows the pools' own."""

    def __init__(
        self,
        port: int,
        secrets: Callable[[], tuple[bytes, ...]] | Verifier,
        record: Callable[[Job, Verdict], int],
        *,
        host: str = "",
        max_body: int = DEFAULT_MAX_BODY,
        deliveries: DeliveryLog | None = None,
    ) -> None:
        verifier = secrets if isinstance(secrets, Verifier) else Verifier(secrets)
        receiver = _Receiver(verifier, record, max_body, deliveries or DeliveryLog())
        handler = type("WebhookHandler", (_Handler,), {"receiver": receiver})
        super().__init__(host, port, handler, "webhook")
