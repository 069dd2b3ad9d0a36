"""Assemble the operator: the parts, which component runs them, and which of them run on every
replica or on the leader.

``--component`` (``runnerpool.settings``) picks the parts: the operator (caches, probes,
metrics, and on the leader the workers, the secret updater, runner managers, demand poller and the
webhook secret mirror), the webhook receiver (its pool cache, probes, metrics and ``POST
/webhook``: ``runnerpool.webhook_component``), or both in one process. Caches, probes and
metrics run on every replica, so a new leader begins with warm caches (but a runner namespace's
Secrets and pods, which follow its enabling: ``runnerpool.namespace_access``); workers, the
secret updater, runner managers, the poller and the mirror run only while this replica holds
the Lease.
``runnerpool.runtime.runnables`` starts and stops them: one start path, one stop path, whether
a SIGTERM or a lost Lease asks for the stop.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kubernetes import client

from runnerpool import scale_set_pools
from runnerpool.api import RunnerPool
from runnerpool.binding_protection import EnablingBindings
from runnerpool.credential_protection import CredentialProtection
from runnerpool.demand.job_labels import JobLabels
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.writer import DemandWriter
from runnerpool.domain import pool_key
from runnerpool.echoes import Echoes
from runnerpool.events import KubeEventRecorder
from runnerpool.gates import GitHubHostGate, NamespaceGate, RunnerGroupGate, ScopeGate
from runnerpool.github.credentials import NamedClientCache
from runnerpool.health import ProbeServer
from runnerpool.metrics_endpoint import MetricsEndpoint
from runnerpool.namespace_access import NamespaceAccess
from runnerpool.observe import SecretChecks
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.template import wanted_hash
from runnerpool.reconciler import PoolJobs, PoolStates, Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import Controller
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.runnables import Elector, Runnable, Supervisor, scheduler_runnable
from runnerpool.runtime.workqueue import RateLimitingQueue
from runnerpool.scheduling import background_scheduler
from runnerpool.secret_reads import SecretReads, config_maps
from runnerpool.settings import WEBHOOK_RECEIVER, Settings
from runnerpool.watches import PoolCache
from runnerpool.webhook_component import operator_webhook_parts, receiver_parts
from secret_updater.updater import SecretUpdater


class Operator:
    informers: PoolCache

    def __init__(self, settings: Settings, api_client: client.ApiClient) -> None:
        self.settings = settings
        self._api = api_client
        self._kube = Kube(api_client)
        if settings.component == WEBHOOK_RECEIVER:  # no Lease, no workers: webhook_component
            receiver = receiver_parts(settings, api_client, self._kube)
            self.informers = receiver.cache
            self._supervisor = Supervisor([*self._endpoints(), *receiver.runnables])
        else:
            self._supervisor = self._operator()

    def _operator(self) -> Supervisor:
        """The operator (``--component operator``), with the webhook receiver too under ``all``."""
        settings = self.settings
        self._queue = RateLimitingQueue(spacing=settings.queue.pass_spacing)
        # The reconciler's memory; the informers tell it the pod creates and own pool writes they see.
        self._states = PoolStates(Expectations(), echoes=Echoes(self._queue.add))
        self.informers = PoolCache(
            self._api,
            self._queue.add,
            list(settings.namespaces) if settings.namespaces else None,
            default_api_url=settings.github.api_url,
            on_pod=self._states.expectations.observe,
            echo=self._states.echoes.echo,
            cluster_scoped=not settings.namespaced,
            defer_per_namespace=not settings.namespaced,  # Secrets, pods: where enabled (namespace_access)
        )
        # The poller (and, under ``all``, the receiver) records demand on the pools (status.demand).
        self._demand = DemandWriter(
            self._kube,
            self.informers,
            settings.github.api_url_of,
            allowed=settings.tenants.allows_pool,
            job_labels=JobLabels(settings.demand),
        )
        # The one by-name Secret reader: credential Secrets until labelled, pools' webhook secrets.
        reads = self._secret_reads = SecretReads(self.informers, self._kube)
        self._pool_secrets = PoolSecrets(reads)
        self._clients = NamedClientCache.bounded(reads.decoded, settings.github, config_maps(self._kube))
        self._access = NamespaceAccess(self._kube, watch=self.informers, role=settings.namespace_role)
        parts = (settings, self.informers, self._pool_secrets, self._kube, self._demand)
        self._webhook = operator_webhook_parts(*parts, notify=self._queue.add, readable=self._access.readable)
        return Supervisor(
            [
                *self._endpoints(),
                *self._webhook.receiver,
                Runnable("caches", self.informers.start, self.informers.stop),
                Runnable("caches synced", self._wait_for_caches, leader_only=True),
                *self._leader_parts(),
                *self._webhook.mirror,
            ],
            elector=self._elector if settings.leader_election.enabled else None,
        )

    def _leader_parts(self) -> list[Runnable]:
        """Protection release (credential Secrets, enabling bindings), the secret updater, runner
        managers, the poller and the workers."""
        settings, kube, clients, access = self.settings, self._kube, self._clients, self._access
        token_scheduler = background_scheduler(settings.tokens.threads)
        runner_scheduler = background_scheduler(settings.runners.threads)

        def allowed(pool: RunnerPool) -> bool:  # the poller's and the scale-set listeners' pools
            return settings.tenants.allows_pool(pool) and access.enabled(pool.namespace)

        scale_sets = scale_set_pools.assemble(self.informers, kube, clients, settings, allowed, access=access)
        runners = RunnerManagers(
            self.informers,
            clients,
            KubePods(kube),
            self._queue.add,
            runner_scheduler,
            settings=settings.runners,
            wanted_hash=lambda pool: wanted_hash(pool, settings.runners.image, settings.github.api_url),
            removal=scale_sets.removal,
        )
        secrets = SecretUpdater(
            clients,
            lambda namespace, name, body: kube.patch(SECRETS, namespace, name, body),
            lambda namespace, name: self._queue.add(pool_key(namespace, name)),
            token_scheduler,
            runners.delete_leftover,
            settings=settings.tokens,
            scale_set_jit=scale_sets.jit,
        )
        protection = CredentialProtection(self.informers, kube, self._secret_reads)
        bindings = EnablingBindings(self.informers, kube, access.account, settings.namespace_role)
        jobs = PoolJobs(secrets, runners, others=(self._demand,), scale_sets=scale_sets.pools)
        checks = SecretChecks(protection, bindings, self._webhook.check)
        reconciler = self._reconciler(jobs, access, checks)
        url_of = settings.github.api_url_of
        poller = DemandPoller(
            self.informers,
            self._demand,
            lambda p: clients.get(p.namespace, p.spec.credential_secret_name, url_of(p), p.spec.connection),
            url_of,
            interval=settings.demand.poll_interval,
            allowed=allowed,
        )
        controller = Controller(self._queue, reconciler, workers=settings.queue.workers)
        release = partial(checks.release_unused, settings.namespaces, reconciler.release_unused_budget)
        return [
            Runnable("protection release", release, leader_only=True),
            scheduler_runnable("secret updater", token_scheduler, secrets.stop_all),
            scheduler_runnable("runner managers", runner_scheduler, runners.stop_all),
            Runnable("demand poller", poller.start, poller.stop, leader_only=True),
            scale_sets.listeners.runnable(),
            Runnable("workers", controller.start, controller.stop, leader_only=True),
        ]

    def _reconciler(self, jobs: PoolJobs, access: NamespaceAccess, secrets: SecretChecks) -> Reconciler:
        settings, kube = self.settings, self._kube
        return Reconciler(
            self.informers,
            kube,
            jobs,
            KubeEventRecorder(kube),
            gates=(
                NamespaceGate(access),
                GitHubHostGate(settings.github.hosts, settings.github.api_url_of),
                ScopeGate(settings.tenants.allow_list),
                RunnerGroupGate(self._clients, settings.github.api_url),
            ),
            secrets=secrets,
            states=self._states,
            settings=settings,
        )

    def _endpoints(self) -> list[Runnable]:
        """The always-on endpoints whose port is set: metrics and probes."""
        probes = self.settings.probes
        servers: list[Runnable] = []
        if probes.metrics_port:
            metrics = MetricsEndpoint(probes, self._api)
            servers.append(Runnable("metrics", metrics.start, metrics.stop))
        if probes.health_port:
            health = ProbeServer(probes.health_port, live=lambda: True, ready=self.ready)
            servers.append(Runnable("probes", health.start, lambda timeout: health.stop()))
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
            if self._supervisor.stopping.is_set():
                return

    def ready(self) -> bool:
        return self.informers.has_synced

    def leading(self) -> bool:
        return self._supervisor.leading

    def run(self) -> None:
        """Block until :meth:`shutdown` or until the Lease is lost; everything started is stopped."""
        self._supervisor.run()

    def shutdown(self) -> None:
        """Stop cleanly (SIGTERM): in-flight reconciles finish, the Lease is released."""
        self._supervisor.stop()
