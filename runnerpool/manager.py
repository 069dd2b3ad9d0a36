"""Assemble the operator: caches, work queue, reconciler, token jobs, runner managers,
demand (webhook receiver, poller, autoscaler), probes, leadership.

Caches and the webhook receiver run on every replica, so a new leader begins with warm
caches and a delivery to either replica counts (it is recorded on the pool itself); workers,
token jobs, runner managers and the demand poller run only while this replica holds the
Lease. Losing the Lease stops them at once and ends the process, as controller-runtime's
manager does, so a replica never acts on a stale belief that it still leads.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from typing import Any

from kubernetes import client

from runnerpool import api, children
from runnerpool.api_errors import describe
from runnerpool.credential_protection import CredentialProtection, credential_secret_name
from runnerpool.demand.autoscaler import Autoscaler
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.recorder import DemandRecorder
from runnerpool.demand.secret import SecretFile
from runnerpool.domain import Decision, pool_key
from runnerpool.events import EventRecorder
from runnerpool.github.credentials import ClientCache
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.pygithub import PyGithubClient
from runnerpool.health import ProbeServer
from runnerpool.metrics_endpoint import MetricsEndpoint
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.template import wanted_hash
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import Controller
from runnerpool.runtime.informers import InformerSet
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.workqueue import RateLimitingQueue
from runnerpool.settings import Settings
from secret_updater.filler import TokenUpdater

log = logging.getLogger(__name__)


def _credential_refs(pool: dict[str, Any]) -> list[str]:
    return [credential_secret_name(pool)]


class NamedClientCache(ClientCache):
    """Names each client after its credential Secret, so that the rate-limit gauges say whose
    budget they show (``namespace/secret``) without anything derived from the token.

    Every user of a client gets it through ``get``, so the name is set before its first
    request.
    """

    def get(self, namespace: str, secret_name: str, base_url: str | None = None) -> GitHubClient:
        github = super().get(namespace, secret_name, base_url)
        if isinstance(github, PyGithubClient):
            github.name_credential(pool_key(namespace, secret_name))
        return github


class _Demand:
    """The reconciler's view of demand: the leader's autoscaler decides; a deleted pool is
    forgotten by the autoscaler and by this replica's recorder."""

    def __init__(self, autoscaler: Autoscaler, recorder: DemandRecorder) -> None:
        self._autoscaler = autoscaler
        self._recorder = recorder

    def decide(self, pool: api.RunnerPool) -> Decision:
        return self._autoscaler.decide(pool)

    def forget(self, namespace: str, name: str) -> None:
        self._autoscaler.forget(namespace, name)
        self._recorder.forget(namespace, name)


