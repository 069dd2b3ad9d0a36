"""``make demo``: the operator keeping a pool of runners, on a laptop with no cluster and no GitHub.

Everything a newcomer would otherwise have to set up is started here and removed again at
the end: a local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
a real node (kubelet, containerd, runc: ``testworld.node``), a fake GitHub, and the operator
as its own process (the installed console script, exactly as a cluster would run it).  The
runner pods are real: the runner test image runs the project's entrypoint, registers with
the token the operator mounts, takes a queued job and exits, and its pod is replaced.  The
pool and its credential Secret are the ones in ``deploy/samples/``, so what the demo shows
is what a user applies (plus a toleration for the test node's taint).

The node needs root, overlayfs, cgroups and a few Debian packages, and runs in namespaces of
its own (``testworld.node.seal``: nothing leaves the machine).  Where it cannot start the demo
says why and runs with the runner simulator playing the pods instead, so a newcomer still
sees the operator work.

It prints a status table whenever something a user would look at changes (token expiry,
desired and ready runner pods, runners registered on GitHub, the Ready condition), then
deletes the pool and shows its runners being deregistered.  It ends by itself, exit code 0,
unless ``--keep`` asks it to stay up until Ctrl-C for poking at it with kubectl.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.reasons import ConditionType
from testworld.envtest import assets
from testworld.envtest.controlplane import ControlPlane, ControlPlaneError
from testworld.envtest.serviceaccount import enable_namespace, operator_kubeconfig
from testworld.fakegithub import FakeGitHub
from testworld.node import images, prereqs, seal
from testworld.node.assets import ensure_node_binaries
from testworld.node.node import NODE_NAME, NODE_TOLERATION, Node
from testworld.simulator import (
    OperatorError,
    OperatorProcess,
    RunnerSimulator,
    iter_runner_labels,
)
from testworld.wait import poll_until

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES = REPO_ROOT / "deploy" / "samples"
CRD_FILE = REPO_ROOT / "crds" / "runnerpool.yaml"
#: The only PAT the fake GitHub accepts; it goes into the sample's credential Secret.
DEMO_PAT = "ghp_demo0000000000000000000000000000000"
REPLICAS = 2
#: Generous bounds for each phase; on 2 cores the whole demo takes about 15 s (40 s on the node).
CONVERGE_TIMEOUT = 90.0
DELETE_TIMEOUT = 60.0
JOB_SECONDS = 3.0
#: On the node the operator lists runners this often (default 60 s, to spare the GitHub
#: budget): a pod whose runner finished its job is replaced after the next listing.
NODE_RUNNER_SYNC_SECONDS = 10
TICK = 0.2


class DemoError(RuntimeError):
    """A phase did not finish in time; the message says which and what was seen last."""


@dataclass(frozen=True)
class Sample:
    """The pool and credential Secret from deploy/samples, adjusted to the fake GitHub."""

    namespace: dict[str, Any]
    credentials: dict[str, Any]
    pool: dict[str, Any]

    @property
    def ns(self) -> str:
        return str(self.pool["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.pool["metadata"]["name"])

    @property
    def scope(self) -> str:
        spec = self.pool["spec"]
        return str(spec.get("repository") or spec["organization"])


def load_sample(samples: Path = SAMPLES) -> Sample:
    """Read the repository pool sample and its PAT Secret; give them the demo's PAT and size."""

    def read(name: str) -> dict[str, Any]:
        path = samples / name
        if not path.exists():
            raise DemoError(f"{path} not found: run the demo from a checkout of the repository")
        loaded: dict[str, Any] = yaml.safe_load(path.read_text())
        return loaded

    pool = read("runnerpool_repository.yaml")
    credentials = read("credential_secret_pat.yaml")
    pool["spec"]["replicas"] = REPLICAS
    credentials["stringData"] = {"token": DEMO_PAT}
    if pool["spec"].get("credentialSecretName") != credentials["metadata"]["name"]:
        raise DemoError("the sample pool does not name the sample PAT Secret")
    return Sample(read("namespace.yaml"), credentials, pool)


