"""``python -m bench.soak``: a seeded chaos soak of the operator on the real test node.

Two operator replicas (leader election, deploy/'s ServiceAccount; the webhook receiver runs
apart on its own account, as deploy/ installs it) run real runner pods on the test node; the
fake GitHub plays GitHub.  Two namespaces (``soak-0``, ``soak-1``) each hold a fixed pool and
an autoscaling one; runners carry a label per slot (``soak-fixed-0``...), so jobs queued for a
namespace that is being deleted are taken by the pools of the namespace made again in its place.

The run alternates chaos and settles.  During chaos a seeded RNG picks a disturbance every
few seconds, each logged on one line with its time: jobs announced by a signed webhook
delivery or left to the poller (their deliveries dropped), scale changes of the fixed pools,
template changes (a rollout), ``kubectl drain`` of the node (eviction: busy pods are refused)
and uncordon, pod deletions and namespace deletions, ``kill -9`` of the leader (a leader
change) or of the standby, a SIGTERM of the leader (a clean handover), and GitHub answering
5xx, a secondary rate limit (429 with Retry-After), hanging or slowly.  A settle stops the
chaos (uncordons, clears the faults) and checks, within 60 s of the last disturbance:

* every pool converged: Ready, its generation observed, as many pods as it wants (its
  replicas, or what its demand decided), all running and updated; a deleted namespace gone
  and made again;
* no runner is registered on GitHub without its pod.

All along: no runner registers with an expired registration token (the fake knows its
tokens), every job runs exactly once and ends ``success`` (checked when the run ends, after
the last jobs are given time to finish), and the operators' RSS, sampled every 2 s, grows
at most 10 % after the warm-up (the first 10 minutes, or the first third of a shorter run).
Busy runners finish their job on every deletion path (the runner entrypoint's busy grace), so
a job cancelled by a pod or namespace deletion is a violation like any other;
``--deletions-cancel-jobs`` counts those apart ("hit by a deletion"), for operators from
before the busy grace, whose runners were cancelled by design.

It prints a table (each invariant's checks and violations, disturbances by kind, jobs by
result, RSS and CPU at start, peak and end), writes JSON (``--out``) and a PNG beside it
(jobs, RSS and CPU over time), and exits 1 on any violation.  It runs inside the seal::

    .venv/bin/python -m testworld.node.seal -- .venv/bin/python -m bench.soak --minutes 3

``tests/node/test_soak.py`` runs 3 minutes of it in ``make test`` through :func:`soak`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from bench import soak_plot
from runnerpool import api, naming
from runnerpool.reasons import ConditionType
from runnerpool.settings import LeaderElectionSettings
from testworld.demo import install_crd
from testworld.envtest import audit
from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import (
    OPERATOR_USER,
    allow_leader_election_in,
    enable_namespace,
    kubectl,
    operator_kubeconfig,
    receiver_kubeconfig,
)
from testworld.envtest.serviceaccount import refusals as rbac_refusals
from testworld.fakegithub import FakeGitHub
from testworld.fakegithub.webhooks import WebhookSender
from testworld.node import cgroups, seal
from testworld.node.node import NODE_NAME, NODE_TOLERATION, Node
from testworld.ports import free_port
from testworld.simulator import OperatorProcess, iter_runner_labels
from testworld.wait import poll_until

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
REPO = "soak-org/soak-repo"
PAT = "ghp_soak0000000000000000000000000000000"
SECRET = b"the chaos soak's webhook secret"
SLOTS = 2
#: Where the replicas elect, under deploy/'s Lease name and Role (that Lease only): a namespace
#: of the soak's own, which it never deletes (its runner namespaces it does, chaos included).
LEASE_NAMESPACE = "soak-leader"
LEASE = LeaderElectionSettings().lease_name
#: Within this long after the last disturbance every pool must have converged.
CONVERGE_SECONDS = 60.0
#: How long a deleted namespace may take: the namespace controller deletes its pods first, and
#: once it has seen them outlive two of its passes (a busy runner finishing its job), it comes
#: back only after half their grace period or at its 5-minute resync (docs/busy-runners.md): so
#: this holds if every pod is gone within two minutes.
NAMESPACE_GONE_SECONDS = 420.0
#: Length of one chaos phase; a settle follows each.
CHAOS_SECONDS = 75.0
#: What the last settle is expected to take: the chaos stops this long before ``--minutes``
#: end (a settle may take up to CONVERGE_SECONDS, so a run can overrun by the difference).
SETTLE_RESERVE_SECONDS = 30.0
#: Gap between two disturbances (uniform).
GAP_SECONDS = (2.0, 7.0)
JOB_SECONDS = (3.0, 15.0)
#: After the last settle: time for the last jobs to be taken and finish.
FINAL_JOBS_SECONDS = 120.0
#: Short-lived registration tokens, so that refreshes happen during the run.
TOKEN_LIFETIME_SECONDS = 240.0
TOKEN_MARGIN_MINUTES = 2.0
SAMPLE_SECONDS = 2.0
RSS_GROWTH_LIMIT = 0.10
WARMUP_CAP_SECONDS = 600.0
REPLICAS = ("soak-a", "soak-b")


@dataclass
class Options:
    minutes: float = 30.0
    seed: int = 22
    out: Path | None = None
    deletions_cancel_jobs: bool = False


# ------------------------------------------------------------------------------ the record


@dataclass
class Invariant:
    checks: int = 0
    violations: int = 0
    details: list[str] = field(default_factory=list)

    def check(self, ok: bool, detail: str = "") -> bool:
        self.checks += 1
        if not ok:
            self.violations += 1
            if len(self.details) < 50:
                self.details.append(detail)
        return ok


INVARIANTS = (
    "jobs end success, once",
    "pools converge within 60 s",
    "no runner without its pod",
    "no expired-token registration",
    "RSS growth after warm-up <= 10 %",
    "no RBAC refusal",
)


@dataclass
class Record:
    """Everything the run observed; ``report()`` turns it into the JSON."""

    t0: float = field(default_factory=time.monotonic)
    invariants: dict[str, Invariant] = field(default_factory=lambda: {n: Invariant() for n in INVARIANTS})
    disturbances: list[dict[str, Any]] = field(default_factory=list)
    job_events: list[tuple[float, str, int]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    settles: list[tuple[float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)
    log_file: Path | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, kind: str, detail: str = "", *, disturbance: bool = True) -> None:
        t = self.now()
        stamp = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
        line = f"{stamp} +{t:7.1f}s {kind:<16} {detail}"
        print(line, file=sys.stderr, flush=True)
        with self.lock:
            if disturbance:
                self.disturbances.append({"t": round(t, 2), "kind": kind, "detail": detail})
            if self.log_file is not None:
                with self.log_file.open("a") as sink:
                    sink.write(line + "\n")

    def violations(self) -> dict[str, int]:
        return {name: inv.violations for name, inv in self.invariants.items() if inv.violations}


# ------------------------------------------------------------------------------ the fake


class AuditedFakeGitHub(FakeGitHub):
    """The fake GitHub, remembering every registration that presented an expired token."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.registrations = 0
        self.expired: list[str] = []
        self._audit_lock = threading.Lock()

    def _audit(self, token: str, what: str) -> None:
        issued = next((t for s in self.scopes() for t in self.tokens_issued(s) if t.token == token), None)
        with self._audit_lock:
            self.registrations += 1
            if issued is not None and self.clock() >= issued.expires_at:
                late = self.clock() - issued.expires_at
                self.expired.append(f"{what} with a token expired {late:.1f}s before")

    def runner_registration(self, authorization: str | None, url: str) -> str:
        self._audit((authorization or "").strip().partition(" ")[2].strip(), "config (runner-registration)")
        return super().runner_registration(authorization, url)


