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
with it. A Secret holds 1 MiB: some 8,000 pools' own secrets of 64 bytes (a pool's is
bounded, ``secret.MAX_POOL_SECRET_BYTES``).

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
import logging
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool import api
from runnerpool.api_errors import describe
from runnerpool.demand.secret import PoolSecrets, Secrets
from runnerpool.runtime.kube import SECRETS, Kube
from runnerpool.secret_reads import SecretReads

__all__ = ["MirroredSecrets", "SecretMirror", "mirror_key"]

log = logging.getLogger(__name__)

#: The longest key a Secret's ``data`` may have (a DNS subdomain's length).
MAX_DATA_KEY_LENGTH = 253


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
    """The operator's side (leader only): keeps the mirror Secret equal to the pools' secrets."""

    def __init__(
        self,
        pools: _Pools,
        secrets: PoolSecrets,
        kube: Kube,
        mirror: tuple[str, str],
        *,
        interval: float = 10.0,
    ) -> None:
        self._pools = pools
        self._secrets = secrets
        self._kube = kube
        self._namespace, self._name = mirror
        self._interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-secret-mirror", daemon=True)
        self._missing_told = False

    def wanted(self) -> dict[str, str]:
        """The mirror's data: every autoscaling pool's own webhook secret that can be read."""
        data: dict[str, str] = {}
        for pool in self._pools.autoscaling_pools():
            ref = pool.spec.autoscaling.webhook_secret_ref if pool.spec.autoscaling else None
            if ref is None or mirror_key(pool.namespace, ref) in data:
                continue
            found = self._secrets.get(pool.namespace, ref)
            if found.values:
                joined = b"\n".join(found.values)
                data[mirror_key(pool.namespace, ref)] = base64.b64encode(joined).decode()
        return data

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