class Console:
    """Timestamped narration plus the status table, to one stream."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._t0 = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def say(self, text: str) -> None:
        print(f"[{self.elapsed:5.1f}s] {text}", file=self._out, flush=True)

    def blank(self) -> None:
        print(file=self._out, flush=True)

    def raw(self, text: str) -> None:
        print(text, file=self._out, flush=True)


COLUMNS = ("time", "pool", "token expires (UTC)", "pods desired/ready", "runners on GitHub", "Ready")
WIDTHS = (7, 14, 21, 18, 17, 30)


def _row(cells: tuple[str, ...]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, WIDTHS, strict=True)).rstrip()


class StatusTable:
    """One row per change of what a user would look at, so the log tells the story in order.

    Rows are printed only when the state differs from the last row: a redraw-in-place table
    would hide the order in which things happened, which is the point of the demo.
    """

    def __init__(
        self, console: Console, custom: client.CustomObjectsApi, fake: FakeGitHub, sample: Sample
    ) -> None:
        self._console = console
        self._custom = custom
        self._fake = fake
        self._sample = sample
        self._last: tuple[str, ...] | None = None
        self.runners = 0
        self.ready = False
        self.gone = False

    def header(self) -> None:
        self._console.raw("  " + _row(COLUMNS))
        self._console.raw("  " + _row(tuple("-" * w for w in WIDTHS)))
        self._last = None

    def refresh(self) -> None:
        state = self._state()
        if state != self._last:
            self._last = state
            self._console.raw("  " + _row((f"{self._console.elapsed:5.1f}s", *state)))

    def _state(self) -> tuple[str, ...]:
        sample = self._sample
        label = naming.pool_runner_label(sample.ns, sample.name)
        self.runners = sum(label in iter_runner_labels(r) for r in self._fake.runners(sample.scope))
        try:
            pool = self._custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, sample.ns, api.PLURAL, sample.name
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self.gone, self.ready = True, False
            return (sample.name, "-", "(deleted)", str(self.runners), "-")
        status = pool.get("status") or {}
        ready = next(
            (c for c in status.get("conditions") or [] if c.get("type") == ConditionType.READY), None
        )
        self.ready = bool(ready and ready.get("status") == "True")
        deleting = " (deleting)" if pool["metadata"].get("deletionTimestamp") else ""
        return (
            sample.name,
            (status.get("tokenExpiresAt") or "-").replace("T", " ").removesuffix("Z"),
            f"{pool['spec'].get('replicas', 1)}/{status.get('readyReplicas', 0)}{deleting}",
            str(self.runners),
            f"{ready['status']} ({ready.get('reason', '')})" if ready else "-",
        )

    def follow(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Refresh until ``done()``; the table is the progress indicator."""

        def check() -> bool:
            self.refresh()
            return done()

        if not poll_until(check, timeout, TICK):
            raise DemoError(f"{what} did not happen within {timeout:.0f}s")


