"""What each command shows, as pure functions of what it read: testable without a cluster.

``pool_row`` (``list``), ``match`` (``runners``: GitHub's runners beside the pool's pods) and
``waiting_for`` (``why``: one sentence from the pool's conditions) decide; the commands only
read and print.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerpool import api, conditions, naming
from runnerpool.domain import parse_rfc3339, pool_key, rfc3339
from runnerpool.github.credentials import APP_ID_KEY, PAT_KEY
from runnerpool.github.types import Runner
from runnerpool.reasons import ConditionType, Reason

__all__ = [
    "PodView",
    "PoolRow",
    "RunnerRow",
    "container_problems",
    "event_time",
    "match",
    "pod_phase",
    "pool_row",
    "scope_text",
    "token_expiries",
    "waiting_for",
]


def scope_text(spec: Mapping[str, Any]) -> str:
    if spec.get("enterprise"):
        return f"enterprise:{spec['enterprise']}"
    if spec.get("organization"):
        return f"org:{spec['organization']}"
    return f"repo:{spec.get('repository') or '?'}"


def _condition(raw: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    return conditions.find(list((raw.get("status") or {}).get("conditions") or []), type_)


# -- list -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolRow:
    namespace: str
    name: str
    scope: str
    desired: int | None
    ready: int
    busy: int | None
    queued: int | None
    token_expires_at: datetime | None
    #: ``secret`` (the token Secret's annotation), ``status`` (the pool's copy) or ``None``.
    token_expiry_from: str | None
    ready_status: str | None
    ready_reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "scope": self.scope,
            "desired": self.desired,
            "ready": self.ready,
            "busy": self.busy,
            "queued": self.queued,
            "tokenExpiresAt": None if self.token_expires_at is None else rfc3339(self.token_expires_at),
            "tokenExpiryFrom": self.token_expiry_from,
            "readyStatus": self.ready_status,
            "readyReason": self.ready_reason,
        }


def token_expiries(secrets: Iterable[Mapping[str, Any]]) -> dict[str, datetime | None]:
    """Token expiry by pool key, from the token Secrets' annotation (``None``: the Secret has none)."""
    found: dict[str, datetime | None] = {}
    for secret in secrets:
        meta = secret.get("metadata") or {}
        pool = (meta.get("labels") or {}).get(naming.POOL_LABEL)
        if not pool or meta.get("name") != naming.token_secret_name(pool):
            continue
        expiry = (meta.get("annotations") or {}).get(naming.TOKEN_EXPIRY_ANNOTATION)
        found[pool_key(str(meta.get("namespace") or ""), pool)] = parse_rfc3339(expiry)
    return found


def pool_row(raw: Mapping[str, Any], expiries: Mapping[str, datetime | None] | None) -> PoolRow:
    """One line of ``list``: desired, ready, busy (GitHub's), queued (pools that follow demand).

    ``expiries``: from the token Secrets, when the user may read them; otherwise (``None``, or a
    pool whose Secret is not there) the pool's status, which the operator copies from them.
    """
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    status = api.RunnerPoolStatus.model_validate(raw.get("status") or {})
    key = pool_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    if expiries is not None and key in expiries:
        expiry, source = expiries[key], "secret"
    else:
        expiry, source = status.token_expires_at, "status"
    ready = _condition(raw, ConditionType.READY)
    desired = status.desired_replicas
    if desired is None and not spec.get("autoscaling"):
        desired = int(spec.get("replicas", 1))
    return PoolRow(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        scope=scope_text(spec),
        desired=desired,
        ready=status.ready_replicas,
        busy=status.runners.busy if status.runners is not None else None,
        # A pool that follows demand and has none recorded yet has nothing queued; a fixed pool
        # does not count queued jobs at all.
        queued=status.demand.queued if status.demand is not None else 0 if spec.get("autoscaling") else None,
        token_expires_at=expiry,
        token_expiry_from=source if expiry is not None else None,
        ready_status=None if ready is None else str(ready.get("status")),
        ready_reason=None if ready is None else str(ready.get("reason") or ""),
    )


# -- runners --------------------------------------------------------------------------------------


