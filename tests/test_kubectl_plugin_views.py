"""The plugin's pure rules: kubectl's ages, and the one sentence ``why`` derives from conditions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runnerpool.plugin.cluster import Login, connect
from runnerpool.plugin.errors import PluginError
from runnerpool.plugin.output import human_duration
from runnerpool.plugin.views import waiting_for


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600 + 1200, "3h20m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (120 * 86400, "120d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_ages_read_like_kubectl(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def _pool(*conditions: tuple[str, str, str, str], deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "ci", "namespace": "team", "generation": 1}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {
        "metadata": meta,
        "spec": {"repository": "octo/hello"},
        "status": {
            "observedGeneration": 1,
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
            **status,
        },
    }


SECRET = "team/runnerpool-github-cred"
TOKEN_OK = ("TokenReady", "True", "TokenIssued", "registration token valid")
READY = ("Ready", "True", "RunnersReady", "2/2 runner pods ready")


def test_a_deletion_waits_for_busy_runners() -> None:
    pool = _pool(
        TOKEN_OK,
        READY,
        (
            "RunnersDeregistered",
            "False",
            "RunnersBusy",
            "1 runner(s) still running a job; deleting when done",
        ),
        deleting=True,
    )
    assert waiting_for(pool) == (
        "Waiting for busy runners to finish their jobs before the pool can go: 1 runner(s) still running a "
        "job; deleting when done (busy runners are never killed)."
    )


def test_a_deletion_waits_for_pods_stuck_terminating_on_a_lost_node() -> None:
    message = "no runner of this pool is registered; pod(s) ci-abcde on node n1 are still Terminating ..."
    pool = _pool(
        TOKEN_OK, READY, ("RunnersDeregistered", "True", "RunnerPodsStuckTerminating", message), deleting=True
    )
    assert waiting_for(pool) == f"Waiting for pods stuck Terminating (a lost node?): {message}."


def test_a_pool_never_reconciled_points_at_the_operator() -> None:
    assert waiting_for({"metadata": {"name": "ci", "namespace": "team"}, "spec": {}}).startswith(
        "Waiting for the operator to reconcile the pool for the first time: is it running, and does it watch "
        "namespace team?"
    )


def test_a_new_spec_not_yet_acted_on() -> None:
    pool = _pool(TOKEN_OK, READY)
    pool["metadata"]["generation"] = 3
    assert (
        waiting_for(pool)
        == "Waiting for the operator to act on the latest spec (generation 3, it last acted on 1)."
    )


@pytest.mark.parametrize(
    ("reason", "message", "sentence"),
    [
        (
            "BadCredentials",
            "HTTP 401",
            f"Waiting for a credential GitHub accepts in Secret {SECRET} (GitHub answered: HTTP 401).",
        ),
        (
            "CredentialSecretMalformed",
            "add key 'token'",
            f"Waiting for a usable credential in Secret {SECRET}: add key 'token'.",
        ),
        (
            "RateLimited",
            "HTTP 403",
            f"Waiting for the GitHub rate limit of the credential in Secret {SECRET} to reset: HTTP 403.",
        ),
        (
            "TokenSecretPatchFailed",
            "conflict",
            "Waiting for a registration token: TokenSecretPatchFailed: conflict.",
        ),
    ],
)
def test_token_failures_name_what_to_fix(reason: str, message: str, sentence: str) -> None:
    pool = _pool(("TokenReady", "False", reason, message), ("Ready", "False", "TokenNotReady", "no token"))
    assert waiting_for(pool) == sentence


def test_a_namespace_not_enabled_says_the_line_to_run() -> None:
    line = (
        "kubectl create rolebinding runnerpool-operator -n team-a --clusterrole=runnerpool-operator-namespace"
    )
    refused = _pool(
        ("NamespaceEnabled", "False", "NamespaceNotEnabled", f"may not create pods; to enable it: {line}"),
        ("Ready", "False", "NamespaceNotEnabled", "no runners"),
    )
    assert waiting_for(refused) == (
        "Waiting for the platform team to enable the operator here: "
        f"may not create pods; to enable it: {line}."
    )


def test_a_scale_down_hold_and_a_rollout_say_what_they_wait_for() -> None:
    held = _pool(
        TOKEN_OK,
        READY,
        ("Scaling", "True", "WaitingToScaleDown", "holding 3 for scaleDownDelay 5m (demand wants 1)"),
    )
    assert waiting_for(held) == (
        "Waiting out spec.autoscaling.scaleDownDelay before removing idle runners: holding 3 for "
        "scaleDownDelay 5m (demand wants 1)."
    )
    rolling = _pool(
        TOKEN_OK,
        (
            "Ready",
            "True",
            "RollingOut",
            "2/2 runner pods ready; 1 pod(s) of an older template are replaced once idle",
        ),
    )
    assert waiting_for(rolling).startswith(
        "Waiting for outdated runners to become idle, to replace them: 2/2"
    )
    assert waiting_for(_pool(TOKEN_OK, READY)) == "Nothing: the pool is ready (2/2 runner pods ready)."


def test_the_namespace_is_the_kubeconfig_contexts_as_kubectl_picks_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                    {"name": "b", "context": {"cluster": "c", "user": "u"}},
                ],
                "current-context": "a",
            }
        )
    )
    for login, namespace in (
        (Login(str(kubeconfig)), "team-a"),
        (Login(str(kubeconfig), context="b"), "default"),
    ):
        cluster = connect(login)
        cluster.close()
        assert cluster.namespace == namespace
    with pytest.raises(
        PluginError, match=r"^no usable kubeconfig \(.*name c.*\); pass --kubeconfig or --context$"
    ):
        connect(Login(str(kubeconfig), context="c"))