# ------------------------------------------------------------------------------ the world


@dataclass(eq=False)
class Timer:
    """Something the main loop does later: from ``earliest`` once ``ready()``, at ``latest`` anyway."""

    earliest: float
    latest: float
    kind: str
    action: Callable[[], str]
    ready: Callable[[], bool] | None = None

    def due(self, now: float) -> bool:
        if now >= self.latest:
            return True
        return now >= self.earliest and self.ready is not None and self.ready()


def _labels(slot: int) -> dict[str, str]:
    return {"fixed": f"soak-fixed-{slot}", "auto": f"soak-auto-{slot}"}


@dataclass
class Slot:
    """One namespace and its two pools; made again under the same name after a deletion."""

    index: int
    replicas: int = 2
    roll: int = 0
    recreating: bool = False

    @property
    def namespace(self) -> str:
        return f"soak-{self.index}"

    def manifests(self, image: str) -> list[dict[str, Any]]:
        env = [{"name": "SOAK_ROLL", "value": str(self.roll)}]
        common = {"repository": REPO, "tolerations": [NODE_TOLERATION], "runnerImage": image, "env": env}
        labels = _labels(self.index)
        fixed = {**common, "replicas": self.replicas, "labels": [labels["fixed"]]}
        auto = {
            **common,
            "replicas": 0,
            "labels": [labels["auto"]],
            "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "scaleDownDelay": "3s"},
        }
        return [
            {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}, "spec": spec}
            for name, spec in (("fixed", fixed), ("auto", auto))
        ]


