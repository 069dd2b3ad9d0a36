"""SIGTERM at any moment after start: the operator exits 0, every time.

Once a SIGTERM 7 s after start ended in SIGABRT after "operator stopped": a thread still
running while the interpreter finalized.  And a SIGTERM during the first second or two
(the imports) ended the process with the default action.  This starts the operator
again and again and stops it at random moments spread over its first 8 seconds: during
the imports, the cache sync, the first reconciles and token fills, and in steady state.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool.launch import STRAGGLER_GRACE as STOP_BOUND
from tests.e2e.runners import ORG, REPO
from tests.pools import create_pool, pool_manifest
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import allow_leader_election_in
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess, RunnerSimulator
from testworld.wait import poll_until

#: The first 8 seconds after start, cut in this many slices; one stop at random in each.
WINDOW_SECONDS = 8.0
SLICES = 5


def _lines(log: str, *messages: str) -> list[int]:
    """Line number of the first line carrying each message (-1 if none)."""
    lines = log.splitlines()
    return [next((i for i, line in enumerate(lines) if f'"msg": "{m}' in line), -1) for m in messages]


@pytest.mark.usefixtures("credentials")
def test_sigterm_at_random_moments_after_start_exits_0(
    *,
    api_client: client.ApiClient,
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    fake_github: FakeGitHub,
    simulator: RunnerSimulator,
    operator_credentials: Path,
    tmp_path: Path,
) -> None:
    # Work for every phase: pools to converge, tokens to fill, runners to list.
    create_pool(api_client, namespace, pool_manifest("repo", repo=REPO, replicas=2))
    create_pool(api_client, namespace, pool_manifest("org", org=ORG, replicas=1))
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    pause = threading.Event()  # never set: waits out the chosen moment
    # None: the moment the handler is in place, i.e. in the middle of the imports.
    delays: list[float | None] = [None] + [
        (i + rng.random()) * WINDOW_SECONDS / SLICES for i in range(SLICES)
    ]
    outcomes = []
    leader_flags = allow_leader_election_in(api_client, namespace)
    for run, delay in enumerate(delays):
        operator = OperatorProcess(
            operator_credentials,
            fake_github.url,
            tmp_path / f"operator-{run}.log",
            namespaces=[namespace],
            extra_args=leader_flags if run % 2 else (),
        )
        started = time.monotonic()
        operator.start().wait_catches()
        if delay is not None:
            pause.wait(max(0.0, started + delay - time.monotonic()))
        sent = time.monotonic() - started
        code = operator.stop()
        log = operator.log_text()
        outcomes.append((round(sent, 2), code))
        context = f"seed {seed}, SIGTERM {sent:.2f}s after start: exit {code}\n{operator.log_tail()}"
        assert code == 0, context
        assert "Fatal Python error" not in log, context
        assert '"level": "error"' not in log, f"a stop is no error: {context}"
        assert "still busy after the stop" not in log, f"nothing waits on GitHub here: {context}"
        received, starting, stopped = _lines(
            log, "received SIGTERM", "starting runnerpool-operator", "operator stopped"
        )
        assert stopped > received >= 0, context
        if delay is None:
            assert received < starting, f"a SIGTERM during the imports waits for them: {context}"
    print(f"seed {seed}: (SIGTERM after s, exit code) {outcomes}")


@pytest.mark.usefixtures("credentials")
def test_sigterm_while_github_does_not_answer_exits_0_within_the_stop_bound(
    *,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    operator_credentials: Path,
    tmp_path: Path,
) -> None:
    """A token request GitHub never answers must not hold the process after its stop: the
    client's read timeouts and retries (minutes) are no reason for a pod to outlive SIGTERM."""
    fake_github.hang_next(5, max_seconds=120, method="POST", path="registration-token")
    operator = OperatorProcess(
        operator_credentials, fake_github.url, tmp_path / "operator.log", namespaces=[namespace]
    )
    operator.start().wait_ready()
    create_pool(api_client, namespace, pool_manifest("hung", repo=REPO, replicas=1))
    assert poll_until(lambda: fake_github.hanging > 0, 30), "the token request never went out"
    started = time.monotonic()
    code = operator.stop(timeout=STOP_BOUND + 10)
    took = time.monotonic() - started
    context = f"exit {code} after {took:.1f}s\n{operator.log_tail()}"
    assert code == 0, context
    assert took < STOP_BOUND + 2, context
    assert "still busy after the stop, exiting without them" in operator.log_text(), context
