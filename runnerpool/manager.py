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
from typing import Any

from apscheduler.schedulers.base import STATE_STOPPED, BaseScheduler
from kubernetes import client
from prometheus_client import start_http_server

from runnerpool import children
from runnerpool.api_errors import describe
from runnerpool.credential_protection import CredentialProtection, credential_secret_name
from runnerpool.demand.polling import DemandPoller
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.recorder import DemandRecorder
from runnerpool.demand.secret import SecretFile
from runnerpool.domain import pool_key
from runnerpool.events import EventRecorder
from runnerpool.github.credentials import NamedClientCache
from runnerpool.health import ProbeServer
from runnerpool.pods.expectations import Expectations
from runnerpool.pods.template import wanted_hash
from runnerpool.reconciler import Reconciler
from runnerpool.runners.manager import KubePods, RunnerManagers
from runnerpool.runtime.controller import Controller
from runnerpool.runtime.informers import InformerSet
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.runnables import Elector, Runnable, RunnableManager
from runnerpool.runtime.workqueue import RateLimitingQueue
from runnerpool.scheduling import background_scheduler
from runnerpool.settings import Settings
from secret_updater.filler import TokenUpdater

log = logging.getLogger(__name__)


class Operator:
    def __init__(self, settings: Settings, api_client: client.ApiClient) -> None:
        self.settings = settings
        self._api = api_client
        queue = RateLimitingQueue()
        # Shared by the pod informer (which sees creates arrive) and the reconciler (which makes them).
        expectations = Expectations()
        self.informers = InformerSet(
            api_client,
            queue.add,
            list(settings.namespaces) if settings.namespaces else None,
            pool_secret_refs=lambda pool: [credential_secret_name(pool)],
            on_pod=expectations.observe,
        )
        kube = Kube(api_client)
        # Every replica records the deliveries it receives on the pools (status.demand).
        recorder = DemandRecorder(kube, self.informers, settings.github.api_url)
        clients = NamedClientCache(self._read_credentials)
        token_scheduler = background_scheduler(settings.tokens.threads)
        runner_scheduler = background_scheduler(settings.runners.threads)
        tokens = TokenUpdater(
            clients,
            lambda namespace, name, body: kube.patch(SECRETS, namespace, name, body),
            lambda namespace, name: queue.add(pool_key(namespace, name)),
            settings=settings.tokens,
            scheduler=token_scheduler,
        )
        runners = RunnerManagers(
            self.informers,
            clients,
            KubePods(kube),
            queue.add,
            settings=settings.runners,
            scheduler=runner_scheduler,
            wanted_hash=lambda pool: wanted_hash(pool, settings.runners.image, settings.github.api_url),
        )
        protection = CredentialProtection(self.informers, kube)
        reconciler = Reconciler(
            self.informers,
            api_client,
            tokens,
            runners,
            EventRecorder(kube),
            settings=settings,
            expectations=expectations,
            protection=protection,
            namespaces=self.informers,
            forgetters=(recorder,),
        )
        controller = Controller(queue, reconciler, workers=settings.queue.workers)
        poller = DemandPoller(
            self.informers,
            recorder,
            lambda pool: clients.get(
                pool.namespace,
                pool.spec.credential_secret_name,
                children.api_url(pool, settings.github.api_url),
            ),
            settings.github.api_url,
            interval=settings.demand.poll_interval,
        )
        self._manager = RunnableManager(
            [
                *self._servers(recorder),
                Runnable("caches", self.informers.start, self.informers.stop),
                Runnable("caches synced", self._wait_for_caches, _nothing, leader_only=True),
                Runnable(
                    "credential release", lambda: _release_unused(protection), _nothing, leader_only=True
                ),
                _scheduled("token jobs", token_scheduler, tokens.shutdown),
                _scheduled("runner managers", runner_scheduler, runners.shutdown),
                Runnable("demand poller", poller.start, poller.stop, leader_only=True),
                Runnable("workers", controller.start, controller.stop, leader_only=True),
            ],
            elector=self._elector if settings.leader_election.enabled else None,
        )

    def _read_credentials(self, namespace: str, name: str) -> dict[str, str] | None:
        secret = self.informers.get_secret(namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def _servers(self, recorder: DemandRecorder) -> list[Runnable]:
        """The always-on endpoints whose port is set: metrics, probes, webhook receiver."""
        probes, demand = self.settings.probes, self.settings.demand
        servers: list[Runnable] = []
        if probes.metrics_port:
            servers.append(_metrics(probes.metrics_port))
        if probes.health_port:
            health = ProbeServer(probes.health_port, live=lambda: True, ready=self.ready)
            servers.append(Runnable("probes", health.start, lambda timeout: health.stop()))
        if demand.webhook_port:
            if not demand.webhook_secret_file:
                log.warning(
                    "no --webhook-secret-file: every webhook delivery is refused; "
                    "polling alone follows demand"
                )
            secrets = SecretFile(demand.webhook_secret_file) if demand.webhook_secret_file else None
            webhook = WebhookServer(
                demand.webhook_port, secrets.secrets if secrets is not None else tuple, recorder.record_job
            )
            servers.append(Runnable("webhook receiver", webhook.start, lambda timeout: webhook.stop()))
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


def _metrics(port: int) -> Runnable:
    """prometheus-client's own server for ``/metrics``."""
    started: list[Any] = []

    def stop(timeout: float) -> None:
        for server in started:
            server.shutdown()
            server.server_close()

    return Runnable("metrics", lambda: started.append(start_http_server(port)[0]), stop)


def _nothing(timeout: float) -> None:
    del timeout


def _scheduled(name: str, scheduler: BaseScheduler, stop_jobs: Callable[[], None]) -> Runnable:
    """A leader-only scheduler: its jobs are added by the reconciler and end with leadership."""

    def stop(timeout: float) -> None:
        del timeout  # a job stuck on a slow GitHub call is not waited for: stop_jobs bars writes
        stop_jobs()
        if scheduler.state != STATE_STOPPED:
            scheduler.shutdown(wait=False)

    return Runnable(name, scheduler.start, stop, leader_only=True)


def _release_unused(protection: CredentialProtection) -> None:
    """Pools that went away while no operator ran leave protected Secrets: release them."""
    try:
        released = protection.release_unused()
    except Exception as err:  # the next pool deletion asks again; leading must go on
        log.warning("could not release unused credential Secrets: %s", describe(err))
        return
    if released:
        log.info("released %d credential Secret(s) that no pool needs", released)