class World:
    """The operators, the fake, the slots, and the disturbances that can be done to them."""

    def __init__(
        self, plane: ControlPlane, node: Node, record: Record, rng: random.Random, logs: Path
    ) -> None:
        self.plane, self.node, self.record, self.rng, self.logs = plane, node, record, rng, logs
        self.api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        self.api.user_agent = "runnerpool-soak"
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.slots = [Slot(i) for i in range(SLOTS)]
        self.operators: dict[str, OperatorProcess] = {}
        self.leader_flags: tuple[str, ...] = ()  # set once its namespace and Role are made
        self.receiver: OperatorProcess
        self.fake: AuditedFakeGitHub
        self.sender: WebhookSender
        self.polled: set[int] = set()
        self._poll_next = False
        self._queue_lock = threading.Lock()
        self.in_progress: Counter[int] = Counter()
        self.completed: Counter[int] = Counter()
        #: Runner pod -> how it was deleted by someone else than the operator.
        self.hit_by: dict[str, str] = {}
        self.drain: threading.Thread | None = None
        self.cordoned = False
        self.timers: list[Timer] = []
        self.background: list[threading.Thread] = []
        self.audit_from = 0

    # -- start and stop -------------------------------------------------------------------

    @contextlib.contextmanager
    def running(self) -> Iterator[World]:
        with contextlib.ExitStack() as stack:
            self.fake = AuditedFakeGitHub(
                host=seal.NODE_IP,
                api_prefix="/api/v3",
                scopes=[REPO],
                tokens=[PAT],
                registration_token_lifetime=TOKEN_LIFETIME_SECONDS,
            )
            stack.enter_context(self.fake)
            self.fake.on_job_event(self._on_job_event)
            stack.callback(self.api.close)
            with contextlib.suppress(ApiException):
                install_crd(self.api)  # 409: installed already (the node tests' session)
            self.audit_from = audit.end_of_complete_events(self.plane.audit_log)
            kubeconfig = operator_kubeconfig(self.plane)
            self.leader_flags = self._leader_namespace()
            secret_file = self.logs / "webhook-secret"
            secret_file.write_bytes(SECRET + b"\n")
            for name in REPLICAS:
                self.operators[name] = OperatorProcess(
                    kubeconfig,
                    self.fake.url,
                    self.logs / f"operator-{name}.log",
                    namespaces=[s.namespace for s in self.slots],
                    extra_args=self._flags(name),
                )
            # The webhook receiver runs apart, on its own account: killing an operator replica
            # does not touch it.
            self.receiver = OperatorProcess(
                receiver_kubeconfig(self.plane),
                self.fake.url,
                self.logs / "webhook-receiver.log",
                namespaces=[s.namespace for s in self.slots],
                extra_args=["--webhook-secret-file", str(secret_file)],
                webhook_port=free_port(),
                component="webhook-receiver",
            )
            stack.callback(self._stop_operators)
            for operator in [*self.operators.values(), self.receiver]:
                operator.start()
            for operator in [*self.operators.values(), self.receiver]:
                operator.wait_ready(60)
            self.sender = self.fake.send_webhooks(self._webhook_url(), SECRET)
            self.sender.drop = self._drop
            stack.callback(lambda: self.fake.stop_webhooks(self.sender))
            stack.callback(self._delete_namespaces)
            for slot in self.slots:
                self._make_slot(slot)
            yield self

    def _flags(self, identity: str) -> list[str]:
        return [
            "--runner-image",
            self.node.runner_image.reference,
            "--runner-sync-interval",
            "5",
            "--registration-timeout",
            "45",
            "--demand-poll-interval",
            "5",
            "--token-refresh-margin",
            f"{TOKEN_MARGIN_MINUTES:g}",
            *self.leader_flags,
            "--leader-election-identity",
            identity,
            "--lease-duration",
            "4",
            "--renew-deadline",
            "2.5",
            "--retry-period",
            "1",
        ]

    def _leader_namespace(self) -> tuple[str, ...]:
        try:
            self.core.create_namespace({"metadata": {"name": LEASE_NAMESPACE}})
        except ApiException as err:
            if err.status != 409:  # 409: an earlier soak on this control plane made it
                raise
        return allow_leader_election_in(self.api, LEASE_NAMESPACE)

    def _webhook_url(self) -> str:
        return f"http://127.0.0.1:{self.receiver.webhook_port}/webhook"

    def _stop_operators(self) -> None:
        for thread in self.background:
            thread.join(60)
        for name, operator in self.operators.items():
            code = operator.stop()
            if code != 0:
                self.record.notes.append(f"operator {name} exited with {code} on SIGTERM at the end")
        code = self.receiver.stop()
        if code != 0:
            self.record.notes.append(f"the webhook receiver exited with {code} on SIGTERM at the end")
        self._note_outlived_stops()

    def _note_outlived_stops(self) -> None:
        """Pods the operator told to stop twice (``lifecycle.outlived_stop``), with the kubelet's
        last words on each: a runner that outlived its SIGTERM is news even when the run passes."""
        kubelet = self.plane.workdir / "kubelet.log"
        kubelet_lines = kubelet.read_text(errors="replace").splitlines() if kubelet.exists() else []
        for name in self.operators:
            for line in (self.logs / f"operator-{name}.log").read_text(errors="replace").splitlines():
                found = _OUTLIVED.search(line)
                if found is None:
                    continue
                pod = found.group(1).split("/")[-1]
                self.record.notes.append(f"operator {name} told a pod to stop again: {found.group(0)}")
                words = [text for text in kubelet_lines if pod in text][-8:]
                self.record.notes += [f"kubelet on {pod}: {text[:300]}" for text in words]

    def _delete_namespaces(self) -> None:
        for slot in self.slots:
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(slot.namespace)
        poll_until(lambda: all(not self._namespace_exists(s.namespace) for s in self.slots), 90, 0.5)

    def _namespace_exists(self, name: str) -> bool:
        try:
            self.core.read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def _make_slot(self, slot: Slot) -> None:
        self.core.create_namespace({"metadata": {"name": slot.namespace}})
        enable_namespace(self.api, slot.namespace)
        self.core.create_namespaced_secret(
            slot.namespace,
            {"metadata": {"name": naming.DEFAULT_CREDENTIAL_SECRET}, "stringData": {"token": PAT}},
        )
        for manifest in slot.manifests(self.node.runner_image.reference):
            self.custom.create_namespaced_custom_object(
                api.GROUP, api.VERSION, slot.namespace, api.PLURAL, manifest
            )

    # -- jobs -----------------------------------------------------------------------------

    def _on_job_event(self, payload: dict[str, Any]) -> None:
        """Under the fake's lock: remember, never block."""
        job = int(payload["workflow_job"]["id"])
        action = str(payload["action"])
        with self.record.lock:
            self.record.job_events.append((round(self.record.now(), 2), action, job))
        if action == "in_progress":
            self.in_progress[job] += 1
        elif action == "completed":
            self.completed[job] += 1

    def _drop(self, action: str, job: dict[str, Any]) -> bool:
        """Deliveries of polled jobs are lost: only the operator's poller can find them."""
        if action == "queued" and self._poll_next:
            self.polled.add(int(job["id"]))
            return True
        return int(job["id"]) in self.polled

    def queue_jobs(self, polled: bool) -> str:
        slot = self.rng.randrange(SLOTS)
        kind = self.rng.choice(["fixed", "auto", "auto"])
        label = _labels(slot)[kind]
        count = self.rng.randint(1, 3)
        ids = []
        for _ in range(count):
            seconds = round(self.rng.uniform(*JOB_SECONDS), 1)
            with self._queue_lock:
                self._poll_next = polled
                try:
                    ids.append(self.fake.queue_job(REPO, ["self-hosted", label], seconds))
                finally:
                    self._poll_next = False
        return f"{count} job(s) for {label}: {ids}"

    # -- pools ----------------------------------------------------------------------------

    def _patch(self, slot: Slot, pool: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, slot.namespace, api.PLURAL, pool, body
        )

    def _ready_slots(self) -> list[Slot]:
        return [s for s in self.slots if not s.recreating]

    def scale(self) -> str:
        # 1-3, never 0: a fixed pool at 0 has no runner, and its queued jobs would wait for ever
        # (the 30-minute run of seed 22 left two so).
        slot = self.rng.choice(self._ready_slots())
        before, slot.replicas = slot.replicas, self.rng.choice([r for r in range(1, 4) if r != slot.replicas])
        self._patch(slot, "fixed", {"spec": {"replicas": slot.replicas}})
        return f"{slot.namespace}/fixed {before} -> {slot.replicas}"

    def template(self) -> str:
        slot = self.rng.choice(self._ready_slots())
        slot.roll += 1
        env = [{"name": "SOAK_ROLL", "value": str(slot.roll)}]
        for pool in ("fixed", "auto"):
            self._patch(slot, pool, {"spec": {"env": env}})
        return f"{slot.namespace}: SOAK_ROLL={slot.roll} (both pools roll out)"

    # -- pods and namespaces --------------------------------------------------------------

    def _busy_runners(self) -> set[str]:
        return {j["runner_name"] for j in self.fake.jobs(REPO) if j["status"] == "in_progress"}

    def _pods(self, namespace: str | None = None) -> list[Any]:
        namespaces = [namespace] if namespace else [s.namespace for s in self._ready_slots()]
        selector = naming.MANAGED_BY_SELECTOR
        return [
            p for ns in namespaces for p in self.core.list_namespaced_pod(ns, label_selector=selector).items
        ]

    def delete_pod(self) -> str:
        pods = [p for p in self._pods() if not p.metadata.deletion_timestamp]
        if not pods:
            return "no pod to delete"
        pod = self.rng.choice(pods)
        busy = pod.metadata.name in self._busy_runners()
        # Idle too: a runner may take a job in the moment between the look and the delete.
        self.hit_by[pod.metadata.name] = "a pod deletion"
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        return f"{pod.metadata.namespace}/{pod.metadata.name} ({'busy' if busy else 'idle'})"

    def delete_namespace(self) -> str:
        slot = self.rng.choice(self._ready_slots())
        slot.recreating = True
        pods = self._pods(slot.namespace)
        busy = {p.metadata.name for p in pods} & self._busy_runners()
        self.hit_by.update({p.metadata.name: "a namespace deletion" for p in pods})
        self.core.delete_namespace(slot.namespace)

        def again() -> None:
            gone = poll_until(lambda: not self._namespace_exists(slot.namespace), NAMESPACE_GONE_SECONDS, 0.5)
            if not gone:
                # Made again now, it would fail in a Terminating namespace and the slot would be
                # lost silently; left "being deleted", the convergence check reports it.
                self.record.notes.append(
                    f"namespace {slot.namespace} not gone {NAMESPACE_GONE_SECONDS:.0f}s after its deletion: "
                    + self.what_holds(slot.namespace)
                )
                return
            with contextlib.suppress(ApiException):
                self._make_slot(slot)
            slot.recreating = False
            self.record.say(
                "namespace-again", f"{slot.namespace} made again with its pools", disturbance=False
            )

        self._spawn(f"again-{slot.namespace}", again)
        return f"{slot.namespace} ({len(pods)} pods, {len(busy)} busy)"

    def what_holds(self, namespace: str) -> str:
        """What a namespace being deleted still waits for, as the namespace controller and the
        cluster tell it: its conditions that say so, its pods (with their containers' states)
        and its pools (with their finalizers), and the kubelet's last words on those pods."""
        try:
            ns = self.core.read_namespace(namespace)
            said = [f"{c.type}: {c.message}" for c in ns.status.conditions or [] if c.status == "True"]
            pods = self.core.list_namespaced_pod(namespace).items
            pools = self.custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL)
        except ApiException as err:
            return f"cannot look ({err.status} {err.reason})"
        parts = ["; ".join(said) or "no condition"]
        container_ids = []
        for pod in pods:
            parts.append(_pod_held(pod))
            parts += self._running_containers(pod, container_ids)
        for pool in pools["items"]:
            meta = pool["metadata"]
            deleted = "being deleted" if meta.get("deletionTimestamp") else "not deleted"
            waits = [
                f"{c.get('reason')}: {c.get('message')}"
                for c in (pool.get("status") or {}).get("conditions") or []
                if c.get("type") == ConditionType.RUNNERS_DEREGISTERED
            ]
            finalizers = meta.get("finalizers") or []
            parts.append(f"pool {meta['name']} ({deleted}, finalizers {finalizers}, {waits or 'no word'})")
        names = [pod.metadata.name for pod in pods]
        for daemon, words in (("kubelet", names), ("containerd", [cid[:12] for cid in container_ids])):
            log = self.plane.workdir / f"{daemon}.log"
            if words and log.exists():
                text = log.read_text(errors="replace")
                lines = [line for line in text.splitlines() if any(w in line for w in words)]
                parts += [f"{daemon}: {line[:300]}" for line in lines[-8:]]
        return " | ".join(parts)

    def _running_containers(self, pod: Any, container_ids: list[str]) -> list[str]:
        """Each container of ``pod`` still running: its last lines (what it is waiting for) and
        its state in the kernel; its id is added to ``container_ids``."""
        lines = []
        for status in pod.status.container_statuses or []:
            if not status.state.running:
                continue
            try:
                log = self.core.read_namespaced_pod_log(
                    pod.metadata.name, pod.metadata.namespace, container=status.name, tail_lines=5
                )
            except ApiException as err:
                log = f"cannot read its log ({err.status} {err.reason})"
            lines += [f"{status.name}: {line[:300]}" for line in str(log).splitlines()]
            if status.container_id:
                cid = status.container_id.rpartition("://")[2]
                container_ids.append(cid)
                lines.append(f"{status.name} in the kernel: {cgroups.container_state(cid)}")
        return lines

    def _spawn(self, name: str, target: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=self._guarded(target), name=name, daemon=True)
        self.background = [t for t in self.background if t.is_alive()]
        self.background.append(thread)
        thread.start()
        return thread

    def _guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as err:
                self.record.notes.append(f"{threading.current_thread().name} failed: {err!r}")
                self.record.say("harness-error", repr(err), disturbance=False)

        return run

    # -- the node ---------------------------------------------------------------------------

    def drain_node(self) -> str:
        self.cordoned = True

        def drain() -> None:
            done = kubectl(
                self.plane,
                "drain",
                NODE_NAME,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=20s",
            )
            refused = done.stderr.count("Cannot evict pod")
            evicted = re.findall(r"pod/(\S+) evicted", done.stdout)
            # An eviction is refused only for pods already marked busy (one runner listing late).
            self.hit_by.update({name: "an eviction before its busy mark" for name in evicted})
            self.record.say(
                "drain-ended",
                f"exit {done.returncode}: {len(evicted)} evicted, {refused} eviction refusals (busy)",
                disturbance=False,
            )

        self.drain = self._spawn("drain", drain)
        return f"kubectl drain {NODE_NAME} (20 s)"

    def uncordon(self) -> str:
        if self.drain is not None:
            self.drain.join(40)
        done = kubectl(self.plane, "uncordon", NODE_NAME)
        self.cordoned = False
        return f"kubectl uncordon: exit {done.returncode}"

    # -- operators ------------------------------------------------------------------------

    def leader(self) -> str | None:
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(LEASE, LEASE_NAMESPACE)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        holder = lease.spec.holder_identity
        return holder if holder in self.operators and self.operators[holder].alive else None

    def _other(self, name: str) -> str:
        return next(n for n in REPLICAS if n != name)

    def kill_operator(self, which: str, signal_name: str) -> str:
        leader = self.leader()
        if leader is None:
            return "no leader right now: nothing done"
        target = leader if which == "leader" else self._other(leader)
        operator = self.operators[target]
        if signal_name == "KILL":
            operator.kill()
        else:
            code = operator.stop()
            if code != 0:
                self.record.notes.append(f"operator {target} exited with {code} on SIGTERM")
        if which == "standby":
            operator.start().wait_ready(60)
            return f"{target} (standby) kill -9, started again"
        # Started again once the other replica leads, from the main thread: an operator dies
        # with the thread that started it (testworld.simulator).
        started = time.monotonic()
        self.timers.append(
            Timer(
                started,
                started + 20,
                "operator-again",
                lambda: self._again(target, started),
                lambda: self.leader() == self._other(target),
            )
        )
        return f"{target} (leader) {'kill -9' if signal_name == 'KILL' else 'SIGTERM'}"

    def _again(self, target: str, since: float) -> str:
        leader = self.leader()
        self.operators[target].start().wait_ready(60)
        return (
            f"{target} started again; {leader} took the lead {time.monotonic() - since:.1f}s after the stop"
        )

    def restarting(self) -> bool:
        return any(t.kind == "operator-again" for t in self.timers)

    # -- GitHub ---------------------------------------------------------------------------

    def _fault_path(self) -> str:
        # Substrings of the operator's endpoints: listings, tokens, deletions; the poller's runs.
        return self.rng.choice(["/actions/runners", "/actions/runs"])

    def github_5xx(self) -> str:
        count, status, path = self.rng.randint(3, 12), self.rng.choice([500, 502, 503]), self._fault_path()
        self.fake.fail_next(count, status, path=path)
        return f"next {count} requests to *{path}* answer {status}"

    def github_429(self) -> str:
        count, retry, path = self.rng.randint(2, 8), self.rng.randint(3, 20), self._fault_path()
        self.fake.secondary_limit_next(count, retry_after=retry, path=path)
        return f"next {count} requests to *{path}* hit the secondary limit (Retry-After {retry})"

    def github_slow(self) -> str:
        if self.rng.random() < 0.5:
            count, hold, path = self.rng.randint(1, 4), round(self.rng.uniform(5, 15), 1), self._fault_path()
            self.fake.hang_next(count, max_seconds=hold, path=path)
            return f"next {count} requests to *{path}* hang up to {hold}s"
        latency, length = round(self.rng.uniform(0.5, 3.0), 1), round(self.rng.uniform(8, 25), 1)
        self.fake.set_latency(latency)
        end = time.monotonic() + length
        self.timers.append(Timer(end, end, "github-fast", self._fast))
        return f"every answer {latency}s late for {length}s"

    def _fast(self) -> str:
        self.fake.set_latency(0)
        return "latency back to 0"

    def run_timers(self, *, all_now: bool = False) -> None:
        now = time.monotonic()
        due = [t for t in self.timers if all_now or t.due(now)]
        self.timers = [t for t in self.timers if t not in due]
        for timer in due:
            self.record.say(timer.kind, timer.action())

    # -- observations ---------------------------------------------------------------------

    def pools(self) -> list[dict[str, Any]]:
        return [
            p
            for s in self.slots
            for p in self.custom.list_namespaced_custom_object(
                api.GROUP, api.VERSION, s.namespace, api.PLURAL
            )["items"]
        ]

    def unconverged(self) -> list[str]:
        """Why the world has not converged yet (empty: it has)."""
        why: list[str] = []
        for slot in self.slots:
            if slot.recreating:
                why.append(f"{slot.namespace} is being deleted and made again")
        pods_by_pool: dict[tuple[str, str], list[Any]] = {}
        for pod in self._pods():
            key = (pod.metadata.namespace, (pod.metadata.labels or {}).get(naming.POOL_LABEL, ""))
            pods_by_pool.setdefault(key, []).append(pod)
        pools = self.pools()
        if len(pools) != SLOTS * 2 and not why:
            why.append(f"{len(pools)} pools, not {SLOTS * 2}")
        for pool in pools:
            why += _pool_unconverged(
                pool, pods_by_pool.get((pool["metadata"]["namespace"], pool["metadata"]["name"]), [])
            )
        return why

    def orphan_runners(self) -> list[str]:
        """Runners on GitHub whose pod does not exist (any of the soak's pool labels)."""
        pods = {(p.metadata.namespace, p.metadata.name) for p in self._pods_everywhere()}
        orphans = []
        for runner in self.fake.runners(REPO):
            owner = next(
                (lbl for lbl in iter_runner_labels(runner) if lbl.startswith("soak-") and "/" in lbl), None
            )
            if owner is None:
                continue
            namespace = owner.split("/", 1)[0]
            if (namespace, runner["name"]) not in pods:
                orphans.append(f"{namespace}/{runner['name']} ({runner['status']}, busy={runner['busy']})")
        return orphans

    def _pods_everywhere(self) -> list[Any]:
        return [p for s in self.slots for p in self._pods(s.namespace)]

    def sample(self, cpu_before: dict[str, tuple[int, float, float]]) -> None:
        """RSS of each replica and their CPU since the last sample (% of one core)."""
        now = time.monotonic()
        rss: dict[str, float | None] = {}
        cpu = 0.0
        for name, operator in self.operators.items():
            rss[name] = None
            if not operator.alive:
                continue
            with contextlib.suppress(OSError, ValueError):
                pid = operator.pid
                rss[name] = _rss_mib(pid)
                used = operator.cpu_seconds()
                last = cpu_before.get(name)
                if last is not None and last[0] == pid and now > last[2]:
                    cpu += (used - last[1]) / (now - last[2]) * 100
                cpu_before[name] = (pid, used, now)
        with self.record.lock:
            self.record.samples.append(
                {
                    "t": round(self.record.now(), 2),
                    "rss_mib": rss,
                    "cpu_percent": round(cpu, 1),
                    "leader": self._leader_quietly(),
                }
            )

    def _leader_quietly(self) -> str | None:
        try:
            return self.leader()
        except Exception:
            return None

    def refusals(self) -> list[str]:
        return sorted(set(rbac_refusals(self.plane, OPERATOR_USER, self.audit_from)))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise ValueError("no VmRSS")


