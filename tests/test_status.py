"""The status rules on their own: which reason when, and stable output for unchanged input."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runnerpool import api, conditions, gates, naming, status
from runnerpool.domain import RegistrationFailure, WebhookSecretProblem
from runnerpool.github.errors import GitHubError
from runnerpool.github.groups import RepositoryNotAllowed, RunnerGroupNotFound
from runnerpool.reasons import Reason
from runnerpool.scaleset.errors import ListenerStillRunning, ScaleSetStillUsed
from runnerpool.tenants import AllowList, GitHubHosts, parse_allow_rule
from secret_updater import jit as jit_fills  # noqa: F401 - its GitHubError kinds count too, whatever ran first

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STAMP = conditions.Stamp(generation=3, now=NOW)
POOL = api.RunnerPool.model_validate(
    {"metadata": {"name": "p", "namespace": "ns", "generation": 3}, "spec": {"organization": "octo"}}
)


def _secret(expires_in: timedelta | None) -> dict[str, Any]:
    if expires_in is None:
        return {"metadata": {}}
    expiry = (NOW + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"annotations": {naming.TOKEN_EXPIRY_ANNOTATION: expiry}},
        "data": {naming.TOKEN_SECRET_KEY: base64.b64encode(b"t").decode()},
    }


def _reason(secret: dict[str, Any], failure: RegistrationFailure | None = None) -> tuple[str, str]:
    cond = status.token_condition(STAMP, POOL, secret, failure)
    return cond["status"], cond["reason"]


FAILURE = RegistrationFailure(reason="BadCredentials", message="GitHub said 401", since=NOW)


def test_token_reasons() -> None:
    assert _reason(_secret(None)) == ("False", "WaitingForToken")
    assert _reason(_secret(timedelta(hours=1))) == ("True", "TokenIssued")
    assert _reason(_secret(-timedelta(minutes=1))) == ("False", "WaitingForToken"), "an expired token is none"
    assert _reason(_secret(None), FAILURE) == ("False", "BadCredentials")
    assert _reason(_secret(timedelta(hours=1)), FAILURE) == ("True", "RefreshFailing")


def test_a_token_about_to_expire_is_no_token_for_a_new_pod() -> None:
    """A pod made now registers a minute or so later: a token that expires sooner is none, and
    TokenReady says so (Ready then says TokenNotReady, and the reconciler makes no pod)."""
    soon = _secret(timedelta(seconds=30))
    assert _reason(soon) == ("False", "WaitingForToken")
    assert _reason(soon, FAILURE) == ("False", "BadCredentials")
    assert (
        "the token expires at 2026-11-29T12:00:30Z"
        in status.token_condition(STAMP, POOL, soon, None)["message"]
    )
    assert not status.has_usable_token(soon, NOW)
    assert status.has_usable_token(_secret(timedelta(seconds=61)), NOW)
    assert status.has_usable_token({"data": {naming.TOKEN_SECRET_KEY: "dA=="}}, NOW), "no expiry: no limit"
    assert status.token_min_life(timedelta(minutes=30)) == timedelta(minutes=1)
    assert status.token_min_life(timedelta(minutes=1)) == timedelta(seconds=30), (
        "a token refreshed on time never counts as none"
    )


def test_ready_needs_enough_ready_pods_and_says_what_a_rollout_waits_for() -> None:
    token = status.token_condition(STAMP, POOL, _secret(timedelta(hours=1)), None)
    desired = POOL.spec.replicas

    def reason(**counts: int) -> tuple[str, str]:
        cond = status.ready_condition(STAMP, POOL, token, status.PodCounts(desired=desired, **counts))
        return cond["status"], cond["reason"]

    assert reason(active=desired, ready=desired, updated=desired) == ("True", "RunnersReady")
    assert reason(active=desired, ready=desired - 1, updated=desired) == ("False", "RunnersStarting")
    assert reason(active=desired + 1, ready=desired + 1, updated=desired) == ("True", "RollingOut")
    assert reason(active=desired + 2, ready=desired + 2, updated=desired + 2) == ("True", "ScalingDown")
    assert status.ready_condition(STAMP, POOL, token, None)["reason"] == "RunnersStarting"


def test_pod_counts_alone_are_not_notable_but_a_new_reason_is() -> None:
    pool = POOL.model_copy(update={"spec": POOL.spec.model_copy(update={"replicas": 3})})
    inputs: dict[str, Any] = {"secret": _secret(timedelta(hours=1)), "failure": None, "runners": None}

    def at(ready: int, old: dict[str, Any]) -> dict[str, Any]:
        pods = status.PodCounts(desired=3, active=3, ready=ready, updated=3)
        return status.desired_status(STAMP, pool, old=old, pods=pods, **inputs)

    one = at(1, {})
    two = at(2, one)
    ready = at(3, two)
    assert two != one and not status.notable(one, two)
    assert status.notable(two, ready)


def test_an_unchanged_state_gives_an_identical_status_later() -> None:
    inputs: dict[str, Any] = {"secret": _secret(timedelta(hours=1)), "pods": None, "failure": None}
    first = status.desired_status(STAMP, POOL, old={}, runners=None, **inputs)
    later = conditions.Stamp(generation=3, now=NOW + timedelta(minutes=5))
    again = status.desired_status(later, POOL, old=first, runners=None, **inputs)
    assert again == first, "transition times stay put while statuses do not change"


def _types(result: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["reason"] for c in result["conditions"]}


def test_a_pool_that_stops_following_demand_loses_its_demand_conditions() -> None:
    scaling = {"maxReplicas": 3, "webhookSecretRef": {"name": "hooks"}}
    blind = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"organization": "octo", "autoscaling": scaling},
        }
    )
    inputs: dict[str, Any] = {
        "secret": _secret(timedelta(hours=1)),
        "pods": None,
        "failure": None,
        "runners": None,
    }
    missing = WebhookSecretProblem(Reason.SECRET_NOT_USABLE, "Secret ns/hooks not found", "create it")
    following = status.desired_status(STAMP, blind, old={}, webhook_secret_problem=missing, **inputs)
    assert {k: v for k, v in _types(following).items() if k in ("DemandVisible", "WebhookSecretReady")} == {
        "DemandVisible": "NoDemandSource",
        "WebhookSecretReady": "SecretNotUsable",
    }
    fixed = status.desired_status(STAMP, POOL, old=following, **inputs)
    assert set(_types(fixed)) == {"Ready", "TokenReady"}


def test_a_pool_with_its_own_webhook_secret_says_where_its_deliveries_go() -> None:
    scaling = {"maxReplicas": 3, "webhookSecretRef": {"name": "hooks"}}
    pool = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"repository": "octo/app", "autoscaling": scaling},
        }
    )
    result = status.desired_status(
        STAMP, pool, old={}, secret=_secret(timedelta(hours=1)), pods=None, failure=None, runners=None
    )
    ready = next(c for c in result["conditions"] if c["type"] == "WebhookSecretReady")
    assert ready["status"] == "True" and ready["message"].endswith("/webhook/ns/hooks")


def test_an_organization_pool_sees_demand_once_a_delivery_arrived_or_it_polls() -> None:
    def pool(scaling: dict[str, Any], demand: dict[str, Any] | None = None) -> api.RunnerPool:
        return api.RunnerPool.model_validate(
            {
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"organization": "octo", "autoscaling": {"maxReplicas": 3, **scaling}},
                "status": {"demand": demand} if demand else {},
            }
        )

    assert status.demand_blind(pool({}))
    assert status.demand_blind(pool({}, {"queued": 0}))
    assert status.demand_blind(pool({"minReplicas": 2})), "above minReplicas it never scales either"
    assert not status.demand_blind(pool({}, {"firstDeliveryAt": "2026-11-29T11:00:00Z"}))
    assert not status.demand_blind(pool({"repositories": ["app"]}))


def test_a_refused_poll_is_demand_out_of_sight_unless_deliveries_come() -> None:
    """A credential without Actions read access: every poll a 403 in the log, and DemandVisible
    said RepositoryPolled while the pool never scaled."""
    refused = {"reason": "BadCredentials", "message": "GitHub refuses to list the workflow runs of o/r"}

    def condition(demand: dict[str, Any]) -> dict[str, Any]:
        pool = api.RunnerPool.model_validate(
            {
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"repository": "o/r", "autoscaling": {"maxReplicas": 3, "minReplicas": 1}},
                "status": {"demand": demand},
            }
        )
        return status.demand_visible_condition(STAMP, pool)

    blind = condition({"pollProblem": refused})
    assert (blind["status"], blind["reason"]) == ("False", "PollRefused")
    assert blind["message"] == (
        "GitHub refuses to list the workflow runs of o/r; no webhook delivery has reached the pool "
        "either, so it stays at 1 runner(s)"
    )
    delivered = condition({"pollProblem": refused, "firstDeliveryAt": "2026-11-29T11:00:00Z"})
    assert (delivered["status"], delivered["reason"]) == ("True", "WebhookDelivering")
    assert delivered["message"].endswith("is refused: GitHub refuses to list the workflow runs of o/r")
    assert condition({})["reason"] == "RepositoryPolled"
    unpolled = api.RunnerPool.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"organization": "octo", "autoscaling": {"maxReplicas": 3}},
            "status": {"demand": {"pollProblem": refused, "firstDeliveryAt": "2026-11-29T11:00:00Z"}},
        }
    )
    visible = status.demand_visible_condition(STAMP, unpolled)
    assert (visible["reason"], visible["message"]) == (
        "WebhookDelivering",
        "webhook deliveries for octo reach the operator",
    ), "a refusal left from repositories it no longer lists says nothing of a pool that polls none"


def test_a_scale_set_pool_says_whether_its_session_is_held_and_why_not() -> None:
    """DemandVisible of a scale set comes from its listener's status.scaleSet: pending until the
    scale set exists, the listener's own reason and words while it is stuck, listening after."""

    def condition(scale_set: dict[str, Any] | None) -> dict[str, Any]:
        pool = api.RunnerPool.model_validate(
            {
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {
                    "organization": "octo",
                    "autoscaling": {"maxReplicas": 3},
                    "scaleSet": {"name": "arc"},
                },
                "status": {"scaleSet": scale_set} if scale_set else {},
            }
        )
        assert not status.demand_blind(pool), "a scale set needs no webhook and no repositories"
        return status.demand_visible_condition(STAMP, pool)

    pending = condition(None)
    assert (pending["status"], pending["reason"]) == ("False", "ScaleSetPending")
    held = {"id": 4, "problem": {"reason": "ScaleSetSessionHeld", "message": "another listener holds it"}}
    stuck = condition(held)
    assert (stuck["status"], stuck["message"]) == ("False", "another listener holds it")
    listening = condition({"id": 4, "assignedJobs": 2})
    assert (listening["status"], listening["reason"]) == ("True", "ScaleSetListening")
    assert "runner scale set arc (id 4)" in listening["message"]
    dropped = condition({"id": 4, "droppedLabels": ["gpu"]})
    assert (dropped["status"], dropped["reason"]) == ("True", "ScaleSetLabelsDropped")
    assert "did not keep its label(s) gpu" in dropped["message"] and "runs-on: arc" in dropped["message"]


