"""Stand-ins for what the local control plane lacks, shared by the demo, the e2e tests and the bench.

The local control plane (``testworld.envtest``) has no kubelet and no runner image, so a
pool's pods are never started and never register.  Three callers need the same two things
around a real operator, and keeping them here is what stops them drifting apart:

* :class:`OperatorProcess` runs the operator's own console script as a child process, the
  way it runs in a cluster, so signals, flags, ports and logs are the real ones (an operator
  started in-process would share the caller's Prometheus registry, threads and GIL).
* :class:`RunnerSimulator` plays each runner pod: it reads the token from the Secret the pod
  mounts, registers on the fake GitHub with exactly the scope, name and labels the pod spec
  gives ``config.sh``, and reports the pod Running and Ready as a kubelet would.  A
  registration that the fake accepts proves the operator delivered a live token for the
  right scope; one it rejects is kept in :attr:`RunnerSimulator.rejections` and retried
  when the Secret changes, as a crash-looping pod would.  A JIT pod's own Secret (its JIT
  config, REST's or a runner scale set's) is run instead, as ``run.sh --jitconfig`` would: the
  runner comes online without a registration.  A scale set runner takes the jobs its scale set
  assigns (the fake plays them, `testworld.fakegithub.scaleset`); when its job completed and
  GitHub removed it, the pod's runner container exits 0 and the pod has Succeeded, as the
  kubelet reports an ephemeral runner's pod (restartPolicy OnFailure).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.informer import ADDED, DELETED, MODIFIED

from runnerpool import naming
from runnerpool.naming import MANAGED_BY_SELECTOR
from runnerpool.runtime.informers import ListWatchAdapter, StoppableInformer
from testworld.envtest.serviceaccount import uses_a_client_certificate
from testworld.fakegithub import scaleset
from testworld.fakegithub.state import FakeGitHubError, GitHubState
from testworld.ports import free_port
from testworld.wait import poll_until

__all__ = ["OperatorError", "OperatorProcess", "RunnerSimulator"]

_TOKEN_VOLUME = "runner-token"


# ------------------------------------------------------------------------------ the operator


class OperatorError(RuntimeError):
    """The operator process died or never became ready; the message ends with its log tail."""


def operator_command() -> list[str]:
    """The installed console script next to this interpreter, so a venv runs its own copy."""
    beside = Path(sys.executable).with_name("runnerpool-operator")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("runnerpool-operator")
    if found:
        return [found]
    return [sys.executable, "-m", "runnerpool.launch"]


def _dies_with_its_starter() -> list[str]:
    """``setpriv --pdeathsig KILL``: the kernel kills the operator when the thread that
    started it goes, so a test or demo killed hard outside the seal leaves no operator
    spinning against a vanished control plane (four did for 1½ h once).  util-linux's
    setpriv execs the command: the PID is the operator's.  Start operators from a thread
    that outlives them (the main thread does)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


