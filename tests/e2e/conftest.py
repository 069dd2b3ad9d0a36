"""The operator as a separate process against the real control plane and the fake GitHub.

Each test gets a fresh namespace, its own fake GitHub and its own operator, started from the
console script with ``--namespace`` so that a slow namespace deletion left by an earlier test
can never reach it.  Where a pod matters, a test asks for ``node_operator`` and makes its
pools with ``node_pool``: real runner pods on the test node then register with the token
the operator mounts; elsewhere the runner simulator plays the pods.  Teardown is part of
the test: the operator must exit 0 on SIGTERM, and no registration token or PAT may appear
anywhere in its log.  The operator logs in as deploy/'s ServiceAccount
(``operator_kubeconfig``), never as admin, and a test fails if RBAC refused it anything (the
API server's audit log says), so a verb the operator needs and deploy/rbac lacks is a
failing test, not a surprise on a user's cluster.  A failing test gets the tail of the
operator's log attached to its report, and so do the runner stand-ins' requests to the fake
GitHub.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from runnerpool import api, naming
from tests.e2e.runners import GOOD_PAT, ORG, OTHER_REPO, REPO, issued_secrets
from tests.pools import create_pool, pool_manifest
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    OPERATOR_USER,
    RECEIVER_USER,
    operator_kubeconfig,
    receiver_kubeconfig,
    refusals,
)
from testworld.fakegithub import FakeGitHub
from testworld.node import seal
from testworld.node.node import NODE_TOLERATION, Node
from testworld.simulator import OperatorProcess, RunnerSimulator
from testworld.wait import poll_until

OPERATORS = pytest.StashKey[list[OperatorProcess]]()
LOG_TAIL_LINES = 80
GC_TIMEOUT = 90.0

StartOperator = Callable[..., OperatorProcess]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.failed:
        for operator in item.stash.get(OPERATORS, []):
            report.sections.append(
                (
                    f"operator log ({operator.log_path}, last {LOG_TAIL_LINES} lines)",
                    operator.log_tail(LOG_TAIL_LINES),
                )
            )
        fake = item.funcargs.get("fake_github") if isinstance(item, pytest.Function) else None
        if isinstance(fake, FakeGitHub) and fake.listener_requests:
            report.sections.append(
                (f"runner stand-ins' requests (last {LOG_TAIL_LINES})", _listener_log(fake, LOG_TAIL_LINES))
            )
    return report


def _listener_log(fake: FakeGitHub, lines: int) -> str:
    """What each runner in a pod asked the fake and when: a busy pod that went quiet shows here."""
    return "\n".join(
        f"{time.strftime('%H:%M:%S', time.gmtime(r.started))}+{r.finished - r.started:5.1f}s "
        f"{r.status} {r.method} {r.path} ({r.runner or '?'})"
        for r in fake.listener_requests[-lines:]
    )


class _GcProbe(threading.Thread):
    """Proves that the garbage collector deletes what a deleted RunnerPool owned.

    The controller manager's garbage collector learns about new resource types on its
    discovery resync (every 30 s), so right after the CRD is installed a deleted pool's
    Secret can outlive it by that long.  The probe starts with the first e2e test and runs
    in the background; only tests that assert garbage collection wait for it.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(name="gc-probe", daemon=True)
        self._api = api_client
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._probe()
        except BaseException as err:  # reported by the fixture that joins
            self.error = err

    def _probe(self) -> None:
        core = client.CoreV1Api(self._api)
        namespace = f"gc-probe-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            # No operator watches this namespace, so the pool gets no finalizer.
            owner = create_pool(self._api, namespace, pool_manifest("probe", repo=REPO))
            ref = {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "name": "probe",
                "uid": owner["metadata"]["uid"],
            }
            core.create_namespaced_config_map(
                namespace, {"metadata": {"name": "owned", "ownerReferences": [ref]}}
            )
            client.CustomObjectsApi(self._api).delete_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PLURAL, "probe"
            )
            if not poll_until(
                lambda: (
                    not core.list_namespaced_config_map(namespace, field_selector="metadata.name=owned").items
                ),
                timeout=GC_TIMEOUT,
                interval=0.2,
            ):
                raise TimeoutError(f"the garbage collector did not follow a RunnerPool within {GC_TIMEOUT}s")
        finally:
            core.delete_namespace(namespace)


@pytest.fixture(scope="session", autouse=True)
def _gc_probe(api_client: client.ApiClient, runnerpool_crd: dict[str, Any]) -> _GcProbe:
    probe = _GcProbe(api_client)
    probe.start()
    return probe


