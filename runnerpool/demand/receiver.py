"""The webhook endpoint: ``POST /webhook`` on its own port, for GitHub ``workflow_job`` deliveries.

Order of checks, so that nothing unverified gets further than it must:

0. path: ``/webhook`` (the cluster-wide secret) or ``/webhook/<namespace>/<secret>`` (the
   pools of ``<namespace>`` whose ``webhookSecretRef`` names Secret ``<secret>``,
   ``verification.Route``); anything else gets 404;
1. size: a body over ``max_body`` (:data:`DEFAULT_MAX_BODY`, 32 KiB, see there), or
   :data:`FORM_FACTOR` times that for a form, gets 413 and is not looked at (one over the
   form's cap is not even received); no ``Content-Length`` gets 411;
2. signature (``verification.Verifier``), with the secrets the path names and no others:
   the body is not parsed before it verifies. Missing, malformed or signed by none gets 401
   and changes nothing; ``/webhook`` without a cluster-wide secret gets 503 (the operator
   refuses unsigned webhooks);
3. event: no ``X-GitHub-Event`` gets 400; ``ping`` gets 200; anything but ``workflow_job``
   gets 202 and is ignored;
4. a ``Content-Type`` other than JSON or a form (GitHub's default for a hook made through
   the API: the JSON in field ``payload``, :func:`delivery_json`) gets 415, a form without
   exactly one ``payload`` 400, no ``X-GitHub-Delivery`` or one that is not
   GUID-like (:data:`DELIVERY_ID`) 400, a body that is not a ``workflow_job`` delivery (not
   JSON, nested past the parser's depth, the wrong shape) 400;
5. a delivery older than ``replays.STALE_AFTER`` (a replay, or a real one sent late) gets 202
   and changes nothing, but a ``queued`` one on a pool that does not poll its repository
   anyway: kept there unconfirmed, not counted, it has the next poll confirm or end the job
   (``demand.rules``);
6. duplicate delivery (the same ``X-GitHub-Delivery`` signed by the same secrets,
   ``deliveries``): 200, counted once;
7. the job is recorded, on the pools it counts for whose secret signed it, before the
   answer: 200 once written,
   503 if the API server did not take it (GitHub then shows a failed delivery that can be
   redelivered; polling repairs it anyway).

Every refusal (4xx) is one log line, at INFO, with the client's address and the reason; no
request, however malformed, raises out of the application (a 500 and a traceback).

Also ``GET /`` and ``GET /healthz`` answer 200 (ingress controllers health-check the backend
port); any other request that is not a ``POST`` gets 404 (405 on ``/webhook``). The HTTP
server is waitress, with a read deadline, a connection cap and the body limit
(``runnerpool.webserver`` says why and with what measurements): the 413 over the form's
limit and waitress's own refusals (431, 400) are answered before this application runs, and
counted and logged here. What all connections together may make the receiver buffer is
``max_connections`` x (the form's limit + ``max_header``): 256 x (64 + 16 KiB) = 20 MiB by
default. A ``Transfer-Encoding: chunked`` body is de-chunked by the server (within
the same limit) and then checked as if it had a ``Content-Length``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, BinaryIO

from runnerpool.api_errors import describe
from runnerpool.demand import metrics
from runnerpool.demand.deliveries import DeliveryLog
from runnerpool.demand.replays import stale_for
from runnerpool.demand.signature import HEADER
from runnerpool.demand.verification import Route, Verdict, Verifier, load_json
from runnerpool.domain import utcnow
from runnerpool.github.jobs import InvalidJob, Job, parse_delivery
from runnerpool.webserver import Limits, StartResponse, WebServer, WsgiApp

__all__ = [
    "DEFAULT_MAX_BODY",
    "DELIVERY_ID",
    "FORM_FACTOR",
    "HEALTH_PATHS",
    "PATH",
    "REFUSAL_LOG_EVERY",
    "RefusalLog",
    "WebhookServer",
]

log = logging.getLogger(__name__)

PATH = "/webhook"
#: The content types GitHub delivers with (a hook's ``json`` and ``form``).
JSON, FORM = "application/json", "application/x-www-form-urlencoded"
#: Answered 200 to ``GET``: what ingress controllers and load balancers probe.
HEALTH_PATHS = ("/", "/healthz")
#: The body cap by default: 32 KiB (``webserver.Limits``). Measured on the largest real
#: ``workflow_job`` deliveries found, GitHub's examples in octokit/webhooks
#: (payload-examples/api.github.com/workflow_job/, 7 files): the largest, a queued job with
#: its deployment, is 13,395 bytes as stored (pretty-printed) and 11,395 compact; a completed
#: job adds ~171 bytes compact (213 pretty) per step (12 steps: 11,441 bytes). 32 KiB is 2.4x
#: the largest and leaves room for ~120 steps; a larger delivery gets 413 and the job's end is
#: learnt from the next poll instead. GitHub's own cap is 25 MB.
DEFAULT_MAX_BODY = Limits.max_body
#: A form-encoded delivery (``delivery_json``) may be this many times ``max_body``:
#: percent-encoding makes GitHub's JSON ~1.5x as long (a step: 165 bytes compact, 245 encoded;
#: ~1.8x pretty-printed), so under the JSON cap alone a form held about half the steps a JSON
#: delivery does (~75 of a completed job), and GitHub's settings page makes a hook ``form``
#: by default. Twice the cap holds whatever the JSON cap does. The server's own limit is the
#: form's, which bounds what connections may make it buffer (the module's docstring).
FORM_FACTOR = 2
#: An ``X-GitHub-Delivery`` the receiver accepts: GitHub sends a GUID (a UUID, 36 characters:
#: ``72d3162e-cc78-11e3-81ab-4c9367dc0958``). The delivery log keeps the last 10,000 ids
#: (``deliveries.DeliveryLog``), and the header cap alone let each be 16 KiB: 156 MiB against
#: the receiver's 512 Mi limit. Bounded at 64 rather than the UUID's exact shape, so that an id
#: of another GUID form still counts; 10,000 of them take under 5 MiB with what signed them.
DELIVERY_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
#: Seconds between two log lines about refused requests. Anyone on the internet may send them
#: by the hundred a second, and a line each would fill the receiver's log (and its pipeline's
#: bill); ``runnerpool_webhook_deliveries_total`` counts every one by result.
REFUSAL_LOG_EVERY = 10.0


class RefusalLog:
    """The first refused request of each ``REFUSAL_LOG_EVERY`` seconds, and how many went
    unlogged before it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._next = 0.0
        self._quiet = 0

    def refused(self, client: str, code: int, text: str) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next:
                self._quiet += 1
                return
            quiet, self._quiet, self._next = self._quiet, 0, now + REFUSAL_LOG_EVERY
        more = f" ({quiet} more refused since the last such line)" if quiet else ""
        log.info("webhook request from %s refused with %d: %s%s", client, code, text, more)


