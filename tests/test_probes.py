"""The kubelet's probes in-process: what ``/healthz`` and ``/readyz`` answer, and a clean stop.

The operator process answers them too (tests/e2e/test_operator_process.py), and on the node a
probe that fails restarts or unreadies the pod (tests/node/test_install.py).
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from runnerpool.health import ProbeServer


def get(server: ProbeServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def ready() -> threading.Event:
    return threading.Event()


@pytest.fixture
def server(ready: threading.Event) -> Iterator[ProbeServer]:
    probes = ProbeServer(0, live=lambda: True, ready=ready.is_set, host="127.0.0.1")
    probes.start()
    yield probes
    assert probes.stop(timeout=5), "the probe server's thread did not end"


def test_alive_at_once_ready_when_the_caches_are(server: ProbeServer, ready: threading.Event) -> None:
    assert get(server, "/healthz") == (200, "ok\n")
    assert get(server, "/readyz") == (503, "not ready\n")
    ready.set()
    assert get(server, "/readyz") == (200, "ok\n")


def test_a_query_string_is_ignored_and_other_paths_are_404(server: ProbeServer) -> None:
    assert get(server, "/healthz?verbose") == (200, "ok\n")
    assert get(server, "/metrics")[0] == 404


def test_a_stopped_server_no_longer_answers(ready: threading.Event) -> None:
    probes = ProbeServer(0, live=lambda: True, ready=ready.is_set, host="127.0.0.1")
    probes.start()
    assert get(probes, "/healthz")[0] == 200
    assert probes.stop(timeout=5)
    with pytest.raises(urllib.error.URLError):
        get(probes, "/healthz")