def pod_phase(pod: Mapping[str, Any]) -> str:
    """As ``kubectl get pods`` shows it: a pod being deleted is ``Terminating``."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("phase") or "Pending")


@dataclass(frozen=True)
class PodView:
    name: str
    phase: str

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodView:
        return cls(str((pod.get("metadata") or {}).get("name") or ""), pod_phase(pod))


@dataclass(frozen=True)
class RunnerRow:
    """A runner GitHub lists and its pod (same name), or one of the two alone (``note`` says so)."""

    runner: Runner | None
    pod: PodView | None

    @property
    def name(self) -> str:
        return self.runner.name if self.runner is not None else self.pod.name if self.pod is not None else ""

    @property
    def note(self) -> str:
        if self.pod is None:
            return "no pod"
        if self.runner is None:
            return "not registered"
        if self.runner.offline and self.pod.phase == "Running":
            return "offline while its pod runs"
        return ""

    def as_json(self) -> dict[str, Any]:
        runner, pod = self.runner, self.pod
        return {
            "runner": None if runner is None else runner.name,
            "id": None if runner is None else runner.id,
            "status": None if runner is None else runner.status,
            "busy": None if runner is None else runner.busy,
            "pod": None if pod is None else pod.name,
            "podPhase": None if pod is None else pod.phase,
            "note": self.note or None,
        }


def match(runners: Iterable[Runner], pods: Iterable[Mapping[str, Any]]) -> list[RunnerRow]:
    """Runners beside their pods: a runner registers under its pod's name (GitHub compares
    names case-insensitively); sorted by name."""
    by_name = {PodView.of(pod).name.lower(): PodView.of(pod) for pod in pods}
    rows = [RunnerRow(runner, by_name.pop(runner.name.lower(), None)) for runner in runners]
    rows.extend(RunnerRow(None, pod) for pod in by_name.values())
    return sorted(rows, key=lambda row: row.name)


# -- why ------------------------------------------------------------------------------------------

#: Waiting reasons of a container that are part of every start, not a problem.
_STARTING_CONTAINER = frozenset({"ContainerCreating", "PodInitializing"})


def container_problems(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why containers of the pool's pods do not run: ``pod: container waiting ErrImagePull: ...``."""
    problems = []
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name")
        status = pod.get("status") or {}
        for container in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
            if waiting and waiting.get("reason") not in _STARTING_CONTAINER:
                detail = f": {waiting['message']}" if waiting.get("message") else ""
                problems.append(
                    f"pod {name}: container {container.get('name')} waiting {waiting.get('reason')}{detail}"
                )
            elif terminated and terminated.get("exitCode", 0) != 0:
                problems.append(
                    f"pod {name}: container {container.get('name')} exited {terminated.get('exitCode')} "
                    f"({terminated.get('reason') or 'Error'})"
                )
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                problems.append(
                    f"pod {name}: not scheduled: {condition.get('message') or condition.get('reason')}"
                )
    return problems


def event_time(event: Mapping[str, Any]) -> datetime | None:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        when = parse_rfc3339(event.get(key))
        if when is not None:
            return when
    return parse_rfc3339((event.get("metadata") or {}).get("creationTimestamp"))


def _credential_sentence(reason: str, message: str, namespace: str, spec: Mapping[str, Any]) -> str | None:
    secret = f"{namespace}/{spec.get('credentialSecretName') or naming.DEFAULT_CREDENTIAL_SECRET}"
    if reason == Reason.CREDENTIAL_SECRET_MISSING:
        return (
            f"the credential Secret {secret} (spec.credentialSecretName): create it with key "
            f"{PAT_KEY!r} (a personal access token) or the GitHub App keys ({APP_ID_KEY!r}, ...); "
            "the operator retries by itself"
        )
    if reason == Reason.CREDENTIAL_SECRET_MALFORMED:
        return f"a usable credential in Secret {secret}: {message}"
    if reason in (Reason.BAD_CREDENTIALS, Reason.FORBIDDEN, Reason.APP_INSTALLATION_TOKEN_FAILED):
        return f"a credential GitHub accepts in Secret {secret} (GitHub answered: {message})"
    if reason == Reason.SCOPE_NOT_FOUND:
        return f"GitHub to know {scope_text(spec)} with the credential in Secret {secret}: {message}"
    if reason == Reason.RATE_LIMITED:
        return f"the GitHub rate limit of the credential in Secret {secret} to reset: {message}"
    if reason == Reason.GITHUB_UNAVAILABLE:
        return f"GitHub to answer (it did not: {message})"
    return None


