"""Observe: one read of everything a pool's reconcile decides from, as one immutable snapshot.

The pool, its pods (and the creates still expected), its Secrets (token, each JIT pod's, the
credential Secret), the namespace's disruption budget, its kubernetes-mode account objects,
and what the background jobs published (token failures, runner counts) and the webhook
secret's state: all read from the informer caches and the jobs' in-memory results, no API
request.  The rest of the pass (``runnerpool.children.wanted``, ``runnerpool.status``) is
pure functions of this snapshot.  The ports the reconciler drives live here too, so the
fakes (``runnerpool.fakes``) and the real jobs meet one definition.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from runnerpool import api, naming
from runnerpool.api_errors import describe
from runnerpool.binding_protection import EnablingBindings
from runnerpool.credential_protection import CredentialProtection
from runnerpool.domain import Drain, PoolRef, RegistrationFailure, WebhookSecretProblem
from runnerpool.github.types import JitRequest
from runnerpool.pods import state as pod_state
from runnerpool.reads import Reads

__all__ = [
    "JitJobs",
    "Observed",
    "PoolSecrets",
    "RunnerJobs",
    "SecretChecks",
    "TokenJobs",
    "WebhookSecretCheck",
    "observe",
]

log = logging.getLogger(__name__)


class JitJobs(Protocol):
    """The part of ``secret_updater.jit.JitSecretUpdater`` the reconciler drives."""

    def fill(self, pool: PoolRef, secret: str, pod_uid: str, request: JitRequest) -> None: ...
    def follow(self, pool: PoolRef) -> None:
        """The pool's ref as this pass built it (a lasting failure made with another ends)."""
        ...

    def forget_pod(self, namespace: str, pod_uid: str) -> None: ...
    def stop(self, namespace: str, name: str) -> bool:
        """No fill for the pool from now on; whether a config was (or is being) written for one
        of its pods, which the caches may not show yet (said again at every stop until
        :meth:`marked`)."""
        ...

    def marked(self, namespace: str, name: str) -> None:
        """The pool carries its mark now, or is gone: ``stop`` need not tell of it again."""
        ...

    def failure(self, namespace: str, name: str) -> RegistrationFailure | None: ...


class TokenJobs(Protocol):
    """The part of ``secret_updater.SecretUpdater`` the reconciler drives."""

    def start(self, pool: PoolRef) -> None: ...
    def stop(self, namespace: str, name: str) -> None: ...
    def failure(self, namespace: str, name: str) -> RegistrationFailure | None: ...
    def check_secret(
        self,
        namespace: str,
        name: str,
        encoded_token: str | None,
        *,
        recreated: bool,
        expires_at: datetime | None = None,
    ) -> float | None: ...
    def withdraw(self, namespace: str, name: str, *, has_token: bool) -> bool: ...
    #: Each JIT pod's own config: filled by the same scheduler (``secret_updater.jit``).
    @property
    def jit(self) -> JitJobs: ...


class RunnerJobs(Protocol):
    """The part of ``runnerpool.runners.manager.RunnerManagers`` the reconciler drives."""

    def start(self, pool: PoolRef) -> None: ...
    def stop(self, namespace: str, name: str) -> None: ...
    def counts(self, namespace: str, name: str) -> api.RunnerCounts | None: ...
    def mark_refused(self, namespace: str, name: str) -> str | None: ...
    def drain(self, pool: PoolRef) -> Drain: ...
    def bring_round_forward(self, namespace: str, name: str) -> None: ...


#: Why a pool's own webhook secret (``spec.autoscaling.webhookSecretRef``) cannot be used, or
#: ``None`` when it can (``runnerpool.demand.secret.PoolSecrets.problem``, or with a separate
#: receiver ``runnerpool.demand.secret_mirror.SecretMirror.problem``; given by the manager).
WebhookSecretCheck = Callable[[str, api.WebhookSecretRef], WebhookSecretProblem | None]


class PoolSecrets(Protocol):
    """The Secrets a pool uses but does not own: its GitHub credential (protected with a
    finalizer while a pool needs it, ``runnerpool.credential_protection``) and its webhook secret."""

    def protect(self, namespace: str, pool: str, secret_name: str) -> bool: ...
    def finalized(self, namespace: str, pool: str, secret_name: str) -> None: ...
    def forget(self, namespace: str, pool: str) -> None: ...
    def namespace_done(self, namespace: str, last_writes: Callable[[], object]) -> None:
        """A pool of the namespace is gone: once none is left, ``last_writes`` (what the
        operator still writes there), then the enabling binding let go; once per teardown,
        however many pools go at once."""
        ...

    def credentials(self, namespace: str, secret_name: str) -> dict[str, Any] | None: ...
    def retry_in(self, namespace: str, secret_name: str) -> float | None: ...
    def webhook_problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None: ...