@dataclass
class _Receiver:
    """What every request of one receiver shares."""

    verify: Callable[[bytes, str | None, Route | None], Verdict]
    record: Callable[[Job, Verdict], int]
    max_body: int
    seen: DeliveryLog
    clock: Callable[[], datetime] = utcnow
    refusals: RefusalLog = dataclasses.field(default_factory=RefusalLog)


class _Headers:
    """Request headers by their HTTP names, read from a WSGI environ."""

    def __init__(self, environ: Mapping[str, Any]) -> None:
        self._environ = environ

    def get(self, name: str) -> str | None:
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            key = "HTTP_" + key
        value = self._environ.get(key)
        return None if value is None else str(value)


class _Handler:
    """One request: the checks in the module's order; ``_answer`` keeps the response."""

    def __init__(self, receiver: _Receiver, environ: dict[str, Any]) -> None:
        self.receiver = receiver
        self.headers = _Headers(environ)
        self.path: str = environ.get("PATH_INFO") or "/"
        self.method: str = environ.get("REQUEST_METHOD") or "GET"
        self.rfile: BinaryIO = environ["wsgi.input"]
        self.client: str = environ.get("REMOTE_ADDR") or "?"
        self.response: tuple[int, bytes] = (500, b"")

    def _answer(self, code: int, text: str, event: str, result: str) -> None:
        metrics.DELIVERIES.labels(event, result).inc()
        self.response = (code, (text + "\n").encode())
        if 400 <= code < 500:
            self.receiver.refusals.refused(self.client, code, text)

    def respond(self) -> None:
        if self.method in ("GET", "HEAD") and self.path in HEALTH_PATHS:
            self.response = (200, b"ok\n")  # not a delivery: not counted
        elif self.method == "POST":
            self._post()
        else:
            webhook = self.path == PATH or self.path.startswith(PATH + "/")
            self.response = (405 if webhook else 404, f"deliveries: POST {PATH}\n".encode())

    def _post(self) -> None:
        event = _event_label(self.headers.get("X-GitHub-Event"))
        verified = self._verified_body(event)
        if verified is not None:
            self._handle(event, *verified)

    def _content_type(self) -> str:
        """The media type alone, without parameters (``; charset=...``), lower-case."""
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def _verified_body(self, event: str) -> tuple[bytes, Verdict] | None:
        """Steps 1 and 2: the body, once its size and signature are right; else the answer is sent."""
        max_body = self.receiver.max_body * (FORM_FACTOR if self._content_type() == FORM else 1)
        path = self.path.split("?", 1)[0]
        route = Route.parse(path.removeprefix(PATH + "/")) if path.startswith(PATH + "/") else None
        if path != PATH and route is None:
            self._answer(404, f"deliveries go to {PATH} or {PATH}/<namespace>/<secret>", event, "invalid")
            return None
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._answer(411, "Content-Length required", event, "invalid")
            return None
        if int(length) > max_body:
            self._answer(413, f"body larger than {max_body} bytes", event, "too_large")
            return None
        body = self.rfile.read(int(length))
        verdict = self.receiver.verify(body, self.headers.get(HEADER), route)
        if not verdict.accepted and not verdict.configured:
            text = f"no webhook secret configured for {PATH} (a pool's own: {PATH}/<namespace>/<secret>)"
            self._answer(503, text, event, "unsigned")
            return None
        if not verdict.accepted:
            result = "unsigned" if self.headers.get(HEADER) is None else "bad_signature"
            self._answer(401, f"missing or invalid {HEADER}", event, result)
            return None
        return body, verdict

    def _handle(self, event: str, body: bytes, verdict: Verdict) -> None:
        if self.headers.get("X-GitHub-Event") is None:
            self._answer(400, "X-GitHub-Event missing", event, "invalid")
            return
        if event == "ping":
            self._answer(200, "pong", event, "accepted")
            return
        if event != "workflow_job":
            self._answer(202, "event ignored: only workflow_job is used", event, "ignored")
            return
        kind = self._content_type()
        if kind not in (JSON, FORM):
            self._answer(415, f"set the webhook's content type to {JSON} (or {FORM})", event, "invalid")
            return
        delivery = self.headers.get("X-GitHub-Delivery")
        if not delivery:
            self._answer(400, "X-GitHub-Delivery missing", event, "invalid")
            return
        if not DELIVERY_ID.fullmatch(delivery):
            self._answer(
                400, "X-GitHub-Delivery is not a GUID (at most 64 of 0-9, A-Z, a-z, -)", event, "invalid"
            )
            return
        try:
            job = parse_delivery(load_json(delivery_json(body, kind)))
        except (ValueError, InvalidJob) as err:
            self._answer(400, f"not a workflow_job delivery: {err}", event, "invalid")
            return
        stale = stale_for(job, self.receiver.clock())
        if stale is not None and job.state != "queued":
            self._answer(202, f"job {job.id} {job.state}: {stale}; changes nothing", event, "stale")
            return
        if stale is not None:  # counted once a poll of its repository lists it (``demand.rules``)
            job = dataclasses.replace(job, unconfirmed=True)
        self._record(event, delivery, job, verdict, stale)

    def _record(self, event: str, delivery: str, job: Job, verdict: Verdict, stale: str | None) -> None:
        """Steps 6 and 7: once per delivery, answered only once the job is written (``stale``:
        why a ``queued`` delivery is too old to count, kept unconfirmed: step 5)."""
        seen, key = self.receiver.seen, (delivery, verdict.signers)
        if not seen.claim(key):
            self._answer(200, "duplicate delivery, already counted", event, "duplicate")
            return
        try:
            pools = self.receiver.record(job, verdict)
        except Exception as err:
            seen.release(key)
            log.warning("delivery %s (job %s) not recorded: %s", delivery, job.id, describe(err))
            self._answer(503, "could not record the job; redeliver later", event, "failed")
            return
        if stale is not None:
            said = (
                f"{pools} pool(s) count it once a poll of its repository lists it"
                if pools
                else "changes nothing"
            )
            self._answer(202, f"job {job.id} queued: {stale}; {said}", event, "stale")
            return
        self._answer(200, f"job {job.id} {job.state or 'ignored'}: {pools} pool(s)", event, "accepted")