@dataclass
class OperatorProcess:
    """``runnerpool-operator`` as a child process with its JSON log in ``log_path``.

    Restarts append to the same log (each start writes a marker line first), so a test that
    kills and restarts the operator still ends up with one file telling the whole story.
    The child gets a session of its own: a Ctrl-C meant for the parent does not reach it,
    and the parent decides the shutdown order.  ``kubeconfig`` must log in as deploy/'s
    ServiceAccount (``operator_kubeconfig``), never as admin: a start with the control plane's
    admin certificate is refused, so no test can hide a permission the install lacks.
    """

    kubeconfig: Path
    github_api_url: str
    log_path: Path
    namespaces: Sequence[str] = ()
    extra_args: Sequence[str] = ()
    #: ``--component``: ``webhook-receiver`` runs the receiver apart (with its own account's
    #: kubeconfig, ``receiver_kubeconfig``); ``all`` both in one process.
    component: str = "operator"
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    #: 0 turns the webhook receiver off: two operators on one machine (failover tests) must not
    #: share its default port. A test that sends deliveries names its own port.
    webhook_port: int = 0
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)
    starts: int = field(default=0, init=False)

    def command(self) -> list[str]:
        cmd = [
            *operator_command(),
            "--kubeconfig",
            str(self.kubeconfig),
            "--github-api-url",
            self.github_api_url,
            # Tests use loopback only: nothing listens where another machine could reach it.
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--webhook-port",
            str(self.webhook_port),
            "--component",
            self.component,
            "--log-format",
            "json",
        ]
        for namespace in self.namespaces:
            cmd += ["--namespace", namespace]
        return [*cmd, *self.extra_args]

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise OperatorError("the operator was never started")
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> OperatorProcess:
        if self.alive:
            return self
        if uses_a_client_certificate(self.kubeconfig):
            raise OperatorError(
                f"{self.kubeconfig} logs in with a client certificate (the test world's admin): the "
                "operator under test runs with deploy/'s permissions; pass "
                "testworld.envtest.serviceaccount.operator_kubeconfig(control_plane)"
            )
        self.starts += 1
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as sink:
            sink.write(f"--- operator start #{self.starts}: {' '.join(self.command())}\n".encode())
            sink.flush()
            self.popen = subprocess.Popen(
                [*_dies_with_its_starter(), *self.command()],
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until ``/readyz`` answers 200, i.e. the operator's caches are synced."""

        def ready() -> bool:
            if not self.alive:
                raise self._failure("exited before it became ready")
            return self.probe("/readyz") == 200

        if not poll_until(ready, timeout, 0.05):
            raise self._failure(f"was not ready within {timeout:.0f}s")

    def wait_catches(self, signum: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Until the process has a handler for ``signum`` (``SigCgt`` in /proc/PID/status).

        Before that only the bare interpreter runs, and a signal takes its default action as
        in any process; from then on the operator decides what a signal means.
        """

        def catches() -> bool:
            if not self.alive:
                raise self._failure("exited before it installed its signal handlers")
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
            return False

        if not poll_until(catches, timeout, 0.005):
            raise self._failure(f"did not catch signal {signum} within {timeout:.0f}s")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait: a clean stop is part of what is tested.  Returns the exit code.

        Raises :class:`OperatorError` (after a SIGKILL) if it did not stop in time.
        """
        if self.popen is None:
            return 0
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise self._failure(f"did not stop within {timeout:.0f}s of SIGTERM") from None
        return self.popen.returncode

    def kill(self) -> None:
        """SIGKILL: the crash the operator must recover from."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()

    def peak_rss_bytes(self) -> int:
        """VmHWM: the most resident memory the process ever had (only while it runs)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise OperatorError("no VmHWM in /proc status")

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def probe(self, path: str) -> int:
        """HTTP status of a health endpoint; 0 while nothing listens yet."""
        try:
            return self._get(self.health_port, path)[0]
        except OSError:
            return 0

    def metrics(self) -> str:
        return self._get(self.metrics_port, "/metrics")[1]

    @staticmethod
    def _get(port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def _failure(self, why: str) -> OperatorError:
        code = self.popen.poll() if self.popen is not None else None
        status = f" (exit code {code})" if code is not None else ""
        return OperatorError(
            f"runnerpool-operator {why}{status}; last lines of {self.log_path}:\n{self.log_tail()}"
        )


# ------------------------------------------------------------------------------ the runners


@dataclass(frozen=True)
class Registration:
    """One pod that registered: which runner it became on the fake."""

    namespace: str
    pool: str
    pod: str
    runner_id: int
    at: float


def _env(pod: dict[str, Any]) -> dict[str, str]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == "runner":
            return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    return {}


def _token_secret(pod: dict[str, Any], volume_name: str = _TOKEN_VOLUME) -> str | None:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == volume_name:
            name = (volume.get("secret") or {}).get("secretName")
            return str(name) if name else None
    return None


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class RunnerSimulator:
    """Plays every runner pod of the operator's pools (see the module docstring).

    Pods and token Secrets come from watches, so a pod registers within milliseconds of its
    token appearing, with no polling load on the API server even for a thousand pools.
    Registration happens once per pod; a deleted pod's runner stays registered on the fake,
    as a killed runner stays on GitHub, because removing it is the operator's job.

    The watches use the operator's own informer class: its stop sequence depends on the
    kubernetes library's internals, and one copy of that is enough.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        github: GitHubState,
        namespace: str | None = None,
        *,
        mark_ready: bool = True,
        workers: int = 4,
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self._github = github
        self._mark_ready = mark_ready
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="runner-sim")
        self._changed = threading.Condition()
        self._registered: dict[str, Registration] = {}
        self._queued: set[str] = set()
        self._parked: dict[str, set[str]] = {}
        #: Pods whose runner ended (its scale set job completed): reported Succeeded, left alone.
        self._ended: set[str] = set()
        self._closed = False
        self._scale_sets = scaleset.service(github)
        #: Why pods could not register or report (token missing from the fake, API errors).
        self.rejections: list[str] = []

        if namespace is None:
            pod_fn = ListWatchAdapter(self._core.list_pod_for_all_namespaces)
            secret_fn = ListWatchAdapter(self._core.list_secret_for_all_namespaces)
        else:
            pod_fn = ListWatchAdapter(self._core.list_namespaced_pod)
            secret_fn = ListWatchAdapter(self._core.list_namespaced_secret)
        self._adapters = [pod_fn, secret_fn]
        self._pods = StoppableInformer(pod_fn, namespace=namespace, label_selector=MANAGED_BY_SELECTOR)
        self._secrets = StoppableInformer(secret_fn, namespace=namespace, label_selector=MANAGED_BY_SELECTOR)
        for event in (ADDED, MODIFIED):
            self._pods.add_event_handler(event, lambda pod: self._submit(_key(pod)))
            self._secrets.add_event_handler(event, self._on_secret)
        self._pods.add_event_handler(DELETED, self._on_pod_deleted)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> RunnerSimulator:
        self._scale_sets.on_runner_finished(self._on_runner_finished)
        self._pods.start()
        self._secrets.start()
        for adapter in self._adapters:
            if not adapter.synced.wait(timeout):
                raise TimeoutError("runner simulator: watches did not start")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._scale_sets.remove_runner_finished(self._on_runner_finished)
        informers = (self._pods, self._secrets)
        for informer in informers:
            informer.signal_stop()
        deadline = time.monotonic() + timeout
        for informer in informers:
            informer.join(max(0.0, deadline - time.monotonic()))  # daemons: giving up is safe
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RunnerSimulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- observation ---------------------------------------------------------------------

    def registrations(self, namespace: str | None = None, pool: str | None = None) -> list[Registration]:
        """Pods that registered (including since-deleted ones), oldest first."""
        with self._changed:
            found = list(self._registered.values())
        return sorted(
            (r for r in found if namespace in (None, r.namespace) and pool in (None, r.pool)),
            key=lambda r: r.at,
        )

    def ended(self, namespace: str | None = None) -> list[str]:
        """Pods (``namespace/name``) whose runner finished its job and whose container exited."""
        with self._changed:
            return sorted(k for k in self._ended if namespace in (None, k.split("/")[0]))

    def wait(self, predicate: Callable[[RunnerSimulator], bool], timeout: float = 30.0) -> bool:
        """Block until ``predicate(self)`` holds, re-checked after every registration."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    # -- event handling (informer threads) -----------------------------------------------

    def _submit(self, key: str) -> None:
        with self._changed:
            if self._closed or key in self._queued:
                return
            done = self._registered.get(key)
            if done is not None and not self._mark_ready:
                return
            self._queued.add(key)
        try:
            self._executor.submit(self._play, key)
        except RuntimeError:  # shut down meanwhile
            with self._changed:
                self._queued.discard(key)

    def _on_secret(self, secret: dict[str, Any]) -> None:
        self._release(_key(secret))

    def _release(self, secret_key: str) -> None:
        """Retry the pods that were waiting for this Secret's token."""
        with self._changed:
            waiting = self._parked.pop(secret_key, set())
        for key in waiting:
            self._submit(key)

    def _on_runner_finished(self, runner_id: int) -> None:
        """The fake removed a scale set runner after its job. This runs under the fake's locks,
        and a test's `wait` predicate may ask the fake while holding ours: only hand over."""
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile
                self._executor.submit(self._end, runner_id)

    def _on_pod_deleted(self, pod: dict[str, Any]) -> None:
        key = _key(pod)
        with self._changed:
            for parked in self._parked.values():
                parked.discard(key)
            registered = self._registered.get(key)
        if registered is not None and _token_secret(pod, naming.JIT_VOLUME):
            # Its runner process is gone: GitHub shows the scale set runner offline.
            self._scale_sets.runner_stopped(registered.runner_id)

    # -- one pod (worker threads) --------------------------------------------------------

    def _play(self, key: str) -> None:
        try:
            self._play_unguarded(key)
        except Exception as err:  # a worker has nobody to raise to: keep it for the caller
            self._reject(f"{key}: {type(err).__name__}: {err}")
        finally:
            with self._changed:
                self._queued.discard(key)

    def _play_unguarded(self, key: str) -> None:
        pod = self._pods.cache.get_by_key(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        with self._changed:
            registered, ended = key in self._registered, key in self._ended
        if ended:
            return
        register = self._run_jit if _token_secret(pod, naming.JIT_VOLUME) else self._register
        if not registered and not register(pod, key):
            return
        if self._mark_ready and not _is_ready(pod):
            self._report_ready(namespace, name)

    def _register(self, pod: dict[str, Any], key: str) -> bool:
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        env = _env(pod)
        secret_name = _token_secret(pod)
        enterprise = env.get("RUNNER_ENTERPRISE")
        scope = (
            env.get("RUNNER_REPO") or env.get("RUNNER_ORG") or (enterprise and f"enterprises/{enterprise}")
        )
        if not scope or not secret_name:
            self._reject(f"{key}: pod spec has no scope or token volume")
            return False
        secret_key = f"{namespace}/{secret_name}"
        secret = self._secrets.cache.get_by_key(secret_key)
        token = _token_of(secret)
        if not token:
            self._park(secret_key, key)  # the pod would wait for the mounted file
            return False
        labels = [label for label in env.get("RUNNER_LABELS", "").split(",") if label]
        try:
            runner_id = self._github.register_runner_with_token(
                scope, token, name=name, labels=labels, ephemeral=True
            )
        except FakeGitHubError as err:
            # config.sh fails and the container restarts; it retries with the next token.
            self._reject(f"{key}: {err}")
            self._park(secret_key, key)
            return False
        pool = (meta.get("labels") or {}).get(naming.POOL_LABEL, env.get("RUNNER_POOL_NAME", ""))
        with self._changed:
            self._registered[key] = Registration(namespace, pool, name, runner_id, time.time())
            self._changed.notify_all()
        return True

    def _run_jit(self, pod: dict[str, Any], key: str) -> bool:
        """A JIT pod: its runner runs the config of the pod's own Secret once it is filled."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        secret_key = f"{namespace}/{_token_secret(pod, naming.JIT_VOLUME)}"
        config = _token_of(self._secrets.cache.get_by_key(secret_key), naming.JIT_SECRET_KEY)
        if not config:
            self._park(secret_key, key, naming.JIT_SECRET_KEY)  # the kubelet retries the volume
            return False
        try:
            runner_id = self._scale_sets.use_jit_config(config)
        except FakeGitHubError as err:
            # run.sh fails and the container restarts; it retries with the Secret's next config.
            self._reject(f"{key}: {err}")
            self._park(secret_key, key, naming.JIT_SECRET_KEY)
            return False
        pool = (meta.get("labels") or {}).get(naming.POOL_LABEL, _env(pod).get("RUNNER_POOL_NAME", ""))
        with self._changed:
            self._registered[key] = Registration(namespace, pool, name, runner_id, time.time())
            self._changed.notify_all()
        return True

    def _end(self, runner_id: int) -> None:
        """The runner's job completed and GitHub removed it: ``run.sh`` exits 0, the pod Succeeded."""
        with self._changed:
            key = next((k for k, r in self._registered.items() if r.runner_id == runner_id), None)
            if key is None:
                return  # not a pod of ours
            self._ended.add(key)
        namespace, name = key.split("/", 1)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        container = {
            "name": naming.RUNNER_CONTAINER,
            "image": "runner",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {
                "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
            },
        }
        ready = {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
        body = {"status": {"phase": "Succeeded", "containerStatuses": [container], "conditions": [ready]}}
        try:
            self._core.patch_namespaced_pod_status(name, namespace, body)
        except ApiException as err:
            if err.status != 404:
                self._reject(f"{key}: could not report the runner's exit: {err.status} {err.reason}")
        with self._changed:
            self._changed.notify_all()

    def _park(self, secret_key: str, pod_key: str, data_key: str = naming.TOKEN_SECRET_KEY) -> None:
        with self._changed:
            self._parked.setdefault(secret_key, set()).add(pod_key)
        # The Secret may have changed between the cache read and parking: look once more.
        if _token_of(self._secrets.cache.get_by_key(secret_key), data_key):
            self._release(secret_key)

    def _reject(self, message: str) -> None:
        with self._changed:
            self.rejections.append(message)
            self._changed.notify_all()

    def _report_ready(self, namespace: str, name: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                ],
            }
        }
        try:
            self._core.patch_namespaced_pod_status(name, namespace, body)
        except ApiException as err:
            if err.status != 404:  # deleted meanwhile: nothing to report
                raise


def _token_of(secret: dict[str, Any] | None, data_key: str = naming.TOKEN_SECRET_KEY) -> str | None:
    value = ((secret or {}).get("data") or {}).get(data_key)
    return base64.b64decode(value).decode() if value else None


def _is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def iter_runner_labels(runner: dict[str, Any]) -> Iterator[str]:
    """Label names of a runner as the fake (and GitHub) return it."""
    for label in runner.get("labels") or []:
        yield str(label["name"])