class Operator:
    def __init__(self, settings: Settings, api_client: client.ApiClient) -> None:
        self.settings = settings
        self._api = api_client
        self.queue = RateLimitingQueue()
        # Shared by the pod informer (which sees creates arrive) and the reconciler (which makes them).
        self._expectations = Expectations()
        self.informers = InformerSet(
            api_client,
            self.queue.add,
            list(settings.namespaces) if settings.namespaces else None,
            pool_secret_refs=_credential_refs,
            on_pod=self._expectations.observe,
            watch_namespaces=not settings.namespaced,
        )
        self._kube = Kube(api_client)
        # Every replica records the deliveries it receives on the pools (status.demand).
        self._demand_recorder = DemandRecorder(self._kube, self.informers, settings.github.api_url)
        self._webhook: WebhookServer | None = None
        self._poller: DemandPoller | None = None
        self._stop = threading.Event()
        # Set first thing on a stop: a start still in progress must not build or start more.
        self._stopping = threading.Event()
        # Serialises building/starting the leader's parts with stopping them.
        self._lifecycle = threading.Lock()
        self._leading = threading.Event()
        self._controller: Controller | None = None
        self._tokens: TokenUpdater | None = None
        self._runners: RunnerManagers | None = None
        self._elector: LeaderElector | None = None
        self._probes: ProbeServer | None = None
        self._metrics_server: MetricsEndpoint | None = None
        self._election_thread: threading.Thread | None = None

    # -- wiring ----------------------------------------------------------------

    def _read_credentials(self, namespace: str, name: str) -> dict[str, str] | None:
        secret = self.informers.get_secret(namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def _patch_secret(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self._kube.patch(SECRETS, namespace, name, body)

    def _start_leading(self) -> None:
        with self._lifecycle:
            if self._stopping.is_set():
                return
            protection = self._build_leader_parts()
        # Workers on a half-filled cache would recreate what exists; wait, but not past a shutdown.
        while not self.informers.wait_for_sync(timeout=1.0):
            if self._stopping.is_set():
                return
        self._release_unused_credentials(protection)
        with self._lifecycle:
            if self._stopping.is_set() or self._controller is None:
                return
            self._controller.start()
            if self._poller is not None:
                self._poller.start()
            self._leading.set()
        log.info("leading: %d workers started", self.settings.queue.workers)

    def _build_leader_parts(self) -> CredentialProtection:
        settings = self.settings
        clients = NamedClientCache(self._read_credentials)
        protection = CredentialProtection(self.informers, self._kube)
        events = EventRecorder(self._kube)
        autoscaler = Autoscaler(events)
        self._runners = RunnerManagers(
            self.informers,
            clients,
            KubePods(self._kube),
            self.queue.add,
            settings=settings.runners,
            wanted_hash=lambda pool: wanted_hash(pool, settings.runners.image, settings.github.api_url),
            # Scale-down retires pods above the same count the reconciler creates pods for.
            replicas=autoscaler.desired_replicas,
        )
        self._tokens = TokenUpdater(
            clients,
            self._patch_secret,
            lambda namespace, name: self.queue.add(pool_key(namespace, name)),
            settings=settings.tokens,
        )
        reconciler = Reconciler(
            self.informers,
            self._api,
            self._tokens,
            self._runners,
            events,
            settings=settings,
            expectations=self._expectations,
            protection=protection,
            namespaces=self.informers,
            demand=_Demand(autoscaler, self._demand_recorder),
        )
        self._controller = Controller(self.queue, reconciler, workers=settings.queue.workers)
        self._poller = DemandPoller(
            self.informers,
            self._demand_recorder,
            lambda pool: clients.get(
                pool.namespace,
                pool.spec.credential_secret_name,
                children.api_url(pool, settings.github.api_url),
            ),
            settings.github.api_url,
            interval=settings.demand.poll_interval,
        )
        return protection

    @staticmethod
    def _release_unused_credentials(protection: CredentialProtection) -> None:
        """Pools that went away while no operator ran leave protected Secrets: release them."""
        try:
            released = protection.release_unused()
        except Exception as err:  # the next pool deletion asks again; leading must go on
            log.warning("could not release unused credential Secrets: %s", describe(err))
            return
        if released:
            log.info("released %d credential Secret(s) that no pool needs", released)

    def _stop_leading(self) -> None:
        """Stop whatever of the leader's parts exists; safe to call again and from any thread."""
        self._stopping.set()
        with self._lifecycle:
            self._leading.clear()
            if self._controller is not None:
                self._controller.stop(timeout=30)
            if self._poller is not None:
                self._poller.stop()
            if self._runners is not None:
                self._runners.shutdown()
            if self._tokens is not None:
                self._tokens.shutdown()
        self._stop.set()

    # -- lifecycle -------------------------------------------------------------

    def ready(self) -> bool:
        return self.informers.has_synced

    def leading(self) -> bool:
        return self._leading.is_set()

    def run(self) -> None:
        """Block until :meth:`shutdown` or until the Lease is lost."""
        settings = self.settings
        if settings.probes.metrics_port:
            self._metrics_server = MetricsEndpoint(settings.probes, self._api)
            self._metrics_server.start()
        if settings.probes.health_port:
            self._probes = ProbeServer(settings.probes.health_port, live=lambda: True, ready=self.ready)
            self._probes.start()
        self._start_webhook()
        self.informers.start()
        if settings.leader_election.enabled:
            self._elector = LeaderElector(
                self._api,
                settings.leader_election,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
            )
            self._election_thread = threading.Thread(
                target=self._elector.run, name="leader-election", daemon=True
            )
            self._election_thread.start()
        else:
            self._start_leading()
        self._stop.wait()
        self._teardown()

    def _start_webhook(self) -> None:
        demand = self.settings.demand
        if not demand.webhook_port:
            return
        if not demand.webhook_secret_file:
            log.warning(
                "no --webhook-secret-file: every webhook delivery is refused; polling alone follows demand"
            )
        secrets = SecretFile(demand.webhook_secret_file) if demand.webhook_secret_file else None
        self._webhook = WebhookServer(
            demand.webhook_port,
            secrets.secrets if secrets is not None else tuple,
            self._demand_recorder.record_job,
        )
        self._webhook.start()

    def shutdown(self) -> None:
        """Stop cleanly (SIGTERM): finish in-flight reconciles, release the Lease."""
        self._stopping.set()
        if self._elector is not None:
            self._elector.stop(release=True, timeout=30)
        else:
            self._stop_leading()
        self._stop.set()

    def _teardown(self) -> None:
        """Stop every thread the operator started before ``run`` returns.

        The interpreter finalizes right after ``main`` returns; a thread of ours still
        running then (the elector releasing the Lease, a scheduler started by a start-up
        that a SIGTERM overtook, an HTTP server thread mid-request) is cut off wherever it
        tries to take the GIL again, and inside a C or Rust extension that can abort the
        process after "operator stopped" instead of exiting 0.
        """
        if self._elector is not None:
            self._elector.stop(release=True, timeout=30)
            if self._election_thread is not None:
                self._election_thread.join(timeout=30)
        self._stop_leading()  # also what a start overtaken by the stop had built already
        self.informers.stop()
        if self._probes is not None:
            self._probes.stop()
        if self._webhook is not None:
            self._webhook.stop()
        if self._metrics_server is not None:
            self._metrics_server.stop(timeout=5)
        log.info("operator stopped", extra={"pid": os.getpid()})