def delivery_json(body: bytes, kind: str) -> bytes:
    """The delivery's JSON: the body itself, or a form's ``payload`` field.

    GitHub sends a hook whose content type is ``form`` (the REST API's default when a hook is
    made without ``config.content_type``) as ``application/x-www-form-urlencoded`` with the JSON
    in ``payload``; the signature covers the body as sent. Percent-encoding makes the body
    ~1.5x the JSON, hence the form's own cap (:data:`FORM_FACTOR`)."""
    if kind != FORM:
        return body
    fields = urllib.parse.parse_qs(
        body.decode("ascii"), keep_blank_values=True, strict_parsing=True, errors="strict", max_num_fields=8
    )
    payload = fields.get("payload") or []
    if len(payload) != 1:
        raise ValueError("a form delivery needs exactly one payload field")
    return payload[0].encode()


def _event_label(event: str | None) -> str:
    """A bounded metric label."""
    return event if event in ("ping", "workflow_job") else "other"


def _app(receiver: _Receiver) -> WsgiApp:
    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        handler = _Handler(receiver, environ)
        handler.respond()
        code, body = handler.response
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        start_response(f"{code} {HTTPStatus(code).phrase}", headers)
        return [body]

    return app


def _count_refused(code: int, headers: Mapping[str, str]) -> None:
    """The server's own answers (413 over the limit, 431, 400), counted as the receiver's are."""
    event = _event_label(headers.get("X_GITHUB_EVENT"))
    metrics.DELIVERIES.labels(event, "too_large" if code == 413 else "invalid").inc()
    log.info("webhook request refused with %d by the HTTP server (size or syntax)", code)


class WebhookServer(WebServer):
    """``record`` stores a job on the pools the verdict admits and returns the number of pools
    it was recorded on; it raises to fail. ``secrets``: the cluster-wide secrets, or a
    ``Verifier`` that also knows the pools' own. ``max_body`` (or ``limits.max_body``): a JSON
    delivery's cap; the server takes a form's, :data:`FORM_FACTOR` times that."""

    def __init__(
        self,
        port: int,
        secrets: Callable[[], tuple[bytes, ...]] | Verifier,
        record: Callable[[Job, Verdict], int],
        *,
        host: str = "",
        max_body: int | None = None,
        deliveries: DeliveryLog | None = None,
        limits: Limits = Limits(),
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if max_body is not None:
            limits = dataclasses.replace(limits, max_body=max_body)
        verifier = secrets if isinstance(secrets, Verifier) else Verifier(secrets)
        seen = DeliveryLog() if deliveries is None else deliveries  # an empty log is falsy
        receiver = _Receiver(verifier, record, limits.max_body, seen, clock)
        server_limits = dataclasses.replace(limits, max_body=FORM_FACTOR * limits.max_body)
        super().__init__(
            _app(receiver), host, port, "webhook", limits=server_limits, on_refused=_count_refused
        )