class Demo:
    def __init__(self, *, keep: bool, out: TextIO, on_node: bool) -> None:
        self.keep = keep
        self.console = Console(out)
        self.operator: OperatorProcess | None = None
        #: Try the real node; set to None when it cannot start (the simulator plays the pods).
        self.on_node = on_node
        self.node: Node | None = None

    def run(self) -> int:
        sample = load_sample()
        self.console.raw(
            "runnerpool demo: a local control plane, a fake GitHub and the operator; no cluster needed."
        )
        self.console.blank()
        with contextlib.ExitStack() as stack:
            workdir = Path(tempfile.mkdtemp(prefix="runnerpool-demo-"))
            stack.callback(self._removed, workdir)
            stack.push(self._explain_failure)
            plane, fake, api_client = self._start(stack, sample, workdir)
            table = StatusTable(self.console, client.CustomObjectsApi(api_client), fake, sample)
            self._converge(stack, api_client, fake, sample, table)
            if self.keep:
                self._keep(plane, table, sample)
            self._delete(api_client, fake, sample, table)
        self.console.say("done: everything stopped and removed")
        return 0

    def _start(
        self, stack: contextlib.ExitStack, sample: Sample, workdir: Path
    ) -> tuple[ControlPlane, FakeGitHub, client.ApiClient]:
        """Control plane, fake GitHub, CRD, the sample's namespace and Secret, the operator."""
        say = self.console.say
        parts = "kube-apiserver, kube-controller-manager" + (" and kube-scheduler" if self.on_node else "")
        say(f"starting etcd, {parts} (the first run builds them)")
        plane = ControlPlane(for_node=self.on_node)
        stack.callback(self._stopped_control_plane, plane)
        plane.start()
        say(f"control plane up at {plane.url}, its files in {plane.workdir}")
        if self.on_node:
            self._start_node(stack, plane)

        if self.node is not None:
            # Where pods reach it, and under /api/v3 as GHES: config.sh derives the API that way.
            fake = stack.enter_context(
                FakeGitHub(host=seal.NODE_IP, api_prefix="/api/v3", scopes=[sample.scope], tokens=[DEMO_PAT])
            )
        else:
            fake = stack.enter_context(FakeGitHub(scopes=[sample.scope], tokens=[DEMO_PAT]))
        say(f"fake GitHub at {fake.url}: knows repository {sample.scope}, accepts one PAT")

        api_client = config.new_client_from_config(config_file=str(plane.kubeconfig))
        stack.callback(api_client.close)
        install_crd(api_client)
        say("installed the RunnerPool CRD (crds/runnerpool.yaml)")
        core = client.CoreV1Api(api_client)
        core.create_namespace(sample.namespace)
        enable_namespace(api_client, sample.ns)  # what the platform team does (docs/rbac.md)
        core.create_namespaced_secret(sample.ns, sample.credentials)
        say(
            f"created namespace {sample.ns} and Secret {sample.credentials['metadata']['name']} "
            "(deploy/samples, with the fake's PAT)"
        )

        extra: tuple[str, ...] = ()
        if self.node:
            extra = (
                "--runner-image",
                self.node.runner_image.reference,
                "--runner-sync-interval",
                str(NODE_RUNNER_SYNC_SECONDS),
            )
        # As deploy/ installs it: the operator logs in as its own ServiceAccount, never as admin.
        self.operator = OperatorProcess(
            operator_kubeconfig(plane), fake.url, workdir / "operator.log", extra_args=extra
        )
        stack.callback(self._stopped_operator)
        self.operator.start()
        say(f"started runnerpool-operator (pid {self.operator.pid}); waiting for /readyz")
        self.operator.wait_ready()
        say(f"operator ready; metrics on http://127.0.0.1:{self.operator.metrics_port}/metrics")
        return plane, fake, api_client

    def _start_node(self, stack: contextlib.ExitStack, plane: ControlPlane) -> None:
        say = self.console.say
        say("starting the node: containerd, runc, CNI bridge 10.88.0.1/24 (no route out), kubelet")
        node = Node(plane)
        try:
            node.start()
        except (ControlPlaneError, assets.AssetError) as err:
            say(f"the node did not start: {err}")
            say("running with the runner simulator playing the pods instead")
            self.on_node = False
            return
        stack.callback(self._stopped_node, node)
        self.node = node
        say(f"node {NODE_NAME} Ready in {node.started_in:.1f}s; runner image {node.runner_image.reference}")

    def _converge(
        self,
        stack: contextlib.ExitStack,
        api_client: client.ApiClient,
        fake: FakeGitHub,
        sample: Sample,
        table: StatusTable,
    ) -> None:
        say = self.console.say
        simulator: RunnerSimulator | None = None
        pool = sample.pool
        if self.node is None:
            simulator = stack.enter_context(RunnerSimulator(api_client, fake, sample.ns))
            say("runner simulator started: it plays the runner pods (nothing runs containers here)")
        else:
            pool = {**pool, "spec": {**pool["spec"], "tolerations": [NODE_TOLERATION]}}
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            api.GROUP, api.VERSION, sample.ns, api.PLURAL, pool
        )
        on_node = ", plus a toleration for the test node" if self.node else ""
        say(
            f"applied deploy/samples/runnerpool_repository.yaml{on_node}: pool {sample.name}, "
            f"repository {sample.scope}, replicas {REPLICAS}"
        )
        self.console.blank()
        table.header()
        table.follow(
            lambda: table.ready and table.runners == REPLICAS, CONVERGE_TIMEOUT, "the pool becoming Ready"
        )
        self.console.blank()
        self._show_runners(fake, sample)
        if simulator is not None and simulator.rejections:
            raise DemoError(f"runners were refused: {simulator.rejections}")
        if self.node is not None:
            self._show_pods(api_client, sample)
            self._run_a_job(api_client, fake, sample, table)

    def _pods(self, api_client: client.ApiClient, sample: Sample) -> list[client.V1Pod]:
        selector = f"{naming.POOL_LABEL}={sample.name}"
        pods: list[client.V1Pod] = (
            client.CoreV1Api(api_client).list_namespaced_pod(sample.ns, label_selector=selector).items
        )
        return sorted(pods, key=lambda p: p.metadata.name)

    def _show_pods(self, api_client: client.ApiClient, sample: Sample) -> None:
        self.console.say(f"runner pods on the node (namespace {sample.ns}):")
        for pod in self._pods(api_client, sample):
            status = pod.status
            ready = sum(1 for c in status.container_statuses or [] if c.ready)
            # As kubectl shows it: a pod being deleted is Terminating, whatever its phase.
            phase = "Terminating" if pod.metadata.deletion_timestamp else status.phase
            self.console.raw(
                f"    {pod.metadata.name}  {phase}  ready {ready}/1  node {pod.spec.node_name}  "
                f"ip {status.pod_ip}  uid {images.RUNNER_UID}"
            )

    def _run_a_job(
        self, api_client: client.ApiClient, fake: FakeGitHub, sample: Sample, table: StatusTable
    ) -> None:
        """Queue one job for the pool: a pod takes it, runs it, exits, and is replaced."""
        say = self.console.say
        self.console.blank()
        label = naming.pool_runner_label(sample.ns, sample.name)
        before = {p.metadata.name for p in self._pods(api_client, sample)}
        job_id = fake.queue_job(sample.scope, [label], JOB_SECONDS)
        say(f"queued workflow job #{job_id} on {sample.scope}, runs-on [{label}], {JOB_SECONDS:.0f} s long")
        seen: list[str] = []

        def job_state() -> dict[str, Any]:
            job = fake.job(job_id)
            state = f"{job['status']}" + (
                f" on runner {job['runner_name']}" if job.get("runner_name") else ""
            )
            if job.get("conclusion"):
                state += f", conclusion {job['conclusion']}"
            if not seen or seen[-1] != state:
                seen.append(state)
                say(f"job #{job_id}: {state}")
            return job

        if not poll_until(lambda: job_state()["status"] == "completed", CONVERGE_TIMEOUT, TICK):
            raise DemoError(f"job #{job_id} did not complete within {CONVERGE_TIMEOUT:.0f}s")
        ran_on = str(fake.job(job_id)["runner_name"])
        say(
            f"one job per pod: pod {ran_on} exits after its job; the operator replaces it after its "
            f"next runner listing (--runner-sync-interval {NODE_RUNNER_SYNC_SECONDS}, default 60 s)"
        )
        table.header()

        def replaced() -> bool:
            names = {
                p.metadata.name for p in self._pods(api_client, sample) if not p.metadata.deletion_timestamp
            }
            return (
                ran_on not in names and len(names - before) >= 1 and table.ready and table.runners == REPLICAS
            )

        table.follow(replaced, CONVERGE_TIMEOUT, f"a new pod replacing {ran_on}")
        self.console.blank()
        self._show_pods(api_client, sample)

    def _delete(
        self, api_client: client.ApiClient, fake: FakeGitHub, sample: Sample, table: StatusTable
    ) -> None:
        say = self.console.say
        self.console.blank()
        say(f"deleting RunnerPool {sample.name}: the operator deregisters its runners before letting it go")
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            api.GROUP, api.VERSION, sample.ns, api.PLURAL, sample.name
        )
        table.header()
        table.follow(lambda: table.gone, DELETE_TIMEOUT, "the pool's deletion")
        self.console.blank()
        deleted = fake.count("actions/delete-self-hosted-runner-from-repo", status=204)
        say(f"pool deleted; {table.runners} of its runners left on the fake GitHub ({deleted} deregistered)")
        if table.runners:
            raise DemoError(f"{table.runners} runner(s) still registered after the pool was deleted")
        if self.node is not None:
            if not poll_until(lambda: not self._pods(api_client, sample), DELETE_TIMEOUT, TICK):
                raise DemoError(f"pods still on the node {DELETE_TIMEOUT:.0f}s after the pool was deleted")
            say("its pods are gone from the node")

    def _show_runners(self, fake: FakeGitHub, sample: Sample) -> None:
        self.console.say(f"runners registered on the fake GitHub for {sample.scope}:")
        for runner in fake.runners(sample.scope):
            labels = ", ".join(iter_runner_labels(runner))
            self.console.raw(f"    #{runner['id']} {runner['name']}  {runner['status']}  labels: {labels}")

    def _keep(self, plane: ControlPlane, table: StatusTable, sample: Sample) -> None:
        kubectl = assets.ensure_binaries().get("kubectl")
        console = self.console
        console.blank()
        console.raw("Kept running (--keep). In another terminal:")
        if self.node is not None:
            console.raw("    # the world is sealed: first enter its namespaces (the PID is printed above)")
            console.raw("    nsenter --target PID --net --mount --pid")
        console.raw(f"    export KUBECONFIG={plane.kubeconfig}")
        console.raw(f"    {kubectl or 'kubectl'} get runnerpools -A")
        console.raw(f"    {kubectl or 'kubectl'} -n {sample.ns} scale runnerpool {sample.name} --replicas 3")
        console.raw("Press Ctrl-C to delete the pool and clean up.")
        table.header()
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
        try:
            while not stop.wait(TICK):
                table.refresh()
        finally:
            signal.signal(signal.SIGINT, previous)

    # -- clean-up steps, in reverse order of start -------------------------------------------

    def _explain_failure(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        """Show the operator's log while it still exists: the temp folder goes right after."""
        if isinstance(exc, DemoError) and self.operator is not None:
            self.console.raw(f"\nlast lines of the operator's log:\n{self.operator.log_tail(30)}\n")

    def _stopped_operator(self) -> None:
        if self.operator is None:
            return
        try:
            code = self.operator.stop()
        except OperatorError as err:
            self.console.say(str(err))
            return
        self.console.say(f"operator stopped (SIGTERM), exit code {code}")

    def _stopped_node(self, node: Node) -> None:
        node.stop()
        self.console.say("node stopped (kubelet, containerd, every container; its cgroups removed)")

    def _stopped_control_plane(self, plane: ControlPlane) -> None:
        plane.stop()
        self.console.say("control plane stopped")

    def _removed(self, workdir: Path) -> None:
        shutil.rmtree(workdir, ignore_errors=True)
        self.console.say(f"removed {workdir}")


#: A valid pool for the dry-run create that ends ``install_crd`` (nothing is stored).
_INSTALL_PROBE: dict[str, Any] = {
    "apiVersion": api.API_VERSION,
    "kind": api.KIND,
    "metadata": {"name": "install-probe"},
    "spec": {"repository": "install-probe/probe", "replicas": 1},
}


def install_crd(api_client: client.ApiClient) -> None:
    """Install crds/runnerpool.yaml and wait until the API server serves RunnerPools, creates
    included.

    The first create of a kind installed moments before is answered only after about 2 s
    (measured: 2.006 s four times out of four, dry run or not; the next ones 3-7 ms; a create
    made 2.5 s after the install, 7 ms). A user installs the CRD long before a pool; the
    benchmarks, which time a pool from its create, create within that window or not depending
    on how long the operator took to start, and that gave bench.run's "all runner pods exist"
    two modes 2 s apart. A server-side dry run of a valid pool takes the wait here."""
    manifest = yaml.safe_load(CRD_FILE.read_text())
    client.ApiextensionsV1Api(api_client).create_custom_resource_definition(manifest)
    custom = client.CustomObjectsApi(api_client)

    def served() -> bool:
        try:
            custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, limit=1)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    if not poll_until(served, 30):
        raise DemoError("the API server did not start serving RunnerPools")
    custom.create_namespaced_custom_object(
        api.GROUP, api.VERSION, "default", api.PLURAL, _INSTALL_PROBE, dry_run="All"
    )


