"""One way for tests to build a ``Reconciler``: the real one, on a real API server, with fakes
for the background jobs (``runnerpool.fakes``) unless a test passes its own collaborators."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from kubernetes import client

from runnerpool.domain import utcnow
from runnerpool.echoes import Echoes
from runnerpool.events import EventRecorder, KubeEventRecorder
from runnerpool.fakes import FakePoolSecrets, FakeRunnerJobs, FakeSecretUpdater
from runnerpool.gates import Gate, GitHubHostGate, RunnerGroupGate, ScopeGate
from runnerpool.github.protocol import GitHubClients
from runnerpool.observe import PoolSecrets, RunnerJobs, TokenJobs
from runnerpool.pods.create_backoff import CreateBackoff
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.start_backoff import StartBackoff
from runnerpool.reads import Reads
from runnerpool.reconciler import Forgets, PoolJobs, PoolStates, Reconciler, ScaleSets
from runnerpool.runtime.kube import Kube
from runnerpool.settings import Settings
from tests.pools import LiveReader

__all__ = ["make_reconciler"]


def make_reconciler(
    api_client: client.ApiClient,
    *,
    reads: Reads | None = None,
    tokens: TokenJobs | None = None,
    runners: RunnerJobs | None = None,
    recorder: EventRecorder | None = None,
    settings: Settings | None = None,
    clock: Callable[[], datetime] = utcnow,
    expectations: Expectations | None = None,
    backoff: CreateBackoff | None = None,
    starts: StartBackoff | None = None,
    secrets: PoolSecrets | None = None,
    github: GitHubClients | None = None,
    others: Sequence[Forgets] = (),
    echoes: Echoes | None = None,
    scale_sets: ScaleSets | None = None,
    namespace_gate: Gate | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> Reconciler:
    """``reads``: the API server itself by default (nothing lags, so no create is expected
    for long: ``Expectations(timeout=0)``); ``github``: also check ``spec.runnerGroup``;
    ``namespace_gate``: the first gate (none: the test's namespaces count as enabled)."""
    reads = reads or LiveReader(api_client)
    settings = settings or Settings()
    gates: list[Gate] = [
        *([namespace_gate] if namespace_gate is not None else []),
        GitHubHostGate(settings.github.hosts, settings.github.api_url_of),
        ScopeGate(settings.tenants.allow_list),
    ]
    if github is not None:
        gates.append(RunnerGroupGate(github, settings.github.api_url))
    return Reconciler(
        reads,
        Kube(api_client),
        PoolJobs(
            tokens or FakeSecretUpdater(),
            runners or FakeRunnerJobs(),
            others=tuple(others),
            scale_sets=scale_sets,
        ),
        recorder or KubeEventRecorder(Kube(api_client)),
        gates=gates,
        secrets=secrets or FakePoolSecrets(reads),
        states=PoolStates(
            expectations or Expectations(timeout=0),
            backoff or CreateBackoff(),
            clock,
            starts=starts or StartBackoff(clock=clock),
            echoes=echoes or Echoes(),
            monotonic=monotonic,
        ),
        settings=settings,
    )
