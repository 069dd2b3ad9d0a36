"""A pool's status as a pure function of what the operator observed.

Kept apart from the reconciler's writes so the rules (which reason when, what
counts as ready) can be read and tested on their own, and so the same inputs
always give the same dict: a status that re-confirms a state compares equal to
the stored one, which is what lets a converged pool cost no write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from runnerpool import api, children, conditions, naming
from runnerpool.autoscaling import Decision
from runnerpool.domain import RFC3339, RegistrationFailure, WebhookSecretProblem, parse_rfc3339
from runnerpool.pods import failures
from runnerpool.pods.scaling import PodCounts
from runnerpool.reasons import Reason

__all__ = [
    "DEMAND",
    "POD_CREATE_FAILED_REASON",
    "RUNNER_PODS_FAILING_REASON",
    "SCALE_SET",
    "TOKEN_MIN_LIFE",
    "WRITTEN_ELSEWHERE",
    "PodCounts",
    "demand_blind",
    "demand_visible_condition",
    "desired_status",
    "has_token",
    "has_usable_token",
    "merge_patch",
    "notable",
    "ready_condition",
    "refused",
    "scaling_condition",
    "token_condition",
    "token_expiry",
    "token_min_life",
    "token_usable_until",
    "webhook_secret_condition",
]


#: ``status.demand``: written by the demand recorder, never by the reconciler's status patch.
DEMAND = "demand"
#: ``status.scaleSet``: written by the scale-set listener, never by the reconciler's status patch.
SCALE_SET = "scaleSet"
#: The parts of the status other writers own: left out of the reconciler's comparison and patch.
WRITTEN_ELSEWHERE = frozenset({DEMAND, SCALE_SET})
#: ``Ready`` reasons of a pool that something outside the operator stops: the API server refuses
#: its pods, or its pods are stuck (``runnerpool.pods.failures``). Ready is False whatever the
#: counts: a pool at full strength whose new pods cannot come has a rollout that never ends.
POD_CREATE_FAILED_REASON = Reason.POD_CREATE_FAILED
RUNNER_PODS_FAILING_REASON = Reason.RUNNER_PODS_FAILING
#: Why a pool may not have runners: the reasons a closed gate puts on ``Ready`` (the reconciler's
#: ``_refuse`` copies the gate's reason there: ``runnerpool.gates``, and ``ChildNotOwned``), and
#: the credential and GitHub failures that keep a pool's token from coming (``TokenReady``). Not
#: the reasons of a pool on its way up (``WaitingForToken``, ``RunnersStarting``): it soon has
#: runners. ``tests/test_scope_gates.py`` checks that every gate's refusal is here.
REFUSALS = frozenset(
    {
        Reason.NAMESPACE_NOT_ENABLED,
        Reason.SCOPE_NOT_ALLOWED,
        Reason.GITHUB_HOST_NOT_ALLOWED,
        Reason.RUNNER_GROUP_NOT_FOUND,
        Reason.REPOSITORY_NOT_ALLOWED,
        Reason.CHILD_NOT_OWNED,
        Reason.CREDENTIAL_SECRET_MISSING,
        Reason.CREDENTIAL_SECRET_MALFORMED,
        Reason.BAD_CREDENTIALS,
        Reason.FORBIDDEN,
        Reason.APP_INSTALLATION_TOKEN_FAILED,
        Reason.ENTERPRISE_NEEDS_PERSONAL_ACCESS_TOKEN,
        Reason.SCOPE_NOT_FOUND,
        Reason.RATE_LIMITED,
        Reason.GITHUB_UNAVAILABLE,
        Reason.GITHUB_REDIRECTED,
        Reason.MALFORMED_RESPONSE,
        Reason.GITHUB_REQUEST_FAILED,
        Reason.GITHUB_DEADLINE_EXCEEDED,
        Reason.GITHUB_RESPONSE_TOO_LARGE,
        Reason.GITHUB_HOST_SLOW,
        Reason.GITHUB_CERTIFICATE_UNTRUSTED,
        Reason.GITHUB_CONNECTION_CONFIG_MISSING,
        Reason.SCALE_SET_NOT_THE_POOLS,
    }
)


#: What a registration token must have left to be handed to a new runner pod: the pod is still
#: to be scheduled, pull its image and run ``config.sh``, and a token that expires meanwhile
#: leaves it unable to register.
TOKEN_MIN_LIFE = timedelta(minutes=1)


def has_token(secret: dict[str, Any]) -> bool:
    return bool((secret.get("data") or {}).get(naming.TOKEN_SECRET_KEY))


def token_expiry(secret: dict[str, Any]) -> datetime | None:
    value = ((secret.get("metadata") or {}).get("annotations") or {}).get(naming.TOKEN_EXPIRY_ANNOTATION)
    return parse_rfc3339(value)


def token_min_life(refresh_margin: timedelta) -> timedelta:
    """``TOKEN_MIN_LIFE``, but at most half the updater's refresh margin: a token refreshed on
    time (``margin`` before it expires) must never count as none, or a pool with a short
    margin would lose its token for a moment every hour."""
    return min(TOKEN_MIN_LIFE, refresh_margin / 2)


def token_usable_until(secret: dict[str, Any], min_life: timedelta = TOKEN_MIN_LIFE) -> datetime | None:
    """When the Secret's token stops being handed to new pods: ``min_life`` before it expires
    (``None``: its expiry is not annotated)."""
    expiry = token_expiry(secret)
    return expiry - min_life if expiry is not None else None


def has_usable_token(secret: dict[str, Any], now: datetime, min_life: timedelta = TOKEN_MIN_LIFE) -> bool:
    """A token a pod made ``now`` can register with: there, and not expiring within ``min_life``.

    A Secret keeps its token past the expiry while the refresh fails (the updater writes only
    new tokens), so "filled" alone let pods start with a token GitHub no longer takes.
    """
    until = token_usable_until(secret, min_life)
    return has_token(secret) and (until is None or until > now)


def token_condition(
    stamp: conditions.Stamp,
    pool: api.RunnerPool,
    secret: dict[str, Any],
    failure: RegistrationFailure | None,
    *,
    min_life: timedelta = TOKEN_MIN_LIFE,
) -> dict[str, Any]:
    """True while the pool's token may go to new pods (``has_usable_token``): the reconciler
    makes pods on the same rule, so ``Ready`` says ``TokenNotReady`` whenever none can come."""
    if pool.spec.registers_jit:
        # No pool token: each pod gets its own runner's config (runnerpool.children.jit_child).
        if failure is not None:
            return stamp.condition(conditions.TOKEN_READY, False, failure.reason, failure.message)
        return stamp.condition(
            conditions.TOKEN_READY,
            True,
            Reason.JIT_CONFIGS,
            "each runner pod gets a just-in-time config of its own",
        )
    expiry = token_expiry(secret)
    valid = has_usable_token(secret, stamp.now, min_life)
    if valid and failure is None:
        until = f" until {expiry:{RFC3339}}" if expiry else ""
        return stamp.condition(
            conditions.TOKEN_READY, True, Reason.TOKEN_ISSUED, f"registration token valid{until}"
        )
    if valid and failure is not None:
        return stamp.condition(
            conditions.TOKEN_READY,
            True,
            Reason.REFRESH_FAILING,
            f"the current token is still valid, but refreshing it fails: {failure.reason}: {failure.message}",
        )
    if failure is not None:
        return stamp.condition(conditions.TOKEN_READY, False, failure.reason, failure.message)
    ending = ""
    if expiry is not None and has_token(secret):  # one too close to its expiry for a new pod
        ending = f"the token {'expired' if expiry <= stamp.now else 'expires'} at {expiry:{RFC3339}}; "
    return stamp.condition(
        conditions.TOKEN_READY,
        False,
        Reason.WAITING_FOR_TOKEN,
        f"{ending}waiting for the secret updater to put a registration token into Secret "
        f"{naming.token_secret_name(pool.name)}",
    )


def ready_condition(
    stamp: conditions.Stamp,
    pool: api.RunnerPool,
    token: dict[str, Any],
    pods: PodCounts | None,
    desired: int | None = None,
    *,
    refused: str | None = None,
    refused_reason: Reason = POD_CREATE_FAILED_REASON,
) -> dict[str, Any]:
    """Ready means enough ready runner pods; a rollout or scale-down waiting for jobs says so.

    ``desired``: the replica count decided for now (``spec.replicas`` unless the pool follows demand);
    ``refused``: why the API server refuses the pool's pods, while it does; ``refused_reason``
    ``TemplateInvalid`` when it refuses the pod as the pool's template writes it (a misspelt or
    invalid field), so the message points at the template, not at the cluster.
    """
    desired = pool.spec.replicas if desired is None else desired
    if token["status"] != "True":
        return stamp.condition(
            conditions.READY, False, Reason.TOKEN_NOT_READY, "runners cannot register without a token"
        )
    pods = pods or PodCounts(desired=desired)
    summary = f"{pods.ready}/{desired} runner pods ready"
    if refused is not None:
        if refused_reason is Reason.TEMPLATE_INVALID:
            message = f"{summary}; fix spec.template: the API server refuses the runner pod it makes"
            return stamp.condition(
                conditions.READY, False, refused_reason, f"{message} (the current pods stay): {refused}"
            )
        return stamp.condition(
            conditions.READY,
            False,
            POD_CREATE_FAILED_REASON,
            f"{summary}; the API server refuses new runner pods: {refused}",
        )
    if pods.failing:
        return stamp.condition(
            conditions.READY,
            False,
            failures.ready_reason(pods.failing),
            f"{summary}; {failures.describe(pods.failing)}",
        )
    if pods.ready < desired:
        return stamp.condition(conditions.READY, False, Reason.RUNNERS_STARTING, summary)
    if pods.outdated:
        return stamp.condition(
            conditions.READY,
            True,
            Reason.ROLLING_OUT,
            f"{summary}; {pods.outdated} pod(s) of an older template are replaced once idle",
        )
    if pods.surplus:
        return stamp.condition(
            conditions.READY,
            True,
            Reason.SCALING_DOWN,
            f"{summary}; {pods.surplus} pod(s) above the desired count go once their runners are idle",
        )
    return stamp.condition(conditions.READY, True, Reason.RUNNERS_READY, summary)


def scaling_condition(stamp: conditions.Stamp, decision: Decision) -> dict[str, Any]:
    """Where users look for why a pool that follows demand has the count it has."""
    return stamp.condition(conditions.SCALING, True, decision.reason, decision.message)


def refused(pool: api.RunnerPool) -> bool:
    """Whether the pool, as its stored conditions say, cannot make runners now: ``Ready`` or
    ``TokenReady`` False for one of :data:`REFUSALS`. Read from the status (not asked of the
    gates again) because the demand recorder, in whichever replica, has only the pool's object;
    one rule here so what the demand side calls refused is what the reconciler refused.
    """
    return any(
        condition.type in (conditions.READY, conditions.TOKEN_READY)
        and condition.status == "False"
        and condition.reason in REFUSALS
        for condition in pool.status.conditions
    )


def demand_blind(pool: api.RunnerPool) -> bool:
    """An organization pool that follows demand but can learn of none: no webhook delivery for
    its organization has been seen (``status.demand.firstDeliveryAt``) and it names no
    repositories to poll. A repository pool always polls its repository.

    Whatever ``minReplicas``: above it, such a pool never scales either.
    """
    scaling = pool.spec.autoscaling
    if scaling is None or pool.spec.repository is not None or scaling.repositories:
        return False
    if pool.spec.scale_set is not None:
        return False  # its session tells it (scale_set_demand_condition)
    if pool.spec.enterprise is not None:
        return True  # only the repositories it lists count for an enterprise pool
    demand = pool.status.demand
    return demand is None or demand.first_delivery_at is None


def demand_visible_condition(stamp: conditions.Stamp, pool: api.RunnerPool) -> dict[str, Any]:
    """Says what a pool that follows demand learns of jobs from, and what to fix when nothing."""
    scaling = pool.spec.autoscaling
    assert scaling is not None
    if pool.spec.scale_set is not None:
        return _scale_set_demand_condition(stamp, pool, pool.spec.scale_set.name)
    demand = pool.status.demand
    polls = pool.spec.repository is not None or bool(scaling.repositories)
    if polls and demand is not None and demand.poll_problem is not None:
        return _poll_refused_condition(stamp, pool, demand)
    if pool.spec.repository is not None:
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            True,
            Reason.REPOSITORY_POLLED,
            f"queued jobs of {pool.spec.repository} come from webhook deliveries and polling",
        )
    if scaling.repositories:
        where = f" of {pool.spec.organization}" if pool.spec.organization else ""
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            True,
            Reason.REPOSITORIES_POLLED,
            f"queued jobs come from webhook deliveries and from polling {len(scaling.repositories)} "
            f"repositories{where}",
        )
    if pool.spec.enterprise is not None:
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            False,
            Reason.NO_DEMAND_SOURCE,
            f"an enterprise pool counts the jobs of the repositories in spec.autoscaling.repositories "
            f"only, and it lists none, so the pool stays at {scaling.min_replicas} runner(s): list "
            f"the repositories (owner/name) whose jobs it should take",
        )
    if not demand_blind(pool):
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            True,
            Reason.WEBHOOK_DELIVERING,
            f"webhook deliveries for {pool.spec.organization} reach the operator",
        )
    own = " signed with the pool's webhookSecretRef" if scaling.webhook_secret_ref else ""
    return stamp.condition(
        conditions.DEMAND_VISIBLE,
        False,
        Reason.NO_DEMAND_SOURCE,
        f"no webhook delivery for organization {pool.spec.organization}{own} has reached the "
        f"operator and spec.autoscaling.repositories is empty, so queued jobs are never seen and the "
        f"pool stays at {scaling.min_replicas} runner(s): configure the organization's webhook "
        f"(workflow_job events) to the operator's webhook URL, or list repositories to poll in "
        f"spec.autoscaling.repositories",
    )


def _poll_refused_condition(
    stamp: conditions.Stamp, pool: api.RunnerPool, demand: api.Demand
) -> dict[str, Any]:
    """GitHub refuses the poll (``demand.poll_problem``): deliveries alone can still tell jobs."""
    assert demand.poll_problem is not None and pool.spec.autoscaling is not None
    refused = demand.poll_problem.message
    if demand.first_delivery_at is not None:
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            True,
            Reason.WEBHOOK_DELIVERING,
            f"webhook deliveries reach the operator; polling, which catches what they miss, is "
            f"refused: {refused}",
        )
    return stamp.condition(
        conditions.DEMAND_VISIBLE,
        False,
        Reason.POLL_REFUSED,
        f"{refused}; no webhook delivery has reached the pool either, so it stays at "
        f"{pool.spec.autoscaling.min_replicas} runner(s)",
    )


def _scale_set_demand_condition(stamp: conditions.Stamp, pool: api.RunnerPool, name: str) -> dict[str, Any]:
    """A scale set learns its jobs from its message session: say whether the listener holds it,
    or why not (``status.scaleSet.problem``, the listener's words)."""
    seen = pool.status.scale_set
    if seen is not None and seen.problem is not None:
        try:
            reason = Reason(seen.problem.reason)
        except ValueError:
            reason = Reason.SCALE_SET_PENDING  # a reason this version does not know: still not listening
        return stamp.condition(conditions.DEMAND_VISIBLE, False, reason, seen.problem.message)
    if seen is None or seen.id is None:
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            False,
            Reason.SCALE_SET_PENDING,
            f"the operator's leader has not yet created or adopted runner scale set {name}",
        )
    listening = f"jobs come from the message session of runner scale set {name} (id {seen.id})"
    if seen.dropped_labels:
        return stamp.condition(
            conditions.DEMAND_VISIBLE,
            True,
            Reason.SCALE_SET_LABELS_DROPPED,
            f"{listening}, but GitHub did not keep its label(s) {', '.join(seen.dropped_labels)}: "
            f"jobs whose runs-on asks for them are never assigned to it. GitHub Enterprise Server "
            f"keeps labels beyond the scale set's name from 3.18 with custom scale-set labels "
            f"enabled (on by default from 3.21); until then target it with runs-on: {name} and "
            "remove those labels from spec.labels",
        )
    return stamp.condition(
        conditions.DEMAND_VISIBLE,
        True,
        Reason.SCALE_SET_LISTENING,
        f"{listening}; the Scaling condition counts them",
    )