def node_unavailable() -> str | None:
    """Why the real node cannot run the demo here, or None: prerequisites, then the build."""
    if seal.is_sealed():
        return "this already runs in a sealed world with its own node (one node per machine)"
    missing = prereqs.problems()
    if missing:
        return "; ".join(missing)
    try:
        ensure_node_binaries()
        images.pause_image()
        images.runner_image()
    except assets.AssetError as err:
        return str(err)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testworld.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep",
        action="store_true",
        help="stay up after the pool converges, until Ctrl-C; then delete and clean up",
    )
    parser.add_argument(
        "--stand-in", action="store_true", help="do not try the node: the runner simulator plays the pods"
    )
    parser.add_argument("--sealed", action="store_true", help=argparse.SUPPRESS)  # set by the seal
    args = parser.parse_args(argv)
    on_node = args.sealed
    if not args.sealed and not args.stand_in:
        reason = node_unavailable()
        if reason is None:
            command = [sys.executable, "-m", "testworld.demo", "--sealed", *(["--keep"] if args.keep else [])]
            try:
                return seal.run_sealed(command)
            except seal.SealError as err:
                reason = str(err)
        print(f"The test node cannot start here: {reason}", flush=True)
        print("Running with the runner simulator playing the pods instead.\n", flush=True)
    demo = Demo(keep=args.keep, out=sys.stdout, on_node=on_node)
    try:
        return demo.run()
    except (DemoError, OperatorError, ControlPlaneError, assets.AssetError) as err:
        print(f"\ndemo failed: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; everything started was stopped and removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