@pytest.fixture
def gc_follows_pools(_gc_probe: _GcProbe) -> None:
    """For tests that assert a deleted pool's Secret, budget and pods are gone."""
    _gc_probe.join(GC_TIMEOUT + 10)
    if _gc_probe.error is not None:
        raise _gc_probe.error
    assert not _gc_probe.is_alive(), "garbage collector probe still running"


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """Knows the e2e scopes and accepts only ``GOOD_PAT``, so a wrong PAT gets a real 401.

    Inside the sealed world it listens on the node's bridge address, where runner pods reach
    it, and under ``/api/v3`` as GitHub Enterprise Server does: the stand-in config.sh, like
    the real one, derives that API from the web URL of any host but github.com.
    """
    host = seal.NODE_IP if seal.is_sealed() else "127.0.0.1"
    with FakeGitHub(
        host=host, api_prefix="/api/v3", scopes=[REPO, OTHER_REPO, ORG], tokens=[GOOD_PAT]
    ) as fake:
        yield fake


@pytest.fixture
def credentials(api_client: client.ApiClient, namespace: str) -> str:
    """The default credential Secret, with the PAT the fake accepts."""
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": GOOD_PAT}},
    )
    return naming.DEFAULT_CREDENTIAL_SECRET


@pytest.fixture
def operator_credentials(control_plane: ControlPlane) -> Path:
    """deploy/rbac applied, and a kubeconfig with a token of its ``runnerpool-operator`` account
    (checked for each test: an earlier test's uninstall may have deleted the account)."""
    return operator_kubeconfig(control_plane)


@pytest.fixture
def start_operator(
    *,
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    runnerpool_crd: dict[str, Any],
    namespace: str,
    fake_github: FakeGitHub,
    operator_credentials: Path,
    tmp_path: Path,
) -> Iterator[StartOperator]:
    """Start the operator (extra flags as arguments) and wait until its caches are synced."""
    started: list[OperatorProcess] = []
    request.node.stash[OPERATORS] = started
    audit_from = audit.end_of_complete_events(control_plane.audit_log)
    users: set[str] = set()

    def start(
        *extra_args: str,
        webhook_port: int = 0,
        kubeconfig: Path | None = None,
        user: str | None = None,
        component: str = "operator",
    ) -> OperatorProcess:
        """``kubeconfig`` and its ``user``: another identity than deploy/'s (namespace-scoped
        mode's); the refusal check covers it too. ``component="webhook-receiver"``: the
        receiver, logged in as its own deploy/ account."""
        receiver = component == "webhook-receiver"
        if kubeconfig is None and receiver:
            kubeconfig = receiver_kubeconfig(control_plane)
        user = user or (RECEIVER_USER if receiver else OPERATOR_USER)
        operator = OperatorProcess(
            kubeconfig or operator_credentials,
            fake_github.url,
            tmp_path / f"operator-{len(started)}.log",
            namespaces=[namespace],
            extra_args=extra_args,
            component=component,
            webhook_port=webhook_port,
        )
        users.add(user)
        started.append(operator)
        operator.start().wait_ready()
        return operator

    yield start
    for operator in started:
        code = operator.stop()
        assert code == 0, f"operator exited with {code} on SIGTERM:\n{operator.log_tail()}"
    leaked = [
        (operator.log_path.name, secret[:6] + "…")
        for operator in started
        for secret in issued_secrets(fake_github)
        if secret in operator.log_text()
    ]
    assert not leaked, f"credentials or registration tokens in the operator log: {leaked}"
    refused = [r for user in sorted(users) for r in refusals(control_plane, user, audit_from)]
    assert not refused, f"deploy/rbac lacks a permission the operator used: {sorted(set(refused))}"


@pytest.fixture
def operator(start_operator: StartOperator) -> OperatorProcess:
    return start_operator()


#: How often node tests' operators list runners (default 60 s, to spare the GitHub budget):
#: a finished or stopped runner pod is noticed on the next listing.
NODE_RUNNER_SYNC_SECONDS = "5"


@pytest.fixture
def node_operator(start_operator: StartOperator, node: Node) -> OperatorProcess:
    """The operator process; pools that name no image get the node's runner test image."""
    return start_operator(
        "--runner-image", node.runner_image.reference, "--runner-sync-interval", NODE_RUNNER_SYNC_SECONDS
    )


def node_pool(name: str, *, replicas: int = 1, repo: str = REPO, **spec: Any) -> dict[str, Any]:
    """A repository pool whose pods may run on the (tainted) test node."""
    return pool_manifest(name, repo=repo, replicas=replicas, tolerations=[NODE_TOLERATION], **spec)


@pytest.fixture
def simulator(
    api_client: client.ApiClient, fake_github: FakeGitHub, namespace: str
) -> Iterator[RunnerSimulator]:
    with RunnerSimulator(api_client, fake_github, namespace) as sim:
        yield sim
