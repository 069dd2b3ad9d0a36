"""Recording stand-ins for the reconciler's ports (``TokenJobs``, ``RunnerJobs``, ``PoolSecrets``).

Kept beside the protocols in the operator package so that mypy --strict checks them against
the protocols they fake, and tests stop reaching into the production classes. Never
imported by the operator itself (an import-linter contract says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runnerpool import api
from runnerpool.domain import Drain, PoolRef, RegistrationFailure, WebhookSecretProblem, pool_key
from runnerpool.github.types import JitRequest
from runnerpool.reads import Reads

__all__ = ["FakeJitSecretUpdater", "FakePoolSecrets", "FakeRunnerJobs", "FakeSecretUpdater"]


@dataclass
class FakeJitSecretUpdater:
    """``JitJobs``: records the fills asked for (secret, pod uid, request) and the pods let go."""

    fills: list[tuple[str, str, JitRequest]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    #: The refs of every ``follow``.
    followed: list[PoolRef] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)
    failures: dict[tuple[str, str], RegistrationFailure] = field(default_factory=dict)
    #: (namespace, pool) whose ``stop`` says a config was written that the caches may not show,
    #: until ``marked``.
    issued: set[tuple[str, str]] = field(default_factory=set)

    def fill(self, pool: PoolRef, secret: str, pod_uid: str, request: JitRequest) -> None:
        self.fills.append((secret, pod_uid, request))

    def follow(self, pool: PoolRef) -> None:
        self.followed.append(pool)

    def forget_pod(self, namespace: str, pod_uid: str) -> None:
        self.forgotten.append(pod_uid)

    def stop(self, namespace: str, name: str) -> bool:
        self.stopped.append((namespace, name))
        return (namespace, name) in self.issued

    def marked(self, namespace: str, name: str) -> None:
        self.issued.discard((namespace, name))

    def failure(self, namespace: str, name: str) -> RegistrationFailure | None:
        return self.failures.get((namespace, name))


@dataclass
class FakeSecretUpdater:
    """``TokenJobs``: records starts, stops and Secret checks; failures are set by the test."""

    started: list[PoolRef] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)
    failures: dict[tuple[str, str], RegistrationFailure] = field(default_factory=dict)
    #: (namespace, pool, recreated) of every ``check_secret``.
    checked: list[tuple[str, str, bool]] = field(default_factory=list)
    #: (namespace, pool) of every ``withdraw`` that found a token to empty.
    emptied: list[tuple[str, str]] = field(default_factory=list)
    jit: FakeJitSecretUpdater = field(default_factory=FakeJitSecretUpdater)

    def start(self, pool: PoolRef) -> None:
        self.started.append(pool)

    def stop(self, namespace: str, name: str) -> None:
        self.stopped.append((namespace, name))

    def failure(self, namespace: str, name: str) -> RegistrationFailure | None:
        return self.failures.get((namespace, name))

    def check_secret(
        self,
        namespace: str,
        name: str,
        encoded_token: str | None,
        *,
        recreated: bool,
        expires_at: datetime | None = None,
    ) -> float | None:
        self.checked.append((namespace, name, recreated))
        return None

    def withdraw(self, namespace: str, name: str, *, has_token: bool) -> bool:
        self.stop(namespace, name)
        if has_token:
            self.emptied.append((namespace, name))
        return has_token


@dataclass
class FakeRunnerJobs:
    """``RunnerJobs``: records starts, stops, rounds brought forward and drains; counts and
    outcomes are set by the test (by default a pool has no listing yet, nothing to deregister
    and no pod left)."""

    started: list[PoolRef] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)
    runner_counts: dict[str, api.RunnerCounts] = field(default_factory=dict)
    drains: list[PoolRef] = field(default_factory=list)
    rounds_forward: list[tuple[str, str]] = field(default_factory=list)
    outcome: Drain = field(default_factory=lambda: Drain(busy=0, deregistered=0))
    marks_refused: dict[str, str] = field(default_factory=dict)

    def start(self, pool: PoolRef) -> None:
        self.started.append(pool)

    def stop(self, namespace: str, name: str) -> None:
        self.stopped.append((namespace, name))

    def bring_round_forward(self, namespace: str, name: str) -> None:
        self.rounds_forward.append((namespace, name))

    def counts(self, namespace: str, name: str) -> api.RunnerCounts | None:
        return self.runner_counts.get(pool_key(namespace, name))

    def mark_refused(self, namespace: str, name: str) -> str | None:
        return self.marks_refused.get(pool_key(namespace, name))

    def drain(self, pool: PoolRef) -> Drain:
        self.drains.append(pool)
        return self.outcome


@dataclass
class FakePoolSecrets:
    """``PoolSecrets`` without credential protection: the credential Secret is read from
    ``reads``; a pool's webhook secret is as ``webhook`` says (usable, unless given)."""

    reads: Reads
    webhook: Callable[[str, api.WebhookSecretRef], WebhookSecretProblem | None] = lambda namespace, ref: None
    #: (namespace, pool) of every ``finalized``.
    finalized_pools: list[tuple[str, str]] = field(default_factory=list)

    def protect(self, namespace: str, pool: str, secret_name: str) -> bool:
        return False

    def finalized(self, namespace: str, pool: str, secret_name: str) -> None:
        self.finalized_pools.append((namespace, pool))

    def forget(self, namespace: str, pool: str) -> None:
        pass

    def namespace_done(self, namespace: str, last_writes: Callable[[], object]) -> None:
        last_writes()

    def credentials(self, namespace: str, secret_name: str) -> dict[str, Any] | None:
        return self.reads.get_secret(namespace, secret_name)

    def retry_in(self, namespace: str, secret_name: str) -> float | None:
        return None

    def webhook_problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None:
        return self.webhook(namespace, ref)


def _conforms() -> None:
    """Checked by mypy, never run: the fakes satisfy the protocols they stand in for."""
    from runnerpool.observe import PoolSecrets, RunnerJobs, TokenJobs  # noqa: PLC0415 - type check only

    tokens: TokenJobs = FakeSecretUpdater()
    runners: RunnerJobs = FakeRunnerJobs()
    secrets: PoolSecrets = FakePoolSecrets(_no_reads())
    del tokens, runners, secrets


def _no_reads() -> Reads:
    raise NotImplementedError
