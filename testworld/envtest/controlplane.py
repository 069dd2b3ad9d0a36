"""A real etcd + kube-apiserver (+ kube-controller-manager) on loopback.

This is what controller-runtime's envtest does for Go; the Python ecosystem has
no maintained equivalent, so it is written here.  Without a node pods stay
Pending, which is all most of the operator's tests need.  The controller manager
is optional; with it, owner-reference garbage collection, namespace deletion and
Deployment → ReplicaSet → Pod work as in a cluster.  ``for_node=True`` adds what a
kubelet needs around it (``testworld.node``): kube-scheduler and the node
lifecycle, disruption, pod garbage collection, taint eviction and resource quota controllers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from testworld.envtest import assets, audit, certs
from testworld.node import seal
from testworld.ports import free_port

_LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the tail of its log."""


@dataclass
class Component:
    """One process of the test world (etcd, an API server, a kubelet ...) with its log file."""

    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None

    def start(self) -> None:
        with self.log.open("wb") as sink:
            # A session of its own so teardown can signal every child it forks.
            self.popen = subprocess.Popen(
                self.args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=self.env
            )

    def tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-_LOG_TAIL_LINES:])

    def fail(self, why: str) -> ControlPlaneError:
        return ControlPlaneError(f"{self.name} {why}; last lines of {self.log}:\n{self.tail()}")

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise self.fail(f"exited with code {self.popen.returncode}")

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=grace)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None


class ComponentGroup:
    """Processes started and stopped together: ``with group:`` and the ``pids`` they run as."""

    _processes: list[Component]

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]


