"""The operator installed from deploy/ as pods on the real node, and what a user then sees.

One install per installer serves its tests (``installed``, parametrized by installer: the
kustomize overlay of deploy/ and the Helm chart, ``INSTALLERS``; each test names the
installers it runs on, ``on(...)``, and pytest groups a test's runs by installer, so one
install is set up, used and removed before the next): the operator's own image
(``testworld.node.operator_image``) imported into the node, two replicas with leader
election, in-cluster credentials from deploy/'s ServiceAccount and RBAC, Pod Security
``restricted`` on its namespace. The fake GitHub listens on the node's bridge and delivers
signed ``workflow_job`` webhooks through the operator's webhook Service (via the API
server's service proxy, which sends them to the Service's ready endpoints: there is no
kube-proxy here). The tests of one installer run in file order: the later ones replace the
operator's pods, Helm's last one uninstalls it. The kustomize install runs the whole suite;
the Helm install the smoke tests, then an upgrade and an uninstall
(docs/testworld-install.md).
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.hook_access import RUNNER_HOOKS_CLUSTER_ROLE
from tests.e2e.runners import GOOD_PAT, REPO, pool_runners, wait_condition
from tests.helpers import wait_for
from tests.node.conftest import node_pool
from tests.node.pods import (
    START_TIMEOUT,
    assert_alive,
    live_pods,
    pool_status,
    queue_jobs,
    registered_pods,
    wait_busy,
    wait_done,
)
from tests.pools import create_pool
from testworld.envtest import assets
from testworld.envtest.controlplane import Component, ControlPlane
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.webhooks import WebhookSender
from testworld.install.helm import RELEASE, HelmInstall
from testworld.install.kustomize import KustomizeInstall
from testworld.install.target import (
    DEPLOYMENT,
    LEASE,
    NAMESPACE,
    RECEIVER_DEPLOYMENT,
    WEBHOOK_PORT_NAME,
    WEBHOOK_SERVICE,
    Installer,
    Target,
    kubectl,
    webhook_secret,
)
from testworld.node import seal
from testworld.node.node import NODE_TOLERATION, Node
from testworld.node.operator_image import operator_image
from testworld.ports import free_port
from testworld.wait import poll_until

INSTALLERS: dict[str, Callable[[Target, Path], Installer]] = {
    "kustomize": KustomizeInstall,
    "helm": HelmInstall,
}
OPERATOR_SELECTOR = "app.kubernetes.io/name=runnerpool-operator,app.kubernetes.io/component=operator"
#: The webhook receiver's pods: the webhook Service's endpoints.
RECEIVER_SELECTOR = "app.kubernetes.io/name=runnerpool-operator,app.kubernetes.io/component=webhook-receiver"
#: Both parts, for the logs of a failed test.
PARTS_SELECTOR = "app.kubernetes.io/name=runnerpool-operator"
#: Through the API server's service proxy: to one of the Service's ready endpoints.
WEBHOOK_PATH = f"/api/v1/namespaces/{NAMESPACE}/services/{WEBHOOK_SERVICE}:{WEBHOOK_PORT_NAME}/proxy/webhook"
#: Outlasts a rolling update of both operator replicas (each Ready 5-15 s after it starts).
BUSY_JOB_SECONDS = 45.0
NAMESPACE_GONE_TIMEOUT = 120.0
LOG_TAIL_LINES = 40
#: The pod template change the Helm upgrade makes (a value the chart passes through).
UPGRADE_ANNOTATION = {"runnerpool.test/upgraded": "1"}
#: The operator deletes a namespace's busy budget on its last pool's deletion event.
BUDGET_GONE_TIMEOUT = 30.0


def on(*installers: str) -> pytest.MarkDecorator:
    """Run the test on these installers' installs (one module-scoped install each)."""
    return pytest.mark.parametrize("installed", installers, indirect=True, scope="module")


every_install = on(*INSTALLERS)