# -- refused: a pool that cannot make runners (the demand side ranks it last) ---------------------


def _stored(*stored: tuple[str, str, str]) -> api.RunnerPool:
    """A pool whose status holds the conditions ``(type, status, reason)``."""
    listed = [{"type": type_, "status": state, "reason": reason} for type_, state, reason in stored]
    return POOL.model_copy(update={"status": api.RunnerPoolStatus.model_validate({"conditions": listed})})


@pytest.mark.parametrize(
    "stored",
    [
        [("Ready", "False", "RunnerGroupNotFound"), ("RunnerGroupReady", "False", "RunnerGroupNotFound")],
        [("Ready", "False", "NamespaceNotEnabled"), ("NamespaceEnabled", "False", "NamespaceNotEnabled")],
        [("Ready", "False", "ScopeNotAllowed")],
        [("Ready", "False", "BadCredentials")],
        [("Ready", "False", "ChildNotOwned")],
        # No runner group, so no gate asks GitHub: the token's failure says the credential is refused.
        [("Ready", "False", "TokenNotReady"), ("TokenReady", "False", "ScopeNotFound")],
    ],
)
def test_a_pool_its_gates_or_credential_refuse_runners_is_refused(stored: list[tuple[str, str, str]]) -> None:
    assert status.refused(_stored(*stored))


