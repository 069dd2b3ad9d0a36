"""``kubectl runnerpool`` about pools the real operator runs, or is stuck on.

The operator runs as a process under deploy/'s RBAC (the e2e conftest) and the simulator
plays the runner pods, so what the plugin prints is what the operator wrote: its status,
conditions and Events, and the runners the pods registered on the fake GitHub.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client

from runnerpool import naming
from tests.e2e.conftest import StartOperator
from tests.e2e.runners import GOOD_PAT, REPO, events, get_pool, issued_secrets, wait_condition
from tests.helpers import wait_for
from tests.kubectl_plugin import Plugin
from tests.pools import create_pool, pool_manifest
from testworld.envtest.controlplane import ControlPlane
from testworld.fakegithub import FakeGitHub
from testworld.simulator import RunnerSimulator

FAST = ("--runner-sync-interval", "1")


def _plugin(control_plane: ControlPlane, namespace: str, fake_github: FakeGitHub) -> Plugin:
    return Plugin(control_plane.kubeconfig, namespace, fake_github.url)


def _runners_counted(api_client: client.ApiClient, namespace: str, name: str, busy: int) -> dict[str, Any]:
    def counted() -> dict[str, Any] | None:
        pool = get_pool(api_client, namespace, name) or {}
        return pool if ((pool.get("status") or {}).get("runners") or {}).get("busy") == busy else None

    return wait_for(counted, message=f"status.runners.busy of {name} to be {busy}")


def test_list_runners_and_why_show_what_the_operator_and_github_see(
    *,
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    credentials: str,
    start_operator: StartOperator,
    simulator: RunnerSimulator,
) -> None:
    start_operator(*FAST)
    create_pool(api_client, namespace, pool_manifest("ci", repo=REPO, replicas=2))
    assert simulator.wait(lambda s: len(s.registrations(namespace, "ci")) == 2), simulator.rejections
    wait_condition(api_client, namespace, "ci", "Ready", "True", reason="RunnersReady")
    pods = sorted(r.pod for r in simulator.registrations(namespace, "ci"))
    fake_github.set_runner(REPO, pods[0], busy=True)
    _runners_counted(api_client, namespace, "ci", busy=1)
    plugin = _plugin(control_plane, namespace, fake_github)

    listed = plugin("list")
    assert listed.code == 0, listed.err
    [header, row] = listed.rows()
    assert header == ["NAME", "SCOPE", "DESIRED", "READY", "BUSY", "QUEUED", "TOKEN EXPIRES", "STATUS"]
    assert row[:6] == ["ci", f"repo:{REPO}", "2", "2", "1", "<none>"]
    assert re.fullmatch(r"in 5\dm", row[6]), f"a token of an hour, just issued: {row}"
    assert row[7] == "Ready (RunnersReady)"

    shown = plugin("runners", "ci")
    assert shown.code == 0, shown.err
    assert [r[0] for r in shown.rows()[1:]] == pods, "every pod's runner, by name"
    assert [(r[2], r[3], r[4], r[5]) for r in shown.rows()[1:]] == [
        ("online", "true", pods[0], "Running"),
        ("online", "false", pods[1], "Running"),
    ]

    explained = plugin("why", "ci")
    assert explained.code == 0, explained.err
    assert explained.out.splitlines()[1] == "Nothing: the pool is ready (2/2 runner pods ready)."
    errors = explained.out[explained.out.index("Last errors:") :].splitlines()[1:]
    # The simulator plays pods that no node runs (none, or only the test node, which these pods do
    # not tolerate): the scheduler's complaints are the only errors.
    assert errors, "the scheduler's Warning Events and the pods' PodScheduled condition"
    unschedulable = ("no nodes available to schedule pods", "untolerated taint")
    assert all(any(why in line for why in unschedulable) for line in errors), errors
    leaked = [s[:6] for s in issued_secrets(fake_github) if s in listed.both + shown.both + explained.both]
    assert not leaked, f"credentials or registration tokens in the plugin's output: {leaked}"


def test_why_says_the_pool_waits_for_its_first_token(
    *,
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    credentials: str,
    start_operator: StartOperator,
) -> None:
    """GitHub does not answer the token request (yet): the operator waits, and ``why`` says for what."""
    fake_github.hang_next(5, max_seconds=60, method="POST", path="registration-token")
    start_operator()
    create_pool(api_client, namespace, pool_manifest("slow", repo=REPO, replicas=1))
    wait_condition(api_client, namespace, "slow", "TokenReady", "False", reason="WaitingForToken")

    explained = _plugin(control_plane, namespace, fake_github)("why", "slow")
    assert explained.code == 0, explained.err
    lines = explained.out.splitlines()
    assert lines[0] == f"RunnerPool {namespace}/slow (repo:{REPO})"
    assert lines[1] == (
        "Waiting for a registration token: the operator's secret updater has not yet put one into Secret "
        f"{naming.token_secret_name('slow')}; if this lasts, check that the operator runs and reaches GitHub."
    )
    conditions = [line.split()[:3] for line in lines[lines.index("Conditions:") + 2 :][:3]]
    assert conditions == [
        ["NamespaceEnabled", "True", "NamespaceEnabled"],
        ["Ready", "False", "TokenNotReady"],
        ["TokenReady", "False", "WaitingForToken"],
    ]
    # Let the hung request go: the operator's stop would otherwise wait for its read timeouts.
    fake_github.clear_faults()
    wait_condition(api_client, namespace, "slow", "TokenReady", "True")


def test_why_names_the_missing_credential_secret_and_then_the_next_wait(
    *,
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    start_operator: StartOperator,
) -> None:
    start_operator()
    create_pool(api_client, namespace, pool_manifest("nocred", repo=REPO, replicas=1))
    wait_condition(api_client, namespace, "nocred", "TokenReady", "False", reason="CredentialSecretMissing")
    wait_for(
        lambda: any(
            reason == "CredentialSecretMissing" for _, reason, _ in events(api_client, namespace, "nocred")
        ),
        message="the operator's Warning Event",
    )
    plugin = _plugin(control_plane, namespace, fake_github)

    explained = plugin("why", "nocred")
    assert explained.code == 0, explained.err
    secret = f"{namespace}/{naming.DEFAULT_CREDENTIAL_SECRET}"
    assert explained.out.splitlines()[1] == (
        f"Waiting for the credential Secret {secret} (spec.credentialSecretName): create it with key "
        "'token' (a personal access token) or the GitHub App keys ('app-id', ...); "
        "the operator retries by itself."
    )
    errors = explained.out[explained.out.index("Last errors:") :]
    assert "condition TokenReady: CredentialSecretMissing:" in errors
    assert "runnerpool/nocred: CredentialSecretMissing:" in errors, "the operator's Warning Event"

    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": GOOD_PAT}},
    )
    wait_condition(api_client, namespace, "nocred", "Ready", "False", reason="RunnersStarting")
    later = plugin("why", "nocred")
    assert later.out.splitlines()[1] == (
        "Waiting for runner pods to become ready: 0/1 runner pods ready (RunnersStarting)."
    )
    assert GOOD_PAT not in explained.both + later.both