def webhook_secret_condition(
    stamp: conditions.Stamp, problem: WebhookSecretProblem | None, secret: str, namespace: str
) -> dict[str, Any]:
    """``problem``: why the pool's own webhook secret cannot be used, ``None`` when it can.
    The message names the URL whose deliveries are checked with it
    (``runnerpool.demand.verification``), since that is where the webhook must point."""
    if problem is None:
        return stamp.condition(
            conditions.WEBHOOK_SECRET_READY,
            True,
            Reason.SECRET_FOUND,
            "webhook deliveries move this pool only when signed with spec.autoscaling.webhookSecretRef "
            f"and sent to the receiver's /webhook/{namespace}/{secret}",
        )
    return stamp.condition(
        conditions.WEBHOOK_SECRET_READY,
        False,
        problem.reason,
        f"{problem.cause}: webhook deliveries cannot move this pool (polling still can); {problem.fix}",
    )


#: Conditions only some pools have: dropped from a pool that no longer has them.
_OPTIONAL = (
    conditions.SCALING,
    conditions.DEMAND_VISIBLE,
    conditions.WEBHOOK_SECRET_READY,
    conditions.SCOPE_ALLOWED,
    conditions.RUNNER_GROUP_READY,
)


def desired_status(
    stamp: conditions.Stamp,
    pool: api.RunnerPool,
    *,
    old: dict[str, Any],
    secret: dict[str, Any],
    pods: PodCounts | None,
    failure: RegistrationFailure | None,
    runners: dict[str, Any] | None,
    decision: Decision | None = None,
    webhook_secret_problem: WebhookSecretProblem | None = None,
    refused: str | None = None,
    refused_reason: Reason = POD_CREATE_FAILED_REASON,
    gates: Sequence[dict[str, Any]] = (),
    min_token_life: timedelta = TOKEN_MIN_LIFE,
) -> dict[str, Any]:
    """The whole status subresource as it should read now, but ``demand`` (not the reconciler's).

    ``refused``: why the API server refuses the pool's pods, while it does, and
    ``refused_reason`` whether that is the pod template itself (``ready_condition``).

    ``decision``: the replica count decided for now (``spec.replicas`` unless the pool follows
    demand); a pool that follows demand also gets its ``Scaling`` and ``DemandVisible``
    conditions, and ``WebhookSecretReady`` when it names its own webhook secret
    (``webhook_secret_problem``: why that cannot be used, if it cannot). ``gates``: the
    conditions of the checks a pool passed before it may have runners (``ScopeAllowed``,
    ``RunnerGroupReady``), only for pools they apply to; ``min_token_life``: ``has_usable_token``'s.
    """
    decision = decision or Decision.fixed(pool.spec.replicas)
    desired = decision.replicas
    token = token_condition(stamp, pool, secret, failure, min_life=min_token_life)
    ready = ready_condition(stamp, pool, token, pods, desired, refused=refused, refused_reason=refused_reason)
    updates = [token, ready, *gates]
    previous = old.get("conditions") or []
    if pool.spec.autoscaling is not None:
        updates.append(scaling_condition(stamp, decision))
        updates.append(demand_visible_condition(stamp, pool))
        ref = pool.spec.autoscaling.webhook_secret_ref
        if ref is not None:
            updates.append(webhook_secret_condition(stamp, webhook_secret_problem, ref.name, pool.namespace))
    kept = {c["type"] for c in updates}
    previous = [c for c in previous if c.get("type") not in _OPTIONAL or c.get("type") in kept]
    status: dict[str, Any] = {
        "observedGeneration": pool.generation,
        "replicas": pods.active if pods else 0,
        "desiredReplicas": desired,
        "readyReplicas": pods.ready if pods else 0,
        "updatedReplicas": pods.updated if pods else 0,
        "selector": children.selector(pool),
        "conditions": conditions.merge(previous, updates),
    }
    expiry = token_expiry(secret)
    if expiry is not None:
        status["tokenExpiresAt"] = expiry.strftime(RFC3339)
    if runners is not None:
        status["runners"] = runners
    elif "runners" in old:
        # No listing yet (a restart, GitHub down): the last counts beat none.
        status["runners"] = old["runners"]
    return status


def notable(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Does the change say something new, beyond counts and messages moving along?

    A new condition status or reason, a new generation, a new token, a new desired count
    (the runner managers act on it) or different runner counts from GitHub are written at
    once; pod counts while pods start may wait (the reconciler coalesces them), since the
    next write carries the latest numbers anyway.
    """

    def gist(status: dict[str, Any]) -> Any:
        return (
            status.get("observedGeneration"),
            status.get("desiredReplicas"),
            status.get("tokenExpiresAt"),
            status.get("runners"),
            sorted((c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []),
        )

    return bool(gist(old) != gist(new))


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch removes a key only when it says null: drop what we no longer report."""
    return {**{k: None for k in old if k not in new}, **new}
