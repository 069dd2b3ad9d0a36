"""``--metrics-secure`` on the operator process, logged in as deploy/'s ServiceAccount.

What Prometheus meets on a cluster: HTTPS with the operator's self-signed certificate, a
bearer token that the operator checks with a TokenReview and a SubjectAccessReview (its
ClusterRole must allow creating both, which the fixture's refusal check proves), and deploy/'s
``runnerpool-operator-metrics-reader`` ClusterRole as the permission to scrape.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import StartOperator
from tests.helpers import wait_for
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import OPERATOR_USER, metrics_reader_binding, token_of
from testworld.simulator import OperatorProcess


def scrape(operator: OperatorProcess, token: str | None = None) -> tuple[int, str]:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the operator's self-signed certificate, as insecureSkipVerify
    request = urllib.request.Request(f"https://127.0.0.1:{operator.metrics_port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=insecure) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _account(api_client: client.ApiClient, namespace: str, name: str) -> str:
    client.CoreV1Api(api_client).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    return token_of(api_client, namespace, name, seconds=600)


@pytest.fixture
def reader_token(api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """A ServiceAccount bound to deploy/'s metrics reader role, as Prometheus's would be."""
    token = _account(api_client, namespace, "prometheus")
    with metrics_reader_binding(api_client, namespace, "prometheus"):
        yield token


def test_metrics_need_a_token_allowed_to_read_them(
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    start_operator: StartOperator,
    reader_token: str,
) -> None:
    start = audit.end_of_complete_events(control_plane.audit_log)
    operator = start_operator("--metrics-secure")
    assert scrape(operator) == (401, "Unauthorized\n")
    assert scrape(operator, "not-a-token")[0] == 401
    stranger = _account(api_client, namespace, "stranger")
    assert scrape(operator, stranger) == (403, "Forbidden\n")

    code, body = scrape(operator, reader_token)
    assert code == 200, body
    assert "# TYPE runnerpool_pool_desired_replicas gauge" in body
    assert "process_resident_memory_bytes" in body

    # Prometheus scrapes every 15-30 s: within the cache's 30 s the API server is not asked again.
    mark = audit.end_of_complete_events(control_plane.audit_log)
    for _ in range(3):
        assert scrape(operator, reader_token)[0] == 200
        assert scrape(operator, stranger)[0] == 403
    assert _token_reviews(api_client, control_plane, mark) == 0, "cached answers: no TokenReview per scrape"
    first_scrapes = _token_reviews(api_client, control_plane, start)
    assert first_scrapes == 3, "each new token was reviewed once (and the count works)"


def _token_reviews(api_client: client.ApiClient, control_plane: ControlPlane, since: int) -> int:
    """The operator's TokenReviews in the audit log from ``since``, once the log has caught up
    with now (an audited request made after them is in it)."""
    marker = f"audit-marker-{time.monotonic_ns()}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": marker}})

    def events() -> list[dict[str, Any]] | None:
        found = list(audit.complete_events(control_plane.audit_log, since))
        names = {(e.get("objectRef") or {}).get("name") for e in found}
        return found if marker in names else None

    found: list[dict[str, Any]] = wait_for(events, message="the audit log to catch up")
    core.delete_namespace(marker)
    return sum(
        1
        for e in found
        if (e.get("user") or {}).get("username") == OPERATOR_USER
        and (e.get("objectRef") or {}).get("resource") == "tokenreviews"
    )
