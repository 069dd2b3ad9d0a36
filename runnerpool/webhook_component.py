"""The webhook receiver as a component of its own (``--component webhook-receiver``).

Why apart: the receiver parses requests from the internet, and the operator holds the power
to read Secrets and start pods in runner namespaces. Run as its own Deployment with its own
ServiceAccount (deploy/rbac/webhook_receiver_*.yaml, the chart's webhook-receiver-rbac.yaml),
a hole in the receiver reaches only what that account may do: read RunnerPools, patch
``runnerpools/status`` (the demand it records, ``demand.writer``) and read one Secret by
name (the pools' own webhook secrets, copied there by the operator:
``demand.secret_mirror``). No pods, no credential Secrets, no Secret of any tenant
namespace; the operator's pods then take no inbound traffic but probes and metrics.

What the receiver holds: one informer, of RunnerPools (:class:`ReceiverCache`), to find the
pools a delivery may move; the runners of a pool are told by their names
(``demand.runner_names``), since it reads no pods. It keeps no state of its own beyond a
short log of delivery ids: every replica records on the pool itself with ``resourceVersion``
as the write's precondition (``demand.writer``), and recording is idempotent (a job's state
only moves forward, ``demand.rules``), so any number of replicas may take deliveries, the
same one twice included, and each job counts once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubernetes import client

from runnerpool.demand import runner_names
from runnerpool.demand.job_labels import JobLabels
from runnerpool.demand.receiver import WebhookServer
from runnerpool.demand.secret import PoolSecrets, SecretFile
from runnerpool.demand.secret_mirror import MirroredSecrets, SecretMirror
from runnerpool.demand.verification import Verdict, Verifier, with_route_keys
from runnerpool.demand.writer import DemandWriter
from runnerpool.domain import split_key
from runnerpool.github.jobs import Job
from runnerpool.observe import WebhookSecretCheck
from runnerpool.runtime.informers import Enqueue, InformerSet
from runnerpool.runtime.kube import Kube
from runnerpool.runtime.runnables import Runnable
from runnerpool.settings import OPERATOR, DemandSettings, Settings
from runnerpool.watches import POOLS, PoolCache, pool_watches
from runnerpool.webserver import Limits

__all__ = [
    "OperatorWebhookParts",
    "ReceiverCache",
    "ReceiverParts",
    "operator_webhook_parts",
    "receiver_parts",
    "webhook_runnable",
]

log = logging.getLogger(__name__)


class ReceiverCache(PoolCache):
    """Only the RunnerPools entry of the controller's table (its scope index included): the
    pool reads of :class:`PoolCache` without a watch the receiver's account may not make."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespaces: Sequence[str] | None,
        *,
        default_api_url: str,
        on_pool: Enqueue = lambda key: None,
    ) -> None:
        """``on_pool``: told the key of every pool an event touched (the store already changed)."""
        table = [watch for watch in pool_watches(default_api_url=default_api_url) if watch.name == POOLS]
        InformerSet.__init__(self, api_client, on_pool, table, namespaces)


@dataclass(frozen=True)
class ReceiverParts:
    """The receiver component: its pool cache, the writer of demand, and what the manager runs."""

    cache: ReceiverCache
    writer: DemandWriter
    runnables: list[Runnable]


def webhook_runnable(
    demand: DemandSettings,
    pools: PoolCache,
    pool_secrets: PoolSecrets | None,
    record: Callable[[Job, Verdict], int],
) -> Runnable:
    """``POST /webhook`` on ``demand.webhook_port``, verified with the cluster-wide secret file
    and the pools' own secrets (``pool_secrets``: read directly, or from the mirror)."""
    if not demand.webhook_secret_file:
        log.warning(
            "no --webhook-secret-file: webhook deliveries move only pools with their own "
            "spec.autoscaling.webhookSecretRef (at /webhook/<namespace>/<secret>); polling alone "
            "follows demand for the others"
        )
    secrets = SecretFile(demand.webhook_secret_file) if demand.webhook_secret_file else None
    webhook = WebhookServer(
        demand.webhook_port,
        Verifier(secrets.secrets if secrets is not None else tuple, pools, pool_secrets),
        record,
        limits=Limits(
            read_timeout=demand.webhook_read_timeout,
            max_connections=demand.webhook_max_connections,
            threads=demand.webhook_threads,
        ),
    )
    return Runnable("webhook receiver", webhook.start, webhook.stop)


def receiver_parts(settings: Settings, api_client: client.ApiClient, kube: Kube) -> ReceiverParts:
    """The receiver component's cache and parts (probes and metrics are the manager's).

    A deleted pool is forgotten by the writer (its group-commit lock, its last write and its
    demand series on ``/metrics``): the operator's reconciler does that for the operator's
    writer, and nothing reconciles here, so the receiver kept every pool it ever wrote to and
    went on exporting a deleted pool's last queued and busy counts."""

    def forget_deleted(key: str) -> None:  # events come once the cache starts: both are made by then
        namespace, name = split_key(key)
        if cache.pool(namespace, name) is None:
            writer.forget(namespace, name)

    cache = ReceiverCache(
        api_client,
        list(settings.namespaces) if settings.namespaces else None,
        default_api_url=settings.github.api_url,
        on_pool=forget_deleted,
    )
    writer = DemandWriter(
        kube,
        cache,
        settings.github.api_url_of,
        runners=runner_names.by_name,
        allowed=settings.tenants.allows_pool,
        job_labels=JobLabels(settings.demand),
    )
    mirror = settings.demand.mirror
    secrets = MirroredSecrets(kube, *mirror) if mirror else None
    parts = [Runnable("caches", cache.start, cache.stop)]
    if settings.demand.webhook_port:
        parts.append(webhook_runnable(settings.demand, cache, secrets, writer.record_job))
    return ReceiverParts(cache, writer, parts)


@dataclass(frozen=True)
class OperatorWebhookParts:
    """The operator's parts of the webhook: the receiver itself under ``--component all``, the
    copy of the pools' own webhook secrets for a separate receiver (leader only, and started
    after the caches synced: from an empty cache the copy would be emptied), and the check of
    a pool's own webhook secret that goes with them (with a copy, a secret left out of it for
    want of room is a problem too)."""

    receiver: list[Runnable]
    mirror: list[Runnable]
    check: WebhookSecretCheck


def operator_webhook_parts(
    settings: Settings,
    pools: PoolCache,
    secrets: PoolSecrets,
    kube: Kube,
    writer: DemandWriter,
    *,
    notify: Callable[[str], None],
    readable: Callable[[str], bool],
) -> OperatorWebhookParts:
    """``writer`` records what the receiver verified; ``notify`` wakes a pool whose webhook
    secret is left out of the copy, or back in; ``readable``: the namespaces where the copy
    may read Secrets (those the platform team enabled)."""
    demand = settings.demand
    in_process = settings.component != OPERATOR and bool(demand.webhook_port)
    receiver = [webhook_runnable(demand, pools, secrets, writer.record_job)] if in_process else []
    if demand.mirror is None:
        return OperatorWebhookParts(receiver, [], with_route_keys(pools, secrets.problem))
    mirror = SecretMirror(
        pools, secrets, kube, demand.mirror, interval=demand.mirror_interval, notify=notify, readable=readable
    )
    runnable = Runnable("webhook secret mirror", mirror.start, mirror.stop, leader_only=True)
    return OperatorWebhookParts(receiver, [runnable], with_route_keys(pools, mirror.problem))
