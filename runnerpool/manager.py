"""Assemble the operator: the parts, and which of them run on every replica or on the leader.

Caches, probes, metrics and the webhook receiver run on every replica, so a new leader begins
with warm caches and a delivery to either replica counts (it is recorded on the pool itself);
workers, token jobs, runner managers and the demand poller run only while this replica holds
the Lease. ``runnerpool.runtime.runnables`` starts and stops them: one start path, one stop
path, whether a SIGTERM or a lost Lease asks for the stop.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

from kubernetes import client

from runnerpool import children
from runnerpool.credential_protection import CredentialProtection
from runnerpool.credential_reads import CredentialReads
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.recorder import DemandRecorder
from runnerpool.demand.secret import PoolSecrets, SecretFile
from runnerpool.demand.verification import Verifier
from runnerpool.domain import pool_key
from runnerpool.events import EventRecorder
from runnerpool.gates import RunnerGroupGate, ScopeGate
from runnerpool.github.credentials import NamedClientCache
from runnerpool.health import ProbeServer
from runnerpool.metrics_endpoint import MetricsEndpoint
from runnerpool.observe import SecretChecks
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.template import wanted_hash
from runnerpool.reconciler import PoolJobs, PoolStates, Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import Controller
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.runnables import Elector, Runnable, RunnableManager, scheduler_runnable
from runnerpool.runtime.workqueue import RateLimitingQueue
from runnerpool.scheduling import background_scheduler
from runnerpool.settings import Settings
from runnerpool.watches import PoolCache
from runnerpool.webserver import Limits
from secret_updater.filler import TokenUpdater

log = logging.getLogger(__name__)


class Operator:
    def __init__(self, settings: Settings, api_client: client.ApiClient) -> None:
        self.settings = settings
        self._api = api_client
        self._queue = RateLimitingQueue()
        # Shared by the pod informer (which sees creates arrive) and the reconciler (which makes them).
        self._expectations = Expectations()
        self.informers = PoolCache(
            api_client,
            self._queue.add,
            list(settings.namespaces) if settings.namespaces else None,
            default_api_url=settings.github.api_url,
            on_pod=self._expectations.observe,
            cluster_scoped=not settings.namespaced,
        )
        self._kube = Kube(api_client)
        # Every replica records the deliveries it receives on the pools (status.demand).
        self._recorder = DemandRecorder(self._kube, self.informers, settings.github.api_url)
        # Pools' own webhook secrets, read by name: shared by the receiver and the conditions.
        self._pool_secrets = PoolSecrets(self._kube)
        self._credentials = CredentialReads(self.informers, self._kube)  # read by name until labelled
        self._clients = NamedClientCache(self._read_credentials)
        self._manager = RunnableManager(
            [
                *self._servers(),
                Runnable("caches", self.informers.start, self.informers.stop),
                Runnable("caches synced", self._wait_for_caches, leader_only=True),
                *self._leader_parts(),
            ],
            elector=self._elector if settings.leader_election.enabled else None,
        )

    def _leader_parts(self) -> list[Runnable]:
        """Credential release, token jobs, runner managers, the poller and the workers."""
        settings, kube, clients = self.settings, self._kube, self._clients
        token_scheduler = background_scheduler(settings.tokens.threads)
        runner_scheduler = background_scheduler(settings.runners.threads)
        tokens = TokenUpdater(
            clients,
            lambda namespace, name, body: kube.patch(SECRETS, namespace, name, body),
            lambda namespace, name: self._queue.add(pool_key(namespace, name)),
            settings=settings.tokens,
            scheduler=token_scheduler,
        )
        runners = RunnerManagers(
            self.informers,
            clients,
            KubePods(kube),
            self._queue.add,
            settings=settings.runners,
            scheduler=runner_scheduler,
            wanted_hash=lambda pool: wanted_hash(pool, settings.runners.image, settings.github.api_url),
        )
        protection = CredentialProtection(self.informers, kube, self._credentials)
        reconciler = Reconciler(
            self.informers,
            kube,
            PoolJobs(tokens, runners, others=(self._recorder,)),
            EventRecorder(kube),
            gates=(ScopeGate(settings.tenants.allow_list), RunnerGroupGate(clients, settings.github.api_url)),
            secrets=SecretChecks(protection, self._pool_secrets.problem),
            states=PoolStates(self._expectations),
            settings=settings,
        )
        poller = DemandPoller(
            self.informers,
            self._recorder,
            lambda pool: children.github_client(clients, pool, settings.github.api_url),
            settings.github.api_url,
            interval=settings.demand.poll_interval,
            allowed=lambda pool: settings.tenants.allow_list.allows(pool.namespace, pool.scope),
        )
        controller = Controller(self._queue, reconciler, workers=settings.queue.workers)
        return [
            Runnable("credential release", protection.release_unused, leader_only=True),
            scheduler_runnable("token jobs", token_scheduler, tokens.shutdown),
            scheduler_runnable("runner managers", runner_scheduler, runners.shutdown),
            Runnable("demand poller", poller.start, poller.stop, leader_only=True),
            Runnable("workers", controller.start, controller.stop, leader_only=True),
        ]

    def _read_credentials(self, namespace: str, name: str) -> dict[str, str] | None:
        secret = self._credentials.get(namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def _servers(self) -> list[Runnable]:
        """The always-on endpoints whose port is set: metrics, probes, webhook receiver."""
        probes, demand = self.settings.probes, self.settings.demand
        servers: list[Runnable] = []
        if probes.metrics_port:
            metrics = MetricsEndpoint(probes, self._api)
            servers.append(Runnable("metrics", metrics.start, metrics.stop))
        if probes.health_port:
            health = ProbeServer(probes.health_port, live=lambda: True, ready=self.ready)
            servers.append(Runnable("probes", health.start, lambda timeout: health.stop()))
        if demand.webhook_port:
            if not demand.webhook_secret_file:
                log.warning(
                    "no --webhook-secret-file: webhook deliveries move only pools with their own "
                    "spec.autoscaling.webhookSecretRef; polling alone follows demand for the others"
                )
            secrets = SecretFile(demand.webhook_secret_file) if demand.webhook_secret_file else None
            webhook = WebhookServer(
                demand.webhook_port,
                Verifier(
                    secrets.secrets if secrets is not None else tuple, self.informers, self._pool_secrets
                ),
                self._recorder.record_job,
                limits=Limits(
                    read_timeout=demand.webhook_read_timeout,
                    max_connections=demand.webhook_max_connections,
                    threads=demand.webhook_threads,
                ),
            )
            servers.append(Runnable("webhook receiver", webhook.start, webhook.stop))
        return servers

    def _elector(self, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> Elector:
        return LeaderElector(
            self._api,
            self.settings.leader_election,
            on_started_leading=on_started,
            on_stopped_leading=on_stopped,
        )

    def _wait_for_caches(self) -> None:
        """Workers on a half-filled cache would recreate what exists; wait, but not past a stop."""
        while not self.informers.wait_for_sync(timeout=1.0):
            if self._manager.stopping.is_set():
                return

    def ready(self) -> bool:
        return self.informers.has_synced

    def leading(self) -> bool:
        return self._manager.leading

    def run(self) -> None:
        """Block until :meth:`shutdown` or until the Lease is lost; everything started is stopped."""
        self._manager.run()

    def shutdown(self) -> None:
        """Stop cleanly (SIGTERM): in-flight reconciles finish, the Lease is released."""
        self._manager.stop()
