"""A pool's life with the operator as its own process: converge, report, delete.

The first test runs real runner pods on the test node: each registers on the fake GitHub
with the token the operator put into the pool's Secret (the fake accepts only tokens it
issued, for that scope, before they expire).  The others, where only the operator's side
matters, let the runner simulator play the pods.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from runnerpool import api, naming
from tests.e2e.conftest import node_pool
from tests.e2e.runners import (
    REPO,
    condition,
    events,
    get_pool,
    managed_children,
    pool_runners,
    token_of,
    wait_condition,
    wait_gone,
    wait_token,
)
from tests.helpers import wait_for
from tests.pools import create_pool, pool_manifest
from testworld.fakegithub import FakeGitHub
from testworld.simulator import OperatorProcess, RunnerSimulator

pytestmark = pytest.mark.usefixtures("credentials")
#: Real pods: the image is local, but containers start and register in a few seconds each.
NODE_TIMEOUT = 90.0


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_pool_converges_with_a_token_the_runners_can_use(
    api_client: client.ApiClient, namespace: str, fake_github: FakeGitHub, node_operator: OperatorProcess
) -> None:
    operator = node_operator
    create_pool(api_client, namespace, node_pool("web", replicas=2))

    secret = wait_token(api_client, namespace, "web")
    token = token_of(secret)
    expiry = _parse_time(secret["metadata"]["annotations"][naming.TOKEN_EXPIRY_ANNOTATION])
    assert expiry > datetime.now(UTC)
    assert token in {t.token for t in fake_github.tokens_issued(REPO)}

    # The token's arrival is what lets the reconciler create the runner pods: they follow.
    created = wait_for(
        lambda: client.CoreV1Api(api_client).list_namespaced_pod(namespace).items,
        message="the runner pods",
    )
    owner = created[0].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("RunnerPool", "web", True)
    volumes = {v.name: v for v in created[0].spec.volumes}
    assert volumes["runner-token"].secret.secret_name == naming.token_secret_name("web")

    # Both pods registered with the delivered token: the fake accepted it.
    runners = wait_for(
        lambda: (found := pool_runners(fake_github, REPO, namespace, "web")) and len(found) == 2 and found,
        NODE_TIMEOUT,
        message="both runner pods to register",
    )
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"{naming.POOL_LABEL}=web"
    )
    assert sorted(r["name"] for r in runners) == sorted(p.metadata.name for p in pods.items)
    assert fake_github.token_uses(token) == 2

    pool = wait_condition(
        api_client, namespace, "web", "Ready", "True", reason="RunnersReady", timeout=NODE_TIMEOUT
    )
    assert pool["status"]["readyReplicas"] == 2
    token_ready = condition(pool, "TokenReady")
    assert token_ready is not None
    assert (token_ready["status"], token_ready["reason"]) == ("True", "TokenIssued")
    assert _parse_time(pool["status"]["tokenExpiresAt"]) == expiry
    # Its normal start (token, pods, ready) is in the conditions and costs no Event.
    assert events(api_client, namespace, "web") == []
    assert len(client.CoreV1Api(api_client).list_namespaced_pod(namespace).items) == 2, "no extra create"

    log = operator.log_text()
    assert '"msg": "reconciled pool"' in log  # the JSON log is there and was searched
    assert token not in log


def test_metrics_and_probes_after_a_pool_converges(
    api_client: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    simulator: RunnerSimulator,
) -> None:
    create_pool(api_client, namespace, pool_manifest("metered", repo=REPO, replicas=1))
    pool = wait_condition(api_client, namespace, "metered", "Ready", "True")

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(operator.metrics())
        for s in family.samples
    }

    def value(metric: str, /, **labels: str) -> float:
        return samples.get((metric, tuple(sorted(labels.items()))), -1.0)

    # Passes that ended in success or in a requeue (waiting for the token, the pod): how many
    # of each depends on how the pod's events fold into passes (--pass-spacing).
    passes = sum(max(value("runnerpool_reconcile_total", result=r), 0) for r in ("success", "requeue"))
    assert passes >= 2
    assert value("runnerpool_reconcile_total", result="success") >= 1
    assert value("runnerpool_reconcile_duration_seconds_count") >= passes
    assert value("runnerpool_workqueue_adds_total", name="runnerpool") >= 2
    # Only that it is exported: a late event (the Deployment's status settling) may be queued.
    assert value("runnerpool_workqueue_depth", name="runnerpool") >= 0
    assert value("runnerpool_token_fills_total", namespace=namespace, pool="metered") == 1
    expiry = _parse_time(pool["status"]["tokenExpiresAt"]).timestamp()
    # The Secret's annotation is truncated to whole seconds; the gauge is not.
    assert (
        0
        <= value("runnerpool_token_expiry_timestamp_seconds", namespace=namespace, pool="metered") - expiry
        < 1
    )
    assert operator.probe("/healthz") == 200
    assert operator.probe("/readyz") == 200


@pytest.mark.usefixtures("gc_follows_pools")
def test_delete_deregisters_only_the_pools_runners(
    api_client: client.ApiClient,
    namespace: str,
    fake_github: FakeGitHub,
    operator: OperatorProcess,
    simulator: RunnerSimulator,
) -> None:
    create_pool(api_client, namespace, pool_manifest("doomed", repo=REPO, replicas=2))
    create_pool(api_client, namespace, pool_manifest("kept", repo=REPO, replicas=1))
    # A runner nobody in this namespace owns, e.g. a pool of another cluster.
    outsider = fake_github.register_runner(REPO, "elsewhere-1", ["other-cluster/pool"])
    for name in ("doomed", "kept"):
        wait_condition(api_client, namespace, name, "Ready", "True")
    assert len(pool_runners(fake_github, REPO, namespace, "doomed")) == 2

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "doomed"
    )
    wait_gone(api_client, namespace, "doomed")
    # Checked without waiting: the finalizer may only go once every runner is deregistered.
    assert pool_runners(fake_github, REPO, namespace, "doomed") == []
    assert fake_github.count("actions/delete-self-hosted-runner-from-repo", status=204) == 2
    assert fake_github.runner(REPO, outsider)["name"] == "elsewhere-1"
    assert len(pool_runners(fake_github, REPO, namespace, "kept")) == 1
    assert ("Normal", "DeregisteredRunners", "deregistered 2 runner(s)") in events(
        api_client, namespace, "doomed"
    )

    wait_for(
        lambda: "doomed" not in managed_children(api_client, namespace),
        message="the deleted pool's Secret, budget and pods to be gone",
    )
    assert managed_children(api_client, namespace) == {
        "kept": {"Secret", "Pod"},
        "*": {"PodDisruptionBudget"},
    }
    kept = get_pool(api_client, namespace, "kept")
    assert kept is not None and naming.POOL_FINALIZER in kept["metadata"]["finalizers"]
    assert condition(kept, "Ready") == condition(
        wait_condition(api_client, namespace, "kept", "Ready", "True"), "Ready"
    )


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_an_operator_dies_with_the_process_that_started_it(
    operator_credentials: Path, namespace: str, tmp_path: Path
) -> None:
    """A test process killed hard must not leave its operator running against nothing."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from testworld.simulator import OperatorProcess\n"
        f"op = OperatorProcess(Path({str(operator_credentials)!r}), 'http://127.0.0.1:9/api/v3',\n"
        f"    Path({str(tmp_path / 'operator.log')!r}), namespaces=[{namespace!r}]).start()\n"
        "op.wait_ready()\n"
        "print(op.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    starter = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    assert starter.stdout is not None
    pid = int(starter.stdout.readline())
    try:
        assert not _gone(pid)
        starter.kill()
        starter.wait()
        wait_for(lambda: _gone(pid), 10.0, 0.05, f"operator {pid} to die with its starter")
    finally:
        starter.kill()
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