@pytest.mark.parametrize(
    "stored",
    [
        [],  # never reconciled yet
        [("Ready", "False", "TokenNotReady"), ("TokenReady", "False", "WaitingForToken")],
        [("Ready", "False", "RunnersStarting"), ("TokenReady", "True", "TokenIssued")],
        [("Ready", "True", "RunnersReady"), ("TokenReady", "True", "RefreshFailing")],
        [("Ready", "False", "PodCreateFailed")],  # the cluster, not GitHub: it may pass any moment
        [("Ready", "True", "RunnersReady"), ("RunnerGroupReady", "True", "RunnerGroupFound")],
    ],
)
def test_a_pool_on_its_way_up_is_not_refused(stored: list[tuple[str, str, str]]) -> None:
    assert not status.refused(_stored(*stored))


def _subclasses(kind: type[GitHubError]) -> list[type[GitHubError]]:
    return [kind, *(sub for direct in kind.__subclasses__() for sub in _subclasses(direct))]


def test_every_reason_a_gate_closes_with_counts_as_refused() -> None:
    """``status.REFUSALS`` is a list kept by hand: a gate (or a GitHub failure one passes on) with
    a reason missing from it would leave a pool that cannot make runners counting jobs."""
    stamp = conditions.Stamp(generation=1, now=NOW)
    pool = POOL.model_copy(update={"metadata": {"name": "p", "namespace": "team-b"}})
    closed = [
        gates.ScopeGate(AllowList.of([parse_allow_rule("team-a=org:octo")])).check(pool, stamp),
        gates.GitHubHostGate(GitHubHosts.of([], "https://api.github.com"), lambda _: "https://x.test").check(
            pool, stamp
        ),
    ]
    reasons = {verdict.condition["reason"] for verdict in closed if verdict is not None}
    assert len(reasons) == 2
    failures = {error.default_reason for error in _subclasses(GitHubError)}
    assert {RunnerGroupNotFound.default_reason, RepositoryNotAllowed.default_reason} <= failures
    # One pod's fill failing (a busy runner left over with its name), not the pool: its other
    # pods still get runners.
    of_one_pod = {Reason.JIT_RUNNER_NAME_IN_USE}
    # Only a deleted pool's finalizer meets them (its scale set's listener still ending, another
    # deleted pool naming its scale set not gone): no gate and no token passes them on.
    of_a_deletion = {ListenerStillRunning.default_reason, ScaleSetStillUsed.default_reason}
    assert of_one_pod | of_a_deletion <= failures, (
        "the list of GitHub failures is the same whichever test ran first"
    )
    assert (reasons | failures) - of_one_pod - of_a_deletion <= status.REFUSALS