@dataclass(frozen=True)
class Observed:
    """Everything one pass decides from (read once, at its start)."""

    pods: list[dict[str, Any]]
    #: Pods created by an earlier pass that the cache does not show yet.
    expected: frozenset[str]
    token_secret: dict[str, Any] | None
    #: Each JIT pod's Secret by name (``None``: not there yet).
    jit_secrets: Mapping[str, dict[str, Any] | None]
    account: dict[str, Any] | None
    binding: dict[str, Any] | None
    #: A pod of the pool that has not finished runs as ``account`` (its job hooks use it).
    account_in_use: bool
    #: The namespace's budgets (``children.NAMESPACE_BUDGETS``) by name, those there.
    budgets: Mapping[str, dict[str, Any]]
    legacy_budget: dict[str, Any] | None
    credentials: dict[str, Any] | None
    #: Seconds until a missing credential Secret is looked for by name again.
    credentials_retry: float | None
    token_failure: RegistrationFailure | None
    runner_counts: dict[str, Any] | None
    #: What the cluster said of the busy marks it refused in the runner manager's latest round.
    mark_refused: str | None
    webhook_problem: WebhookSecretProblem | None


def observe(
    reads: Reads,
    pool: api.RunnerPool,
    expected: frozenset[str],
    *,
    tokens: TokenJobs,
    runners: RunnerJobs,
    secrets: PoolSecrets,
) -> Observed:
    """The snapshot of ``pool`` (``expected``: the creates still expected, taken before the pod read)."""
    ns, name = pool.namespace, pool.name
    pods = reads.list_pods(ns, name)
    jit_names = pod_state.jit_secret_names(pods)
    account = naming.runner_account_name(name)
    jit = pool.spec.registers_jit
    counts = runners.counts(ns, name)
    ref = pool.spec.webhook_secret_ref
    return Observed(
        pods=pods,
        expected=expected,
        token_secret=reads.get_secret(ns, naming.token_secret_name(name)),
        jit_secrets={n: reads.get_secret(ns, n) for n in jit_names},
        account=reads.get_service_account(ns, account),
        binding=reads.get_role_binding(ns, account),
        account_in_use=any(pod_state.runs_as(pod, account) for pod in pods),
        budgets=_budgets(reads, ns),
        legacy_budget=reads.get_disruption_budget(ns, naming.disruption_budget_name(name)),
        credentials=secrets.credentials(ns, pool.spec.credential_secret_name),
        credentials_retry=secrets.retry_in(ns, pool.spec.credential_secret_name),
        token_failure=(tokens.jit if jit else tokens).failure(ns, name),
        runner_counts=None if counts is None else counts.model_dump(by_alias=True),
        mark_refused=runners.mark_refused(ns, name),
        webhook_problem=None if ref is None else secrets.webhook_problem(ns, ref),
    )


@dataclass(frozen=True)
class SecretChecks:
    """:class:`PoolSecrets` of the running operator: what a pool must keep of the user's until it
    has deregistered (its credential Secret, and the RoleBinding that lets the operator write in
    its namespace: ``runnerpool.binding_protection``), and the demand receiver's check of a pool's
    webhook secret (:data:`WebhookSecretCheck`)."""

    protection: CredentialProtection
    bindings: EnablingBindings
    webhook: WebhookSecretCheck

    def protect(self, namespace: str, pool: str, secret_name: str) -> bool:
        held = self.bindings.protect(namespace)
        return self.protection.protect(namespace, pool, secret_name) or held

    def finalized(self, namespace: str, pool: str, secret_name: str) -> None:
        self.protection.finalized(namespace, pool, secret_name)

    def forget(self, namespace: str, pool: str) -> None:
        self.protection.forget(namespace, pool)

    def namespace_done(self, namespace: str, last_writes: Callable[[], object]) -> None:
        self.bindings.release_if_unused(namespace, last_writes)

    def release_unused(
        self, namespaces: Sequence[str] | None, last_writes: Callable[[str], object] = lambda namespace: None
    ) -> None:
        """At the start of each leadership, on synced caches, before the workers: the protection
        of pools that went under another leader, or while none led. The credential Secrets no
        pool needs (``CredentialProtection.release_unused``); then, in each namespace whose
        enabling binding is still held but which has no pool left (a leader stopped between
        its last pool's finalizer and the release), its protected Secrets, listed through the
        API, the operator's ``last_writes`` there (the busy budget, which the gone pools'
        passes would have deleted), and the binding. ``namespaces``: the watched ones
        (``--namespace``), ``None``: all. A failure is logged, never raised: leading must go
        on, and the next pool deletion there asks again."""
        self.protection.release_unused()
        for scope in namespaces if namespaces is not None else [None]:
            try:
                held = self.bindings.held_in(scope)
            except Exception as err:
                log.warning("could not list the enabling RoleBindings to release: %s", describe(err))
                continue
            for namespace in sorted(held):
                try:
                    self.bindings.release_if_unused(
                        namespace, functools.partial(self._last_writes, namespace, last_writes)
                    )
                except Exception as err:
                    log.warning("could not release namespace %s: %s", namespace, describe(err))

    def _last_writes(self, namespace: str, others: Callable[[str], object]) -> None:
        self.protection.release_listed_in(namespace)
        others(namespace)

    def credentials(self, namespace: str, secret_name: str) -> dict[str, Any] | None:
        """Cached once labelled, read by name before that."""
        return self.protection.secrets.get(namespace, secret_name)

    def retry_in(self, namespace: str, secret_name: str) -> float | None:
        return self.protection.secrets.retry_in(namespace, secret_name)

    def webhook_problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None:
        return self.webhook(namespace, ref)


def _budgets(reads: Reads, namespace: str) -> dict[str, dict[str, Any]]:
    found = {name: reads.get_disruption_budget(namespace, name) for name in naming.NAMESPACE_BUDGETS}
    return {name: budget for name, budget in found.items() if budget is not None}