@dataclass
class ControlPlane(ComponentGroup):
    """Start with ``with ControlPlane() as cp:``; ``cp.kubeconfig`` is ready to use."""

    with_controller_manager: bool = True
    #: Also the scheduler and the controllers a real node needs (see the module docstring).
    for_node: bool = False
    start_timeout: float = 90.0
    workdir: Path = field(init=False)
    kubeconfig: Path = field(init=False)
    url: str = field(init=False)
    port: int = field(init=False)
    #: Where pods reach the API server (in-cluster clients such as the operator installed from
    #: deploy/): the node's bridge address when a node can join, i.e. inside the sealed world;
    #: else None and the API server listens on loopback only.
    pod_address: str | None = field(init=False, default=None)
    _processes: list[Component] = field(init=False, default_factory=list)

    def start(self) -> None:
        names = assets.BINARIES + (("kube-scheduler",) if self.for_node else ())
        binaries = assets.ensure_binaries(names)
        self.workdir = Path(tempfile.mkdtemp(prefix="runnerpool-envtest-"))
        self.pod_address = _sealed_node_address() if self.for_node else None
        try:
            pki = certs.generate(self.workdir / "pki", (self.pod_address,) if self.pod_address else ())
            etcd_url = self._start_etcd(binaries["etcd"])
            self._start_apiserver(binaries["kube-apiserver"], pki, etcd_url)
            self._write_kubeconfig(pki)
            if self.with_controller_manager:
                self._start_controller_manager(binaries["kube-controller-manager"], pki)
            if self.for_node:
                self._start_scheduler(binaries["kube-scheduler"])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if getattr(self, "workdir", None) is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _spawn(self, name: str, args: list[str]) -> Component:
        process = Component(name, args, self.workdir / f"{name}.log")
        self._processes.append(process)
        process.start()
        return process

    def _wait(self, process: Component, url: str, ctx: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            process.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2, context=ctx) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
                pass
            time.sleep(0.1)
        raise process.fail(f"was not ready at {url} within {self.start_timeout:.0f}s")

    def _start_etcd(self, binary: Path) -> str:
        client_url = f"http://127.0.0.1:{free_port()}"
        peer_url = f"http://127.0.0.1:{free_port()}"
        process = self._spawn(
            "etcd",
            [
                str(binary),
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"default={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level",
                "warn",
            ],
        )
        self._wait(process, f"{client_url}/health", None)
        return client_url

    def _admin_context(self, pki: certs.Pki) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.workdir / "pki" / "serving-ca.crt"))
        ctx.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        return ctx

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def audit_events(self) -> Iterator[dict[str, Any]]:
        """Every request the API server has answered so far (audit level Metadata).

        The server's own record of who did what: tests use it to prove which
        permissions the operator uses and that it was never refused.
        """
        yield from audit.complete_events(self.audit_log)

    def _audit_flags(self) -> list[str]:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        # The control plane's own chatter is not what tests look at.
                        {"level": "None", "users": ["system:kube-controller-manager", "system:apiserver"]},
                        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
                        {"level": "Metadata"},
                    ],
                }
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        ]

    def _listen_flags(self) -> list[str]:
        """Loopback; with pods, also the node's bridge (inside the seal all addresses are its own).

        The ``kubernetes`` Service's endpoint is then that address, as in a cluster, and a
        pod's in-cluster client reaches it there (there is no kube-proxy for the ClusterIP).
        """
        if self.pod_address is None:
            return ["--advertise-address=127.0.0.1", "--bind-address=127.0.0.1"]
        return [f"--advertise-address={self.pod_address}", "--bind-address=0.0.0.0"]

    def _admission_flags(self) -> list[str]:
        # As in hardened clusters: setting blockOwnerDeletion needs update on <owner>/finalizers.
        enabled = "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"
        if not (self.with_controller_manager and self.for_node):
            # As envtest: no controller would create the default ServiceAccount in time.
            return ["--disable-admission-plugins=ServiceAccount", enabled]
        # Pods that run get their ServiceAccount's token mounted, as in every cluster (the
        # controller manager creates each namespace's "default" account and kube-root-ca.crt).
        return [enabled]

    def _start_apiserver(self, binary: Path, pki: certs.Pki, etcd_url: str) -> None:
        port = free_port()
        self.port = port
        self.url = f"https://127.0.0.1:{port}"
        process = self._spawn(
            "kube-apiserver",
            [
                str(binary),
                *self._listen_flags(),
                f"--secure-port={port}",
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={self.workdir / 'pki'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.client_ca}",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                *self._admission_flags(),
                "--enable-priority-and-fairness=false",
                "--event-ttl=1h",
                # Reach a kubelet (logs, exec) by its IP: its name would go to the host's DNS.
                "--kubelet-preferred-address-types=InternalIP",
                *self._audit_flags(),
            ],
        )
        self._wait(process, f"{self.url}/readyz", self._admin_context(pki))

    def _write_kubeconfig(self, pki: certs.Pki) -> None:
        self.kubeconfig = self.workdir / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.workdir / "pki" / "serving-ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "envtest-admin",
                    "user": {"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)},
                }
            ],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest-admin"}}],
            "current-context": "envtest",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _controllers(self) -> str:
        controllers = [
            "deployment-controller",
            "replicaset-controller",
            "garbage-collector-controller",
            "namespace-controller",
            "serviceaccount-controller",
            # Folds aggregate-to-edit/-view ClusterRoles (deploy/rbac/tenant_roles.yaml) into edit/view.
            "clusterrole-aggregation-controller",
        ]
        if self.for_node:
            # The API server taints a new Node not-ready; only node-lifecycle removes it.
            controllers += [
                "node-lifecycle-controller",
                "disruption-controller",
                "pod-garbage-collector-controller",
                "taint-eviction-controller",
                # The CA in every pod's ServiceAccount volume (the kube-root-ca.crt ConfigMap).
                "root-ca-certificate-publisher-controller",
                # A Service's ready pods: what the API server's service proxy sends requests to.
                "endpoints-controller",
                # A ResourceQuota's status.used: admission refuses against it, as on a real
                # cluster ("exceeded quota"), not with "status unknown" for every quota.
                "resourcequota-controller",
            ]
        return ",".join(controllers)

    def _insecure_health_check(self) -> ssl.SSLContext:
        """The components' own self-signed serving certificates; only /healthz is read."""
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        return insecure

    def _start_client_component(self, name: str, binary: Path, flags: list[str]) -> None:
        """A component that talks to the API server as admin and serves /healthz on loopback."""
        port = free_port()
        process = self._spawn(
            name,
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                *flags,
            ],
        )
        self._wait(process, f"https://127.0.0.1:{port}/healthz", self._insecure_health_check())

    def _start_scheduler(self, binary: Path) -> None:
        self._start_client_component(
            "kube-scheduler", binary, ["--kube-api-qps=500", "--kube-api-burst=1000"]
        )

    def _start_controller_manager(self, binary: Path, pki: certs.Pki) -> None:
        self._start_client_component(
            "kube-controller-manager",
            binary,
            [
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={self.workdir / 'pki' / 'serving-ca.crt'}",
                f"--controllers={self._controllers()}",
                "--concurrent-gc-syncs=5",
                # The default client limit (20 qps) makes Deployments of hundreds of pools wait
                # for ReplicaSets and pods here, which is the harness, not the operator, talking.
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-deployment-syncs=20",
                "--concurrent-replicaset-syncs=20",
            ],
        )


def _sealed_node_address() -> str | None:
    return seal.NODE_IP if seal.is_sealed() else None


def main() -> int:
    """Start a control plane and keep it up until Ctrl-C: handy for poking at it by hand."""
    # Blocked first, so the signal waits for sigwait instead of killing us before teardown
    # (the components run in sessions of their own and would outlive us).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    with ControlPlane() as cp:
        print(f"export KUBECONFIG={cp.kubeconfig}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