def _condition(pool: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (pool.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _pool_unconverged(pool: dict[str, Any], pods: list[Any]) -> list[str]:
    name = f"{pool['metadata']['namespace']}/{pool['metadata']['name']}"
    status = pool.get("status") or {}
    spec = pool["spec"]
    want = status.get("desiredReplicas") if spec.get("autoscaling") else spec.get("replicas", 0)
    ready = _condition(pool, ConditionType.READY)
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    running = [
        p
        for p in live
        if p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    why = []
    if pool["metadata"].get("deletionTimestamp"):
        # Its finalizer holds it: what the finalizer waits for says why (not the counts).
        held = _condition(pool, ConditionType.RUNNERS_DEREGISTERED)
        return [f"{name}: being deleted, {held.get('reason')}: {held.get('message')}"]
    if status.get("observedGeneration") != pool["metadata"].get("generation"):
        why.append(f"{name}: generation {pool['metadata'].get('generation')} not observed")
    if ready.get("status") != "True":
        why.append(f"{name}: Ready={ready.get('status')} ({ready.get('reason')}: {ready.get('message')})")
    if want is None or status.get("replicas") != want or status.get("readyReplicas") != want:
        why.append(
            f"{name}: replicas {status.get('replicas')}/ready {status.get('readyReplicas')}, wants {want}"
        )
    if status.get("updatedReplicas") not in (None, want):
        why.append(f"{name}: updated {status.get('updatedReplicas')} of {want}")
    if want is not None and (len(live) != want or len(running) != want):
        why.append(f"{name}: {len(live)} pods ({len(running)} running and ready), wants {want}")
    return why


#: The runner managers' line for a pod told to stop again (``RunnerManagers._hurry_pod``).
_OUTLIVED = re.compile(r"pod (\S+) still ran its runner container more than \d+s after it was told to stop")


def _pod_held(pod: Any) -> str:
    """A pod left in a namespace being deleted: since when it is being deleted, its phase and
    each container's state (a container still running is what holds it)."""
    states = []
    for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        state = status.state
        if state.running:
            states.append(f"{status.name} running")
        elif state.terminated:
            states.append(f"{status.name} exited {state.terminated.exit_code}")
        else:
            states.append(f"{status.name} waiting ({state.waiting.reason if state.waiting else '?'})")
    # deletionTimestamp is when the grace ends (the kubelet's SIGKILL), not when delete was asked.
    deleted = pod.metadata.deletion_timestamp
    since = f"being deleted, grace ends {deleted:%H:%M:%S}" if deleted else "not deleted"
    return f"pod {pod.metadata.name} ({since}, {pod.status.phase}, {', '.join(states) or 'no container'})"


# ------------------------------------------------------------------------------ the run


#: (kind, weight): how often the RNG picks each disturbance.
KINDS: tuple[tuple[str, float], ...] = (
    ("job-webhook", 6.0),
    ("job-poll", 4.0),
    ("scale", 2.0),
    ("template", 1.5),
    ("drain", 1.0),
    ("uncordon", 2.5),
    ("delete-pod", 2.0),
    ("delete-namespace", 0.7),
    ("kill-leader", 0.8),
    ("kill-standby", 0.5),
    ("sigterm-leader", 0.5),
    ("github-5xx", 1.0),
    ("github-429", 1.0),
    ("github-slow", 1.0),
)


class Soak:
    def __init__(self, world: World, opts: Options) -> None:
        self.world, self.opts, self.record, self.rng = world, opts, world.record, world.rng
        self.last_disturbance = 0.0
        #: Every kind once early on (in a seeded order), so that a short run meets them all.
        self.unmet = [k for k, _ in KINDS if not k.startswith("job-")]
        self.rng.shuffle(self.unmet)

    def possible(self, kind: str) -> bool:
        w = self.world
        operators_quiet = not w.restarting() and all(o.alive for o in w.operators.values())
        drain_over = w.drain is None or not w.drain.is_alive()
        return {
            "drain": not w.cordoned,
            "uncordon": w.cordoned and drain_over,
            "delete-namespace": all(not s.recreating for s in w.slots),
            "scale": bool(w._ready_slots()),
            "template": bool(w._ready_slots()),
            "kill-leader": operators_quiet,
            "kill-standby": operators_quiet,
            "sigterm-leader": operators_quiet,
        }.get(kind, True)

    def disturb(self) -> None:
        kinds = [(k, wt) for k, wt in KINDS if self.possible(k)]
        unmet = [k for k in self.unmet if self.possible(k)]
        if unmet and self.rng.random() < 0.6:
            kind = unmet[0]
        else:
            kind = self.rng.choices([k for k, _ in kinds], [wt for _, wt in kinds])[0]
        if kind in self.unmet:
            self.unmet.remove(kind)
        w = self.world
        actions: dict[str, Callable[[], str]] = {
            "job-webhook": lambda: w.queue_jobs(polled=False),
            "job-poll": lambda: w.queue_jobs(polled=True),
            "scale": w.scale,
            "template": w.template,
            "drain": w.drain_node,
            "uncordon": w.uncordon,
            "delete-pod": w.delete_pod,
            "delete-namespace": w.delete_namespace,
            "kill-leader": lambda: w.kill_operator("leader", "KILL"),
            "kill-standby": lambda: w.kill_operator("standby", "KILL"),
            "sigterm-leader": lambda: w.kill_operator("leader", "TERM"),
            "github-5xx": w.github_5xx,
            "github-429": w.github_429,
            "github-slow": w.github_slow,
        }
        try:
            detail = actions[kind]()
        except ApiException as err:
            detail = f"refused: {err.status} {err.reason}"
        self.record.say(kind, detail)
        self.last_disturbance = time.monotonic()

    def chaos(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.disturb()
            wake = min(end, time.monotonic() + self.rng.uniform(*GAP_SECONDS))
            while time.monotonic() < wake:
                self.world.run_timers()
                time.sleep(min(0.5, max(0.0, wake - time.monotonic())))  # the chaos's own clock

    def settle(self) -> None:
        w = self.world
        start = self.record.now()
        if w.cordoned:
            self.record.say("uncordon", w.uncordon() + " (settle)")
            self.last_disturbance = time.monotonic()
        if w.timers:
            w.run_timers(all_now=True)
            self.last_disturbance = time.monotonic()
        w.fake.clear_faults()
        self.record.say("settle", "chaos paused, GitHub faults cleared", disturbance=False)
        deadline = self.last_disturbance + CONVERGE_SECONDS
        why: list[str] = []
        orphans: list[str] = []

        def settled() -> bool:
            nonlocal why, orphans
            try:
                why, orphans = w.unconverged(), w.orphan_runners()
            except ApiException as err:
                why = [f"API error {err.status} while looking"]
            return not why and not orphans

        ok = poll_until(settled, max(1.0, deadline - time.monotonic()), 1.0)
        took = time.monotonic() - self.last_disturbance
        if not ok:
            # A namespace that is not gone yet says what holds it (its pods, its pools' finalizers,
            # the kubelet's last words on those pods), so that a failure explains itself; a note,
            # not a reason the pools did not converge.
            self.record.notes += [
                f"+{self.record.now():.0f}s {s.namespace} not gone yet: {w.what_holds(s.namespace)}"
                for s in w.slots
                if s.recreating
            ]
        inv = self.record.invariants
        inv["pools converge within 60 s"].check(not why, f"+{self.record.now():.0f}s: {why}")
        inv["no runner without its pod"].check(not orphans, f"+{self.record.now():.0f}s: {orphans}")
        self.record.say(
            "settled" if ok else "NOT-SETTLED",
            f"{took:.1f}s after the last disturbance" + ("" if ok else f": {why} orphans {orphans}"),
            disturbance=False,
        )
        self.record.settles.append((round(start, 2), round(self.record.now(), 2)))

    def run(self) -> None:
        total = self.opts.minutes * 60
        reserve = SETTLE_RESERVE_SECONDS
        first = poll_until(lambda: not self.world.unconverged(), 120, 1.0)
        self.record.say("ready" if first else "NOT-READY", "the world before the chaos", disturbance=False)
        self.record.invariants["pools converge within 60 s"].check(
            first, f"not converged 120 s after the pools were made: {self.world.unconverged()}"
        )
        self.record.t0 = time.monotonic()
        self.world.record.job_events.clear()
        end = time.monotonic() + total
        while end - time.monotonic() > reserve + 10:
            self.chaos(min(CHAOS_SECONDS, end - time.monotonic() - reserve))
            self.settle()
        self.finish_jobs()

    def finish_jobs(self) -> None:
        w = self.world
        done = poll_until(
            lambda: all(j["status"] == "completed" for j in w.fake.jobs(REPO)), FINAL_JOBS_SECONDS, 1.0
        )
        self.record.say(
            "jobs-done" if done else "JOBS-LEFT", "every job completed" if done else "", disturbance=False
        )
        inv = self.record.invariants["jobs end success, once"]
        for job in w.fake.jobs(REPO):
            jid, runner = int(job["id"]), job["runner_name"]
            how = "webhook" if jid not in w.polled else "polled"
            if job["status"] != "completed":
                result = f"not completed ({job['status']})"
            elif w.in_progress[jid] != 1 or w.completed[jid] != 1:
                result = f"ran {w.in_progress[jid]} times"
            elif job["conclusion"] == "success":
                result = "success"
            elif runner in w.hit_by and self.opts.deletions_cancel_jobs:
                result = f"{job['conclusion']}: hit by {w.hit_by[runner]} (expected before busy-grace)"
                self.record.jobs[str(jid)] = result
                continue
            else:
                result = str(job["conclusion"])
            self.record.jobs[str(jid)] = result
            inv.check(result == "success", f"job {jid} ({how}, runner {runner}): {result}")
        inv_tok = self.record.invariants["no expired-token registration"]
        inv_tok.checks += w.fake.registrations
        inv_tok.violations += len(w.fake.expired)
        inv_tok.details += w.fake.expired[:50]
        refused = w.refusals()
        self.record.invariants["no RBAC refusal"].check(not refused, f"{refused}")


def judge_rss(record: Record, total_seconds: float) -> dict[str, Any]:
    """Each sample after the warm-up against the highest RSS seen at the warm-up's end."""
    warmup = min(WARMUP_CAP_SECONDS, total_seconds / 3)
    window = min(60.0, warmup / 3)

    def top(sample: dict[str, Any]) -> float | None:
        values = [v for v in sample["rss_mib"].values() if v is not None]
        return max(values) if values else None

    baseline_values = [v for s in record.samples if warmup - window <= s["t"] <= warmup if (v := top(s))]
    inv = record.invariants["RSS growth after warm-up <= 10 %"]
    baseline = max(baseline_values) if baseline_values else None
    if baseline is not None:
        for sample in record.samples:
            value = top(sample)
            if sample["t"] > warmup and value is not None:
                inv.check(
                    value <= baseline * (1 + RSS_GROWTH_LIMIT),
                    f"+{sample['t']:.0f}s: {value} MiB > {baseline} MiB + 10 %",
                )
    rss = [v for s in record.samples if (v := top(s))]
    cpu = [s["cpu_percent"] for s in record.samples]
    return {
        "warmup_seconds": warmup,
        "rss_baseline_mib": baseline,
        "rss_mib": {
            "start": rss[0] if rss else None,
            "peak": max(rss, default=None),
            "end": rss[-1] if rss else None,
        },
        "cpu_percent": {
            "start": cpu[1] if len(cpu) > 1 else None,
            "peak": max(cpu, default=None),
            "end": cpu[-1] if cpu else None,
            "mean": round(sum(cpu) / len(cpu), 1) if cpu else None,
        },
    }


def sampler(world: World, stop: threading.Event) -> None:
    before: dict[str, tuple[int, float, float]] = {}
    while not stop.wait(SAMPLE_SECONDS):
        with contextlib.suppress(Exception):
            world.sample(before)


def soak(plane: ControlPlane, node: Node, opts: Options) -> dict[str, Any]:
    """Run the soak on a started control plane and node; returns the report (also written)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = opts.out or RESULTS / f"soak-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.with_suffix("").with_name(out.stem + "-logs")
    logs.mkdir(parents=True, exist_ok=True)
    record = Record(log_file=logs / "disturbances.log")
    rng = random.Random(opts.seed)
    world = World(plane, node, record, rng, logs)
    stop = threading.Event()
    record.say("start", f"seed {opts.seed}, {opts.minutes:g} minutes, logs in {logs}", disturbance=False)
    with world.running():
        thread = threading.Thread(target=sampler, args=(world, stop), name="sampler", daemon=True)
        thread.start()
        try:
            Soak(world, opts).run()
        finally:
            stop.set()
            thread.join(10)
    resources = judge_rss(record, opts.minutes * 60)
    report: dict[str, Any] = {
        "when": stamp,
        "options": {**{k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()}},
        "invariants": {name: asdict(inv) for name, inv in record.invariants.items()},
        "violations": record.violations(),
        "disturbances_by_kind": dict(Counter(d["kind"] for d in record.disturbances).most_common()),
        "jobs_by_result": dict(Counter(record.jobs.values()).most_common()),
        "jobs_by_delivery": {"webhook": len(record.jobs) - len(world.polled), "polled": len(world.polled)},
        "resources": resources,
        "replicas": list(REPLICAS),
        "notes": record.notes,
        "disturbances": record.disturbances,
        "settles": record.settles,
        "job_events": record.job_events,
        "samples": record.samples,
        "logs": str(logs),
        "json": str(out),
    }
    out.write_text(json.dumps(report, indent=1))
    try:
        report["plot"] = str(soak_plot.draw(out.with_suffix(".png"), report))
    except Exception as err:  # the figures stand without the picture
        report["notes"].append(f"no plot: {err!r}")
    out.write_text(json.dumps(report, indent=1))
    return report


# ------------------------------------------------------------------------------ the table


def table(report: dict[str, Any]) -> str:
    opts = report["options"]
    lines = [f"chaos soak: {opts['minutes']:g} minutes, seed {opts['seed']}"]
    width = max(len(n) for n in report["invariants"])
    lines.append(f"  {'invariant'.ljust(width)}  {'checks':>7}  {'violations':>10}")
    for name, inv in report["invariants"].items():
        lines.append(f"  {name.ljust(width)}  {inv['checks']:>7}  {inv['violations']:>10}")
    lines.append(
        "  disturbances: " + ", ".join(f"{k} {v}" for k, v in report["disturbances_by_kind"].items())
    )
    lines.append("  jobs: " + ", ".join(f"{k} {v}" for k, v in report["jobs_by_result"].items()))
    lines.append(
        "  jobs by delivery: " + ", ".join(f"{k} {v}" for k, v in report["jobs_by_delivery"].items())
    )
    res = report["resources"]
    rss, cpu = res["rss_mib"], res["cpu_percent"]
    lines.append(
        f"  operator RSS (MiB, higher replica): start {rss['start']}, peak {rss['peak']}, end {rss['end']}"
        f" (baseline at warm-up {res['rss_baseline_mib']}, warm-up {res['warmup_seconds']:.0f}s)"
    )
    lines.append(
        f"  operator CPU (% of a core, both replicas): start {cpu['start']}, peak {cpu['peak']}, "
        f"end {cpu['end']}, mean {cpu['mean']}"
    )
    for name, inv in report["invariants"].items():
        for detail in inv["details"][:10]:
            lines.append(f"  VIOLATION {name}: {detail}")
    for note in report["notes"]:
        lines.append(f"  note: {note}")
    lines.append(f"  json: {report['json']}; plot: {report.get('plot')}; logs: {report['logs']}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="length of the chaos and its settles")
    p.add_argument(
        "--seed", type=int, default=int(time.time()) % 100_000, help="the RNG's seed (reproduce a run)"
    )
    p.add_argument("--out", type=Path, help="JSON report (the PNG goes beside it)")
    p.add_argument(
        "--deletions-cancel-jobs",
        action="store_true",
        help="count jobs cancelled by a pod or namespace deletion apart, not as violations "
        "(an operator from before the busy grace)",
    )
    args = p.parse_args(argv)
    return Options(
        minutes=args.minutes, seed=args.seed, out=args.out, deletions_cancel_jobs=args.deletions_cancel_jobs
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if not seal.is_sealed():
        print(
            "the soak needs the real node: run it inside the seal, e.g.\n  "
            ".venv/bin/python -m testworld.node.seal -- .venv/bin/python -m bench.soak --minutes 3",
            file=sys.stderr,
        )
        return 2
    plane = ControlPlane(for_node=True)
    plane.start()
    try:
        node = Node(plane)
        node.start()
        try:
            report = soak(plane, node, opts)
        finally:
            node.stop()
    finally:
        plane.stop()
    print(table(report))
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
