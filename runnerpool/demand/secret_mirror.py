"""The pools' own webhook secrets, copied where the webhook receiver may read them.

Why a copy: the receiver faces the internet, so it runs apart from the operator with its own
ServiceAccount (``--component webhook-receiver``), and that account may read no Secret in a
tenant's namespace: a hole in the receiver must not hand out the tenants' GitHub
credentials, nor any Secret a namespace holds. Yet a pool that names its own webhook secret
(``spec.autoscaling.webhookSecretRef``, a key of a Secret in the pool's namespace) must still
have its deliveries verified. So the operator, which reads those Secrets by name anyway (the
pool's condition says when one is missing), copies each pool's *webhook* secret, and nothing
else, into one Secret in its own namespace (``--webhook-secret-mirror``, installed empty by
deploy/ and the chart); the receiver's Role reads that one Secret by name (``resourceNames``)
and the operator's may only ``get``/``patch`` it (no ``create``, no other Secret there).

Alternatives weighed: granting the receiver ``get`` on Secrets in every runner namespace
(every tenant's credential in reach of the internet-facing pod); one mirror Secret per pool
(the receiver would need ``list`` to find them, or a restart to learn new names); the
operator verifying on the receiver's behalf (a call from the internet-facing pod into the
one that holds the power, which is what the split removes).

What the copy gives away: whoever holds the receiver's token can read every pool's webhook
secret, i.e. forge deliveries for any pool. That token can already patch any pool's
``status.demand`` directly, so the copy adds nothing to it; what neither can do is exceed a
pool's ``spec.autoscaling.maxReplicas`` (the spec is not the receiver's to write), read a
credential, or start a pod.

One key per distinct ``(namespace, Secret, key)``: ``<namespace>_<secret>_<key>``. Namespaces
and Secret names cannot hold ``_`` (DNS names), so the first two ``_`` split it back whatever
the key holds. A Secret's keys have at most 253 characters, and these three may add up to
571: a longer one is ``<namespace>_<digest>`` (SHA-256 of the Secret's name and key), so that
one pool's long names cannot make the whole mirror's patch fail, and every tenant's deliveries
with it.

Room, shared fairly: the API server refuses a Secret whose values pass 1 MiB, and one refused
patch froze the whole copy, additions and removals, for every tenant: one tenant's 256 pools
naming 4 KiB secrets each (``secret.MAX_POOL_SECRET_BYTES``) were enough. So the copy keeps
to :data:`BUDGET`, counted by :func:`entry_bytes`, and when the pools' secrets need more, the
namespace that holds the most gives up its largest secret, again and again, until they fit
(:func:`fair_share`): a namespace loses room only while no other holds more, so a tenant who
asks for too much leaves out its own secrets and nobody else's. The pools whose secret is
left out say so (``WebhookSecretReady`` False, ``SecretNotMirrored``: :meth:`SecretMirror.problem`)
and are woken when that changes. Room for some 6,000 secrets of 64 bytes under short names
(1,600 under the longest).

Timing: the leader brings the copy up to date every ``--webhook-secret-mirror-interval``;
the pools' Secrets are read through ``secret.PoolSecrets`` (kept a minute), so a new pool's
secret verifies within one interval and a rotated one within a minute and one interval (the
old one keeps verifying meanwhile; GitHub's failed deliveries can be redelivered, and polling
repairs the demand anyway). The receiver re-reads the copy at its first delivery that no
secret it knows signs (at most every few seconds), as it did the pools' Secrets.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool import api
from runnerpool.api_errors import describe
from runnerpool.demand.secret import PoolSecrets, Secrets
from runnerpool.domain import WebhookSecretProblem
from runnerpool.reasons import Reason
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.secret_reads import SecretReads

__all__ = ["BUDGET", "MirroredSecrets", "SecretMirror", "entry_bytes", "fair_share", "mirror_key"]

log = logging.getLogger(__name__)

#: The longest key a Secret's ``data`` may have (a DNS subdomain's length).
MAX_DATA_KEY_LENGTH = 253
#: What the copy's entries may add up to (:func:`entry_bytes`): under the API server's 1 MiB
#: for a Secret's values (``MaxSecretSize``), with 64 KiB left for its metadata.
BUDGET = 1024 * 1024 - 64 * 1024


def entry_bytes(key: str, value: bytes) -> int:
    """What one entry adds to the stored copy: its value, its key twice (in ``data`` and in the
    ``managedFields`` that record who set it) and the framing of each, rounded up."""
    return len(value) + 2 * len(key) + 32


def fair_share(sizes: Mapping[str, Mapping[str, int]], budget: int) -> set[str]:
    """The keys to leave out so that ``sizes`` (each namespace's keys and their bytes) fit in
    ``budget``: the namespace holding the most bytes gives up its largest entry (ties: the last
    key, then the namespace named first), until the rest fits. A namespace loses an entry only
    while no other holds more, so what one namespace asks for never costs another its place."""
    total = sum(sum(entries.values()) for entries in sizes.values())
    largest_last = {ns: sorted(entries.items(), key=lambda e: (e[1], e[0])) for ns, entries in sizes.items()}
    held = [(-sum(entries.values()), ns) for ns, entries in sizes.items()]
    heapq.heapify(held)
    left_out: set[str] = set()
    while total > budget:
        most, namespace = heapq.heappop(held)
        key, size = largest_last[namespace].pop()
        left_out.add(key)
        total -= size
        heapq.heappush(held, (most + size, namespace))
    return left_out


class _Pools(Protocol):
    def autoscaling_pools(self, scopes: Iterable[str] | None = None) -> list[api.RunnerPool]: ...


def mirror_key(namespace: str, ref: api.WebhookSecretRef) -> str:
    """The mirror Secret's key for key ``ref.key`` of Secret ``ref.name`` in ``namespace``."""
    key = f"{namespace}_{ref.name}_{ref.key}"
    if len(key) <= MAX_DATA_KEY_LENGTH:
        return key
    digest = hashlib.sha256(f"{ref.name}\0{ref.key}".encode()).hexdigest()
    return f"{namespace}_{digest}"


class _NothingCached:
    """The receiver caches no Secret (its account may list none): the mirror is read by name."""

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


class MirroredSecrets(PoolSecrets):
    """The receiver's view of the pools' own secrets: the same reads, caching and re-reads as
    :class:`PoolSecrets`, but of one key each in the mirror Secret instead of the pool's."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        super().__init__(SecretReads(_NothingCached(), kube))
        self._mirror = (namespace, name)

    def _in_mirror(self, namespace: str, ref: api.WebhookSecretRef) -> api.WebhookSecretRef:
        return api.WebhookSecretRef(name=self._mirror[1], key=mirror_key(namespace, ref))

    def get(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
        return super().get(self._mirror[0], self._in_mirror(namespace, ref))

    def refresh(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets | None:
        return super().refresh(self._mirror[0], self._in_mirror(namespace, ref))


class SecretMirror:
    """The operator's side (leader only): keeps the mirror Secret equal to the pools' secrets,
    as far as :data:`BUDGET` goes; ``notify`` is given the key of each pool whose secret is
    left out, or copied again."""

    def __init__(
        self,
        pools: _Pools,
        secrets: PoolSecrets,
        kube: Kube,
        mirror: tuple[str, str],
        *,
        interval: float = 10.0,
        budget: int = BUDGET,
        notify: Callable[[str], None] = lambda pool: None,
        readable: Callable[[str], bool] = lambda namespace: True,
    ) -> None:
        self._pools = pools
        self._secrets = secrets
        self._kube = kube
        self._namespace, self._name = mirror
        self._interval, self._budget, self._notify = interval, budget, notify
        #: The namespaces where a pool's secret may be read: not one read where the platform
        #: team did not enable the operator (a refused read there; or, where a namespace's own
        #: admin bound ``edit`` to the operator, a copy the platform team never agreed to).
        self._enabled_in = readable
        #: The keys the last pass left out, with what their pools' conditions say (replaced
        #: whole, never changed in place: the reconciler's threads read it).
        self._left_out: dict[str, WebhookSecretProblem] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-secret-mirror", daemon=True)
        self._missing_told = False

    def problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None:
        """The pool's ``WebhookSecretReady`` problem with a separate receiver: the Secret's own
        (``PoolSecrets.problem``), else that the last pass had no room for it in the copy."""
        return self._secrets.problem(namespace, ref) or self._left_out.get(mirror_key(namespace, ref))

    def wanted(self) -> dict[str, str]:
        """The mirror's data: every autoscaling pool's own webhook secret that can be read and
        fits its namespace's share (:func:`fair_share`); the pools of the others are told."""
        found, pools = self._readable()
        sizes = {
            ns: {key: entry_bytes(key, value) for key, value in entries.items()}
            for ns, entries in found.items()
        }
        left_out = fair_share(sizes, self._budget)
        self._tell(left_out, sizes, pools)
        return {
            key: base64.b64encode(value).decode()
            for entries in found.values()
            for key, value in entries.items()
            if key not in left_out
        }

    def _readable(self) -> tuple[dict[str, dict[str, bytes]], dict[str, list[str]]]:
        """Each namespace's readable webhook secrets by mirror key, and which pools name each key."""
        found: dict[str, dict[str, bytes]] = {}
        pools: dict[str, list[str]] = {}
        enabled: dict[str, bool] = {}  # asked once a pass per namespace, not once per pool
        for pool in self._pools.autoscaling_pools():
            ref = pool.spec.webhook_secret_ref
            if ref is None:
                continue
            if pool.namespace not in enabled:
                enabled[pool.namespace] = self._enabled_in(pool.namespace)
            if not enabled[pool.namespace]:
                continue
            key = mirror_key(pool.namespace, ref)
            pools.setdefault(key, []).append(pool.key)
            entries = found.setdefault(pool.namespace, {})
            if key not in entries and (values := self._secrets.get(pool.namespace, ref).values):
                entries[key] = b"\n".join(values)
        return found, pools

    def _tell(
        self, left_out: set[str], sizes: dict[str, dict[str, int]], pools: dict[str, list[str]]
    ) -> None:
        """Keep why each key is left out, and wake the pools whose answer changed."""
        problems: dict[str, WebhookSecretProblem] = {}
        short = sorted(ns for ns, entries in sizes.items() if not left_out.isdisjoint(entries))
        for namespace in short:
            problem = self._no_room(namespace, sizes[namespace], left_out)
            problems.update((key, problem) for key in sizes[namespace] if key in left_out)
        before, self._left_out = self._left_out, problems
        changed = sorted(
            key for key in problems.keys() | before.keys() if problems.get(key) != before.get(key)
        )
        if short and changed:
            log.warning(
                "%d pool webhook secret(s) of namespace(s) %s left out of Secret %s/%s: "
                "over their share of its %d bytes",
                len(problems),
                ", ".join(short),
                self._namespace,
                self._name,
                self._budget,
            )
        for key in changed:
            for pool in pools.get(key, ()):
                self._notify(pool)

    def _no_room(self, namespace: str, entries: dict[str, int], left_out: set[str]) -> WebhookSecretProblem:
        need = sum(entries.values())
        kept = sum(size for key, size in entries.items() if key not in left_out)
        return WebhookSecretProblem(
            Reason.SECRET_NOT_MIRRORED,
            f"the copy of the pools' webhook secrets that the webhook receiver reads (Secret "
            f"{self._namespace}/{self._name}) has no room for it: it holds {self._budget:,} bytes, shared "
            f"between namespaces, and the webhook secrets of namespace {namespace} need {need:,} of them, "
            f"more than their share ({kept:,} kept; the largest are left out first)",
            f"use fewer or shorter webhook secrets in namespace {namespace} (pools naming the same Secret "
            "and key share one copy)",
        )

    def sync(self) -> None:
        """One pass: read the mirror, patch it when it differs (removed keys set to null)."""
        wanted = self.wanted()
        try:
            current = dict(self._kube.get(SECRETS, self._namespace, self._name).get("data") or {})
        except ApiException as err:
            if err.status == 404 and not self._missing_told:
                self._missing_told = True
                log.warning(
                    "Secret %s/%s is missing (deploy/ and the chart install it): a separate webhook "
                    "receiver cannot verify deliveries with the pools' own webhook secrets",
                    self._namespace,
                    self._name,
                )
            elif err.status != 404:
                log.warning("cannot read Secret %s/%s: %s", self._namespace, self._name, describe(err))
            return
        self._missing_told = False
        if current == wanted:
            return
        data: dict[str, str | None] = {key: None for key in current if key not in wanted}
        data.update(wanted)
        self._kube.patch(SECRETS, self._namespace, self._name, {"data": data})
        log.info(
            "copied %d pool webhook secret(s) into Secret %s/%s", len(wanted), self._namespace, self._name
        )

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.sync()
            except Exception as err:
                log.warning("cannot update Secret %s/%s: %s", self._namespace, self._name, describe(err))
            self._stopping.wait(self._interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