def _deletion_sentence(raw: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> str:
    gone = _condition(raw, ConditionType.RUNNERS_DEREGISTERED)
    if gone is not None and gone.get("reason") == Reason.RUNNERS_BUSY:
        return (
            "Waiting for busy runners to finish their jobs before the pool can go: "
            f"{gone.get('message')} (busy runners are never killed)."
        )
    if gone is not None and gone.get("status") != "True":
        return (
            "Waiting to deregister the pool's runners before it goes: "
            f"{gone.get('reason')}: {gone.get('message')}."
        )
    if gone is not None and gone.get("reason") == Reason.RUNNER_PODS_STUCK_TERMINATING:
        return f"Waiting for pods stuck Terminating (a lost node?): {gone.get('message')}."
    left = len(list(pods))
    if left:
        return f"Waiting for the pool's {left} pod(s) to go; then the finalizer is removed."
    return "Waiting for the operator to remove its finalizer (is it running and watching this namespace?)."


def _token_sentence(raw: Mapping[str, Any], token: Mapping[str, Any]) -> str:
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    reason, message = str(token.get("reason") or ""), str(token.get("message") or "")
    if reason == Reason.WAITING_FOR_TOKEN:
        return (
            "Waiting for a registration token: the operator's secret updater has not yet put one into "
            f"Secret {naming.token_secret_name(str(meta.get('name') or ''))}; if this lasts, check that "
            "the operator runs and reaches GitHub."
        )
    credential = _credential_sentence(reason, message, str(meta.get("namespace") or ""), spec)
    if credential is not None:
        return f"Waiting for {credential}."
    return f"Waiting for a registration token: {reason}: {message}."


def _running_sentence(raw: Mapping[str, Any], token: Mapping[str, Any], ready: Mapping[str, Any]) -> str:
    """The pool has a token: what its pods and runners wait for, if anything."""
    scaling = _condition(raw, ConditionType.SCALING)
    reason, message = str(ready.get("reason") or ""), str(ready.get("message") or "")
    if ready.get("status") != "True":
        return f"Waiting for runner pods to become ready: {message} ({reason})."
    if scaling is not None and scaling.get("reason") == Reason.WAITING_TO_SCALE_DOWN:
        return (
            "Waiting out spec.autoscaling.scaleDownDelay before removing idle runners: "
            f"{scaling.get('message')}."
        )
    if reason == Reason.SCALING_DOWN:
        return f"Waiting for runners above the desired count to become idle, to remove them: {message}."
    if reason == Reason.ROLLING_OUT:
        return f"Waiting for outdated runners to become idle, to replace them: {message}."
    if token.get("reason") == Reason.REFRESH_FAILING:
        return f"Nothing for now, but the token expires unless its refresh succeeds: {token.get('message')}."
    return f"Nothing: the pool is ready ({message})."


def waiting_for(raw: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """One sentence: what the operator waits for before the pool is what its spec asks.

    Read from the conditions the operator writes (``runnerpool.status``, ``autoscaling``, the
    finalizer's ``RunnersDeregistered``), most blocking first: a deletion, a namespace the operator
    may not write in, a first reconcile,
    a spec not acted on yet, the token, the pods, a scale-down hold, a rollout.
    """
    meta, status = raw.get("metadata") or {}, raw.get("status") or {}
    if meta.get("deletionTimestamp"):
        return _deletion_sentence(raw, pods)
    enabled = _condition(raw, ConditionType.NAMESPACE_ENABLED)
    if enabled is not None and enabled.get("status") == "False":
        return f"Waiting for the platform team to enable the operator here: {enabled.get('message')}."
    token = _condition(raw, ConditionType.TOKEN_READY)
    ready = _condition(raw, ConditionType.READY)
    if token is None or ready is None:
        return (
            "Waiting for the operator to reconcile the pool for the first time: is it running, and does "
            f"it watch namespace {meta.get('namespace')}? (see its log and the Events below)"
        )
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return (
            f"Waiting for the operator to act on the latest spec (generation {meta.get('generation')}, "
            f"it last acted on {status.get('observedGeneration')})."
        )
    if token.get("status") != "True":
        return _token_sentence(raw, token)
    return _running_sentence(raw, token, ready)
