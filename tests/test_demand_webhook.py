"""The webhook receiver over real HTTP on 127.0.0.1: verification, limits, duplicates."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runnerpool.demand.deliveries import DeliveryLog
from runnerpool.demand.receiver import PATH, WebhookServer
from runnerpool.demand.secret import SecretFile
from runnerpool.demand.signature import sign, verify
from runnerpool.demand.verification import Verdict
from runnerpool.github.jobs import Job
from tests.demand_payloads import delivery, job_object

SECRET = b"It's a Secret to Everybody"


class Recorded:
    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.fail = False

    def __call__(self, job: Job, verdict: Verdict) -> int:
        if self.fail:
            raise RuntimeError("API server unavailable")
        self.jobs.append(job)
        return 1


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "webhook-secret"
    path.write_bytes(SECRET + b"\n")
    return path


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def server(secret_file: Path, recorded: Recorded) -> Iterator[WebhookServer]:
    srv = WebhookServer(0, SecretFile(secret_file).secrets, recorded, host="127.0.0.1", max_body=64 * 1024)
    srv.start()
    yield srv
    srv.stop()


def post(
    server: WebhookServer,
    body: bytes,
    *,
    event: str = "workflow_job",
    signature: str | None = None,
    delivery_id: str | None = None,
    extra: dict[str, str] | None = None,
    path: str = PATH,
) -> tuple[int, str]:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "User-Agent": "GitHub-Hookshot/abc123",
        **(extra or {}),
    }
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def queued_body(job_id: int = 101) -> bytes:
    return json.dumps(delivery(job_object(job_id, "queued", ["self-hosted", "gpu"]))).encode()


# ------------------------------------------------------------------ signature


def test_signature_matches_githubs_documented_example() -> None:
    # GitHub's docs: secret "It's a Secret to Everybody", payload "Hello, World!".
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(SECRET, b"Hello, World!") == expected
    assert verify([SECRET], b"Hello, World!", expected)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "sha256=" + "0" * 64,
        "sha256=" + hmac.new(b"another secret", b"Hello, World!", hashlib.sha256).hexdigest(),
        # The right HMAC under the legacy header's algorithm prefix, or none at all.
        "sha1=" + hmac.new(SECRET, b"Hello, World!", hashlib.sha1).hexdigest(),
        hmac.new(SECRET, b"Hello, World!", hashlib.sha256).hexdigest(),
        "SHA256=" + hmac.new(SECRET, b"Hello, World!", hashlib.sha256).hexdigest(),
    ],
    ids=["missing", "empty", "zeros", "other-secret", "sha1-prefix", "no-prefix", "upper-prefix"],
)
def test_bad_signatures_do_not_verify(header: str | None) -> None:
    assert not verify([SECRET], b"Hello, World!", header)


def test_a_second_secret_verifies_during_rotation() -> None:
    assert verify([b"old", SECRET], b"x", sign(SECRET, b"x"))
    assert not verify([], b"x", sign(SECRET, b"x"))


# ------------------------------------------------------------------ over HTTP


def test_signed_delivery_is_recorded(server: WebhookServer, recorded: Recorded) -> None:
    body = queued_body(101)
    status, text = post(server, body, signature=sign(SECRET, body))
    assert status == 200, text
    [job] = recorded.jobs
    assert (job.id, job.state, job.repository, job.labels) == (
        101,
        "queued",
        "octo-org/hello-world",
        ("self-hosted", "gpu"),
    )
    assert job.api_url == "https://api.github.com"


@pytest.mark.parametrize(
    "signature",
    [None, "sha256=" + "0" * 64, "sha1=" + hmac.new(SECRET, queued_body(), hashlib.sha1).hexdigest()],
    ids=["missing", "wrong", "sha1-prefix"],
)
def test_unsigned_or_badly_signed_delivery_gets_401_and_changes_nothing(
    server: WebhookServer, recorded: Recorded, signature: str | None
) -> None:
    status, _ = post(server, queued_body(), signature=signature)
    assert status == 401
    assert recorded.jobs == []


def test_signature_over_a_different_body_is_refused(server: WebhookServer, recorded: Recorded) -> None:
    status, _ = post(server, queued_body(102), signature=sign(SECRET, queued_body(101)))
    assert status == 401 and recorded.jobs == []


def test_without_a_configured_secret_nothing_is_accepted(
    secret_file: Path, server: WebhookServer, recorded: Recorded
) -> None:
    secret_file.write_text("")
    body = queued_body()
    status, text = post(server, body, signature=sign(SECRET, body))
    assert status == 503 and "no webhook secret" in text
    assert recorded.jobs == []


def test_secret_file_changes_take_effect_without_restart(
    secret_file: Path, server: WebhookServer, recorded: Recorded
) -> None:
    secret_file.write_bytes(b"new secret, longer\n" + SECRET + b"\n")
    body = queued_body(1)
    assert post(server, body, signature=sign(b"new secret, longer", body))[0] == 200
    secret_file.write_bytes(b"new secret, longer\n")
    body = queued_body(2)
    assert post(server, body, signature=sign(SECRET, body))[0] == 401
    assert [job.id for job in recorded.jobs] == [1]


def test_oversized_body_gets_413_unread(server: WebhookServer, recorded: Recorded) -> None:
    body = json.dumps({**delivery(job_object(5, "queued", ["self-hosted"])), "pad": "x" * 70_000}).encode()
    status, _ = post(server, body, signature=sign(SECRET, body))
    assert status == 413
    assert recorded.jobs == []


def test_repeated_delivery_counts_once(server: WebhookServer, recorded: Recorded) -> None:
    body = queued_body(7)
    guid = str(uuid.uuid4())
    first = post(server, body, signature=sign(SECRET, body), delivery_id=guid)
    again = post(server, body, signature=sign(SECRET, body), delivery_id=guid)
    assert first[0] == again[0] == 200
    assert "duplicate" in again[1]
    assert [job.id for job in recorded.jobs] == [7]


@pytest.mark.parametrize(
    ("guid", "status"),
    [
        ("72d3162e-cc78-11e3-81ab-4c9367dc0958", 200),  # what GitHub sends
        ("d" * 64, 200),
        ("d" * 65, 400),
        ("d" * 15 * 1024, 400),  # the header cap allows 16 KiB; 10,000 of them: 156 MiB kept
        ("72d3162e_cc78", 400),
        ("72d3162e cc78", 400),
    ],
    ids=["githubs-uuid", "64-characters", "65-characters", "15-kib", "underscore", "space"],
)
def test_a_delivery_id_is_kept_only_when_it_is_guid_like(secret_file: Path, guid: str, status: int) -> None:
    recorded, seen = Recorded(), DeliveryLog()
    server = WebhookServer(0, SecretFile(secret_file).secrets, recorded, host="127.0.0.1", deliveries=seen)
    server.start()
    try:
        body = queued_body(9)
        assert post(server, body, signature=sign(SECRET, body), delivery_id=guid)[0] == status
    finally:
        server.stop()
    assert (len(recorded.jobs), len(seen)) == ((1, 1) if status == 200 else (0, 0))


def test_failed_recording_answers_503_and_a_redelivery_is_processed(
    server: WebhookServer, recorded: Recorded
) -> None:
    body = queued_body(8)
    guid = str(uuid.uuid4())
    recorded.fail = True
    assert post(server, body, signature=sign(SECRET, body), delivery_id=guid)[0] == 503
    recorded.fail = False
    assert post(server, body, signature=sign(SECRET, body), delivery_id=guid)[0] == 200
    assert [job.id for job in recorded.jobs] == [8]


def test_ping_is_answered(server: WebhookServer, recorded: Recorded) -> None:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    assert post(server, body, event="ping", signature=sign(SECRET, body)) == (200, "pong\n")
    assert recorded.jobs == []


def test_other_events_are_ignored(server: WebhookServer, recorded: Recorded) -> None:
    body = b'{"action": "opened"}'
    assert post(server, body, event="issues", signature=sign(SECRET, body))[0] == 202
    assert recorded.jobs == []


def test_form_encoded_deliveries_are_recorded(server: WebhookServer, recorded: Recorded) -> None:
    """GitHub's default content type for a hook made through the API is ``form``: the JSON
    percent-encoded in field ``payload``, the signature over the body as sent. Refused with
    415, every delivery of such a hook failed and demand came from polling alone."""
    body = urllib.parse.urlencode({"payload": queued_body().decode()}).encode()
    status, text = post(
        server,
        body,
        signature=sign(SECRET, body),
        extra={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 200, text
    assert [(job.id, job.state) for job in recorded.jobs] == [(101, "queued")]


def test_other_content_types_say_which_to_set(server: WebhookServer, recorded: Recorded) -> None:
    body = queued_body()
    status, text = post(server, body, signature=sign(SECRET, body), extra={"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in text
    assert recorded.jobs == []


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"[]", json.dumps({"workflow_job": {"id": 1}}).encode()],
    ids=["not-json", "not-object", "no-repository"],
)
def test_malformed_signed_payload_is_400(server: WebhookServer, recorded: Recorded, payload: bytes) -> None:
    assert post(server, payload, signature=sign(SECRET, payload))[0] == 400
    assert recorded.jobs == []


def test_delivery_log_is_bounded() -> None:
    log = DeliveryLog(capacity=2)
    assert log.claim("a") and log.claim("b") and not log.claim("a")
    assert log.claim("c")  # evicts b, the least recently seen
    assert log.claim("b") and not log.claim("c")