@dataclass
class Installed:
    """The installed operator and the world around it, shared by the module's tests."""

    api_client: client.ApiClient
    fake: FakeGitHub
    target: Target
    installer: Installer
    sender: WebhookSender | None = None
    namespaces: list[str] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def kubectl(self, *args: str) -> str:
        return kubectl(self.target, *args)

    def new_namespace(self) -> str:
        """A namespace the operator is enabled in, with the credential Secret the fake accepts."""
        name = f"inst-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name}})
        self.namespaces.append(name)
        self.installer.enable(name)
        self.core.create_namespaced_secret(
            name, {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": GOOD_PAT}}
        )
        return name

    def namespace_gone(self, name: str) -> bool:
        try:
            self.core.read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    def operator_pods(self, selector: str = OPERATOR_SELECTOR) -> list[Any]:
        """The operator's pods (or, with ``RECEIVER_SELECTOR``, the webhook receiver's)."""
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        return sorted((p for p in pods if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)

    def lease(self) -> Any:
        return client.CoordinationV1Api(self.api_client).read_namespaced_lease(LEASE, NAMESPACE)

    def leader_pod(self) -> str:
        """The pod holding the Lease (the operator's identity is its host name, the pod's, + ``_<id>``)."""
        holder: str = self.lease().spec.holder_identity or ""
        return holder.rsplit("_", 1)[0]

    def rolled_out(self) -> None:
        self.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=180s")

    def log_tails(self) -> str:
        tails = []
        for pod in self.core.list_namespaced_pod(NAMESPACE, label_selector=PARTS_SELECTOR).items:
            try:
                text = self.core.read_namespaced_pod_log(
                    pod.metadata.name, NAMESPACE, tail_lines=LOG_TAIL_LINES
                )
            except ApiException as err:
                text = f"(no log: {err.status} {err.reason})"
            tails.append(f"--- {pod.metadata.name} ---\n{text}")
        return "\n".join(tails)


def _kubectl_proxy(control_plane: ControlPlane, kubectl: Path, log: Path) -> tuple[Component, str]:
    """``kubectl proxy`` on loopback: the fake's deliveries reach the API server's service proxy."""
    port = free_port()
    proxy = Component(
        "kubectl-proxy",
        [str(kubectl), f"--kubeconfig={control_plane.kubeconfig}", "proxy", f"--port={port}"],
        log,
    )
    proxy.start()
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        proxy.check_alive()
        try:
            with urllib.request.urlopen(f"{url}/version", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    if not poll_until(answers, 30.0, 0.1):
        proxy.stop()
        raise proxy.fail("did not answer")
    return proxy, url


@pytest.fixture(scope="module")
def install_fake() -> Iterator[FakeGitHub]:
    """The fake GitHub on the node's bridge, where the operator's pods and runner pods reach it."""
    with FakeGitHub(host=seal.NODE_IP, api_prefix="/api/v3", scopes=[REPO], tokens=[GOOD_PAT]) as fake:
        yield fake


@pytest.fixture(scope="module")
def installed(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    node: Node,
    runnerpool_crd: dict[str, Any],
    api_client: client.ApiClient,
    install_fake: FakeGitHub,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Installed]:
    """The install step: the operator's image into the node, then the installer's ``install``."""
    assert control_plane.pod_address, "the API server does not listen where pods reach it (not sealed?)"
    started = time.monotonic()
    image = operator_image()
    node.import_image(image)
    print(f"operator image {image.reference} ready and imported in {time.monotonic() - started:.1f}s")
    kubectl = assets.ensure_binaries()["kubectl"]
    target = Target(
        kubectl=kubectl,
        kubeconfig=control_plane.kubeconfig,
        operator_image=image.reference,
        runner_image=node.runner_image.reference,
        github_api_url=install_fake.url,
        api_host=control_plane.pod_address,
        api_port=control_plane.port,
        toleration=NODE_TOLERATION,
    )
    workdir = tmp_path_factory.mktemp(request.param)
    installer = INSTALLERS[request.param](target, workdir)
    world = Installed(api_client, install_fake, target, installer)
    proxy: Component | None = None
    try:
        # Inside the try: an install that fails half-way (a rollout that times out) is removed
        # too, or its operators run on and reconcile the next tests' pools beside theirs.
        installer.install()
        proxy, proxy_url = _kubectl_proxy(control_plane, kubectl, workdir / "kubectl-proxy.log")
        world.sender = install_fake.send_webhooks(proxy_url + WEBHOOK_PATH, webhook_secret())
        yield world
    finally:
        if world.sender is not None:
            install_fake.stop_webhooks(world.sender)
        if proxy is not None:
            proxy.stop()
        # The operator finalizes the tests' pools; only then may it go.
        for name in world.namespaces:
            wait_for(
                lambda n=name: world.namespace_gone(n), NAMESPACE_GONE_TIMEOUT, 0.5, f"namespace {name} to go"
            )
        installer.uninstall()


@pytest.fixture
def namespace(installed: Installed) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (``installed`` waits until it is gone)."""
    name = installed.new_namespace()
    yield name
    installed.core.delete_namespace(name)


@pytest.fixture(autouse=True)
def _operator_logs(installed: Installed) -> Iterator[None]:
    """The operator pods' log tails, shown with a failing test's captured output."""
    yield
    print(installed.log_tails())


@every_install
def test_a_fixed_pool_runs_a_job(installed: Installed, namespace: str) -> None:
    create_pool(installed.api_client, namespace, node_pool("fixed", replicas=1))
    [pod] = registered_pods(installed.core, installed.fake, namespace, "fixed", 1)
    wait_condition(installed.api_client, namespace, "fixed", "Ready", "True", timeout=START_TIMEOUT)

    jobs = queue_jobs(installed.fake, namespace, "fixed", 1, 1.0)

    [done] = wait_done(installed.fake, jobs).values()
    assert (done["conclusion"], done["runner_name"]) == ("success", pod)


@every_install
def test_an_autoscaling_pool_scales_from_zero_on_a_delivery_through_the_webhook_service(
    installed: Installed, namespace: str
) -> None:
    autoscaling = {"minReplicas": 0, "maxReplicas": 2, "scaleDownDelay": "3s"}
    create_pool(installed.api_client, namespace, node_pool("auto", replicas=0, autoscaling=autoscaling))

    def at_zero() -> bool:
        status = pool_status(installed.api_client, namespace, "auto")
        return status.get("desiredReplicas") == 0 and not live_pods(installed.core, namespace, "auto")

    wait_for(at_zero, START_TIMEOUT, 0.2, "the pool to rest at 0 runners")

    job = installed.fake.queue_job(REPO, ["self-hosted", naming.pool_runner_label(namespace, "auto")], 1.0)

    [done] = wait_done(installed.fake, [job]).values()
    assert done["conclusion"] == "success" and done["runner_name"].startswith("auto-")
    # Demand polling is off in the overlay: the signed deliveries alone scaled the pool.
    assert installed.sender is not None
    assert installed.sender.wait_idle(), "the last delivery (completed) was not answered"
    answers = [(d.action, d.status) for d in installed.sender.deliveries if d.job_id == job]
    assert answers == [(a, 200) for a in ("queued", "in_progress", "completed")], answers
    wait_for(at_zero, START_TIMEOUT, 0.2, "the pool to return to 0 runners")


@on("kustomize")
def test_deleting_a_namespace_leaves_no_runner_registered(installed: Installed) -> None:
    namespace = installed.new_namespace()
    create_pool(installed.api_client, namespace, node_pool("doomed", replicas=2))
    registered_pods(installed.core, installed.fake, namespace, "doomed", 2)

    installed.core.delete_namespace(namespace)

    wait_for(
        lambda: installed.namespace_gone(namespace),
        NAMESPACE_GONE_TIMEOUT,
        0.5,
        f"namespace {namespace} to be deleted",
    )
    assert pool_runners(installed.fake, REPO, namespace, "doomed") == []


@every_install
def test_the_operator_namespace_enforces_pod_security_restricted(installed: Installed) -> None:
    labels = installed.core.read_namespace(NAMESPACE).metadata.labels or {}
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"
    assert len(installed.operator_pods()) == 2, "the operator's own pods were admitted"

    root = {
        "metadata": {"name": "runs-as-root"},
        "spec": {"containers": [{"name": "c", "image": installed.target.operator_image}]},
    }
    with pytest.raises(ApiException) as refused:
        installed.core.create_namespaced_pod(NAMESPACE, root, dry_run="All")
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in json.loads(refused.value.body)["message"]


@on("kustomize")
def test_the_readiness_probe_keeps_a_replica_that_cannot_serve_out_of_the_service(
    installed: Installed,
) -> None:
    """A replica of the webhook receiver's own pod template whose API server is out of reach.

    Its /readyz answers 503 (caches never sync) while /healthz answers 200: the kubelet's
    readiness probe keeps it not Ready, so the webhook Service never sends it a delivery.
    It carries the Deployment's labels but no pod-template-hash, so no ReplicaSet adopts it.
    """
    core = installed.core
    template = client.AppsV1Api(installed.api_client).read_namespaced_deployment(
        RECEIVER_DEPLOYMENT, NAMESPACE
    )
    spec = installed.api_client.sanitize_for_serialization(template.spec.template)
    labels = {k: v for k, v in spec["metadata"]["labels"].items() if k != "pod-template-hash"}
    [container] = spec["spec"]["containers"]
    closed_port = str(free_port())
    container["env"] = [
        {**e, "value": closed_port} if e["name"] == "KUBERNETES_SERVICE_PORT" else e for e in container["env"]
    ]
    name = "runnerpool-operator-webhook-cut-off"
    manifest = {"metadata": {"name": name, "labels": labels}, "spec": spec["spec"]}
    core.create_namespaced_pod(NAMESPACE, manifest)
    try:

        def probed_and_failed() -> list[str]:
            events = core.list_namespaced_event(
                NAMESPACE, field_selector=f"involvedObject.name={name},reason=Unhealthy"
            ).items
            return [e.message for e in events if "Readiness probe failed" in (e.message or "")]

        [message, *_] = wait_for(probed_and_failed, START_TIMEOUT, 0.5, "a failed readiness probe")
        assert "503" in message, message
        pod = core.read_namespaced_pod(name, NAMESPACE)
        [status] = pod.status.container_statuses
        assert status.state.running is not None and status.restart_count == 0, "alive: /healthz holds"
        ready = {c.type: c.status for c in pod.status.conditions or []}
        assert ready["Ready"] == "False"

        def endpoints() -> tuple[set[str], set[str]]:
            subsets = core.read_namespaced_endpoints(WEBHOOK_SERVICE, NAMESPACE).subsets or []
            return (
                {a.ip for s in subsets for a in s.addresses or []},
                {a.ip for s in subsets for a in s.not_ready_addresses or []},
            )

        good = {
            p.status.pod_ip for p in installed.operator_pods(RECEIVER_SELECTOR) if p.metadata.name != name
        }
        serving, kept_out = wait_for(
            lambda: (found := endpoints())[1] and found, 30.0, 0.2, f"{name} among the unready endpoints"
        )
        assert pod.status.pod_ip in kept_out and pod.status.pod_ip not in serving
        assert serving == good
    finally:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        selector = f"metadata.name={name}"
        wait_for(
            lambda: not core.list_namespaced_pod(NAMESPACE, field_selector=selector).items,
            60.0,
            0.5,
            f"{name} to go",
        )


@on("kustomize")
def test_deleting_the_leader_pod_hands_over_within_the_lease(installed: Installed, namespace: str) -> None:
    pods = {p.metadata.name for p in installed.operator_pods()}
    leader = installed.leader_pod()
    assert leader in pods and len(pods) == 2
    lease_duration = int(installed.lease().spec.lease_duration_seconds)

    installed.core.delete_namespaced_pod(leader, NAMESPACE)
    deleted = time.monotonic()
    create_pool(installed.api_client, namespace, node_pool("after-failover", replicas=1))

    wait_condition(
        installed.api_client, namespace, "after-failover", "Ready", "True", timeout=lease_duration + 10
    )
    print(f"leader pod deleted -> new pool Ready in {time.monotonic() - deleted:.1f}s")
    # The standby or the Deployment's replacement pod, whichever asked first after the release.
    assert installed.leader_pod() in {p.metadata.name for p in installed.operator_pods()} - {leader}
    installed.rolled_out()  # two replicas again for the next test


def _roll_while_a_runner_is_busy(installed: Installed, namespace: str, roll: Callable[[], None]) -> set[str]:
    """``roll`` (which waits for the rollout) while a runner's job runs: both replicas are
    replaced, a new one leads, and the job ends ``success`` on the same runner. The new pods."""
    create_pool(installed.api_client, namespace, node_pool("busy", replicas=1))
    registered_pods(installed.core, installed.fake, namespace, "busy", 1)
    jobs = queue_jobs(installed.fake, namespace, "busy", 1, BUSY_JOB_SECONDS)
    [busy] = wait_busy(installed.core, installed.fake, namespace, jobs)
    before = {p.metadata.name for p in installed.operator_pods()}

    started = time.monotonic()
    roll()
    print(f"rolling update of both replicas: {time.monotonic() - started:.1f}s")

    after = {p.metadata.name for p in installed.operator_pods()}
    assert len(after) == 2 and not after & before, f"every replica replaced: {before} -> {after}"
    wait_for(lambda: installed.leader_pod() in after, 30.0, 0.2, "a new replica to lead")
    assert installed.fake.job(jobs[0])["status"] == "in_progress", "the job ended before the rollout did"
    assert_alive(installed.core, namespace, "busy", [busy])
    [done] = wait_done(installed.fake, jobs, timeout=BUSY_JOB_SECONDS + START_TIMEOUT).values()
    assert (done["conclusion"], done["runner_name"]) == ("success", busy)
    return after


@on("kustomize")
def test_a_rolling_update_of_the_operator_kills_no_busy_runner(installed: Installed, namespace: str) -> None:
    def restart() -> None:
        installed.kubectl("rollout", "restart", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE)
        installed.rolled_out()

    _roll_while_a_runner_is_busy(installed, namespace, restart)


@on("helm")
def test_a_helm_upgrade_with_a_changed_value_rolls_the_operator_and_kills_no_busy_runner(
    installed: Installed, namespace: str
) -> None:
    helm = installed.installer
    assert isinstance(helm, HelmInstall)
    templates = {p.metadata.labels["pod-template-hash"] for p in installed.operator_pods()}

    new_pods = _roll_while_a_runner_is_busy(
        installed, namespace, lambda: helm.upgrade({"podAnnotations": UPGRADE_ANNOTATION})
    )

    pods = [p for p in installed.operator_pods() if p.metadata.name in new_pods]
    assert all(UPGRADE_ANNOTATION.items() <= (p.metadata.annotations or {}).items() for p in pods)
    [template] = {p.metadata.labels["pod-template-hash"] for p in pods}
    assert template not in templates, "a new ReplicaSet"
    history = installed.kubectl(
        "get", "secrets", "-n", NAMESPACE, "-l", "owner=helm,status=deployed", "-o", "name"
    )
    assert history.split() == [f"secret/sh.helm.release.v1.{RELEASE}.v2"], history


def _operator_budgets(installed: Installed) -> list[str]:
    """The busy-runner disruption budgets the operator made in the suite's namespaces (earlier
    tests of a full session leave namespaces of their own, Terminating with their pools)."""
    policy = client.PolicyV1Api(installed.api_client)
    return [
        f"PodDisruptionBudget {b.metadata.namespace}/{b.metadata.name}"
        for ns in installed.namespaces
        for b in policy.list_namespaced_pod_disruption_budget(
            ns, label_selector=naming.MANAGED_BY_SELECTOR
        ).items
    ]


def _leftovers(installed: Installed, rendered: list[dict[str, Any]]) -> list[str]:
    """Every object of a kind the chart renders (and every Lease, pod and ReplicaSet) in the
    release namespace, every cluster-scoped one of those kinds labelled as runnerpool's,
    and the operator's disruption budgets in the suite's namespaces."""
    namespaced = {o["kind"] for o in rendered if o["metadata"].get("namespace")}
    namespaced |= {"Lease", "Pod", "ReplicaSet"}
    cluster = {o["kind"] for o in rendered if not o["metadata"].get("namespace")}

    def listed(kinds: set[str], *args: str) -> list[str]:
        found = json.loads(installed.kubectl("get", ",".join(sorted(kinds)), *args, "-o", "json"))["items"]
        return [
            f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
            for o in found
            # Every namespace has it, made by the API server's controllers.
            if (o["kind"], o["metadata"]["name"]) != ("ServiceAccount", "default")
        ]

    return [
        *listed(namespaced, "-n", NAMESPACE),
        *listed(cluster, "-l", "app.kubernetes.io/part-of=runnerpool"),
        *_operator_budgets(installed),
    ]


@on("helm")
def test_helm_uninstall_leaves_nothing_but_the_crd_and_the_hooks_role(
    installed: Installed, namespace: str
) -> None:
    """The pools deleted while the operator runs (it deregisters their runners), then ``helm
    uninstall``: nothing the chart or the operator made is left but the CRD and the hooks'
    ClusterRole, which other releases' pools may bind (``helm.sh/resource-policy: keep``)."""
    helm = installed.installer
    assert isinstance(helm, HelmInstall)
    create_pool(installed.api_client, namespace, node_pool("last", replicas=1))
    registered_pods(installed.core, installed.fake, namespace, "last", 1)
    assert wait_for(lambda: _operator_budgets(installed), START_TIMEOUT, 0.2, "the namespace's busy budget")
    rendered = helm.render()
    assert ("Lease", LEASE) in {(o["kind"], o["metadata"]["name"]) for o in rendered}

    custom = client.CustomObjectsApi(installed.api_client)
    custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, "last")

    def no_pools() -> bool:
        # The suite's namespaces only: earlier tests of a full session leave pools whose
        # fake GitHub is gone (their namespaces stay Terminating), and this cluster-wide
        # operator cannot deregister those.
        return not any(
            custom.list_namespaced_custom_object(api.GROUP, api.VERSION, ns, api.PLURAL)["items"]
            for ns in installed.namespaces
        )

    wait_for(no_pools, NAMESPACE_GONE_TIMEOUT, 0.5, "every pool to be finalized")
    for name in installed.namespaces:
        if name != namespace:
            wait_for(lambda n=name: installed.namespace_gone(n), NAMESPACE_GONE_TIMEOUT, 0.5, f"{name} to go")
    # Asked, not required: what is left is named below, with everything else.
    poll_until(lambda: not _operator_budgets(installed), BUDGET_GONE_TIMEOUT, 0.2)
    assert pool_runners(installed.fake, REPO, namespace, "last") == []

    started = time.monotonic()
    helm.uninstall_release()
    print(f"helm uninstall (foreground, --wait): {time.monotonic() - started:.1f}s")

    assert _leftovers(installed, rendered) == [f"ClusterRole /{RUNNER_HOOKS_CLUSTER_ROLE}"]
    crd = client.ApiextensionsV1Api(installed.api_client).read_custom_resource_definition(
        f"{api.PLURAL}.{api.GROUP}"
    )
    assert crd.metadata.deletion_timestamp is None
