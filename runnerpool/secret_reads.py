"""Secrets pools name, by name: from the cache once labelled, read through the API before that.

The operator's one by-name Secret reader, bounded (``capacity`` reads kept, least recently
used first out): the credential Secrets pools name, and the webhook Secrets pools name in
``spec.autoscaling.webhookSecretRef`` (``runnerpool.demand.secret.PoolSecrets`` decodes them).

The operator's Secret cache holds only Secrets that carry one of its labels
(``runnerpool.watches``): a credential Secret gets ``naming.CREDENTIAL_LABEL`` from
``runnerpool.credential_protection`` at the first reconcile of a pool that names it. Until
then (a new pool's first pass, a Secret whose label someone removed, one that does not exist
yet) it is read by name, a ``get`` on Secrets, so a new pool does not wait for the label:

* A cached copy always wins: the informer keeps it current, a rotation included.
* :meth:`SecretReads.read` (what protection decides on) reads a Secret that is not cached
  again every time; :meth:`SecretReads.get` (the readers that only need the data to build
  a GitHub client: the secret updater, runner managers, the poller) reuses a read, or the
  answer of protection's own patch, for ``fresh_for`` seconds, the moment until the informer
  brings the labelled copy; a caller may ask for another ``max_age`` (a webhook secret is kept
  longer for deliveries, and read again sooner for its pool's condition).
* A missing Secret is read again no sooner than a backoff that doubles from ``first_retry``
  (1 s) to ``max_retry`` (30 s), however many pools name it and however often they are
  reconciled (or after the caller's ``max_age``, when that is shorter);
  :meth:`SecretReads.retry_in` tells the reconciler when to look again.

What it returns is shared, as the cache's objects are: read it, never change it. A copy per
call was the receiver's cost of a forged delivery (its mirror Secret, every pool's webhook
secret, copied whole for each ref the delivery's URL names, before the signature was checked).

That is how a Secret created after the pool that names it is noticed: no watch of ours can
see it, it carries no label of ours yet. The other ways were weighed and left: a watch per
missing name (field selector ``metadata.name=``) is one more long-lived connection and thread
per name, without a bound, and a metadata-only watch of every Secret costs memory for every
foreign Secret again. One GET per missing Secret per 30 s at most is bounded by the distinct
names pools name, and a Secret created a second after its pool is found within a second.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.client.rest import ApiException

from runnerpool.runtime.kube import CONFIG_MAPS, SECRETS, Kube, Resource

__all__ = ["SecretCache", "SecretReads", "config_maps"]

Obj = dict[str, Any]


class SecretCache(Protocol):
    def get_secret(self, namespace: str, name: str) -> Obj | None: ...


@dataclass
class _Read:
    at: float
    #: ``None``: not found.
    secret: Obj | None
    #: For a missing Secret: not read again before this, and the wait that led to it.
    retry_at: float = 0.0
    backoff: float = 0.0


class SecretReads:
    """Secrets by name: the cache first, the API server for the rest (module docstring)."""

    def __init__(
        self,
        cache: SecretCache,
        kube: Kube,
        *,
        fresh_for: float = 10.0,
        first_retry: float = 1.0,
        max_retry: float = 30.0,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        resource: Resource = SECRETS,
    ) -> None:
        self._cache = cache
        self._kube = kube
        self._resource = resource
        self._fresh_for, self._first_retry, self._max_retry = fresh_for, first_retry, max_retry
        self._capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._reads: OrderedDict[tuple[str, str], _Read] = OrderedDict()

    def decoded(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's data, decoded (what a GitHub client is made from); ``None``: no such Secret."""
        secret = self.get(namespace, name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def get(self, namespace: str, name: str, max_age: float | None = None) -> Obj | None:
        """The Secret for its data: cached, or a read of the last ``max_age`` seconds (default
        ``fresh_for``), or read now. Raises what the API server answers but 404."""
        return self._lookup(namespace, name, self._fresh_for if max_age is None else max_age, max_age)

    def read(self, namespace: str, name: str) -> Obj | None:
        """The Secret to decide on: cached, or read now (a missing one: not before its backoff)."""
        return self._lookup(namespace, name, 0.0, None)

    def kept(self, namespace: str, name: str) -> Obj | None:
        """The Secret as last found, cached or read, however long ago, without reading it: what
        a caller goes on with while the API server cannot be read."""
        cached = self._cache.get_secret(namespace, name)
        if cached is not None:
            return cached
        with self._lock:
            found = self._reads.get((namespace, name))
        return None if found is None else found.secret

    def age(self, namespace: str, name: str) -> float | None:
        """Seconds since the Secret was last read by name; ``None`` when it never was (or is cached)."""
        with self._lock:
            found = self._reads.get((namespace, name))
        return None if found is None else self._clock() - found.at

    def remember(self, namespace: str, name: str, secret: Obj) -> None:
        """What a write of ours answered: the Secret as it is now, until the informer has it."""
        self._keep((namespace, name), _Read(self._clock(), secret))

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._reads.pop((namespace, name), None)

    def retry_in(self, namespace: str, name: str) -> float | None:
        """Seconds until a Secret found missing is read again; ``None`` when it was not missing."""
        with self._lock:
            found = self._reads.get((namespace, name))
        if found is None or found.secret is not None:
            return None
        return max(found.retry_at - self._clock(), 0.1)

    def _lookup(self, namespace: str, name: str, reuse_for: float, missing_for: float | None) -> Obj | None:
        """``reuse_for``: how old a found Secret's read may be; ``missing_for``: how old a missing
        one's may be at most (``None``: its backoff alone decides)."""
        cached = self._cache.get_secret(namespace, name)
        key = (namespace, name)
        with self._lock:
            if cached is not None:
                self._reads.pop(key, None)
                return cached
            earlier = self._reads.get(key)
        now = self._clock()
        if earlier is not None:
            waiting = missing_for is None or now - earlier.at < missing_for
            if earlier.secret is None and now < earlier.retry_at and waiting:
                return None
            if earlier.secret is not None and now - earlier.at < reuse_for:
                return earlier.secret
        try:
            secret: Obj = self._kube.get(self._resource, namespace, name)
        except ApiException as err:
            if err.status != 404:
                raise
            missed = earlier is not None and earlier.secret is None
            backoff = min(2 * earlier.backoff, self._max_retry) if missed and earlier else self._first_retry
            self._keep(key, _Read(now, None, retry_at=now + backoff, backoff=backoff))
            return None
        self._keep(key, _Read(now, secret))
        return secret

    def _keep(self, key: tuple[str, str], read: _Read) -> None:
        with self._lock:
            self._reads[key] = read
            self._reads.move_to_end(key)
            while len(self._reads) > self._capacity:
                self._reads.popitem(last=False)


class _Unwatched:
    """No cache: the operator watches no ConfigMaps."""

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        return None


#: How long a ConfigMap read by name is used again: a CA bundle changes seldom, and every
#: GitHub call of a pool that names one asks for it.
CONFIG_MAP_FRESH_FOR = 60.0


def config_maps(kube: Kube) -> Callable[[str, str], dict[str, str] | None]:
    """The ConfigMaps pools name for their CA bundle (``spec.githubServerTLS``), by name: the
    same reads, backoff and bound as Secrets (one GET per ConfigMap a minute at most), as no
    watch of ours sees them."""
    reads = SecretReads(_Unwatched(), kube, fresh_for=CONFIG_MAP_FRESH_FOR, resource=CONFIG_MAPS)

    def data(namespace: str, name: str) -> dict[str, str] | None:
        found = reads.get(namespace, name)
        return None if found is None else dict(found.get("data") or {})

    return data
