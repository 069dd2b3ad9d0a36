"""The webhook secret, read from a file mounted into the operator pod.

Why a file: the secret belongs to the operator (one GitHub App or one webhook per
organization), not to a pool's namespace; a mounted Secret reaches both operator replicas
without any API read or extra RBAC, and the kubelet updates the file when the Secret
changes, which this picks up without a restart (the file is re-read when its mtime or size
changes). One secret per line: during a rotation both the old and the new one verify.

A pool may name its own secret instead (``spec.autoscaling.webhookSecretRef``): a key of a
Secret in the pool's namespace, so that one tenant's webhook secret cannot move another
tenant's pools. :class:`PoolSecrets` reads those by name through the API (``get`` on
Secrets, deploy/rbac), not from an informer of every Secret: the operator's Secret cache may
hold only its own Secrets, and a delivery needs a handful of tenant Secrets, not all of them.
A read is kept for ``ttl`` seconds (a removed secret stops verifying within it) and re-read
sooner, at most once per ``retry_gap``, when nothing verified a delivery (a rotated or
newly created Secret works at its first delivery). A re-read that finds the same
``resourceVersion`` keeps the parsed values.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from runnerpool import api
from runnerpool.api_errors import describe
from runnerpool.runtime.kube import SECRETS, Kube

__all__ = ["PoolSecrets", "SecretFile", "Secrets", "secret_lines"]

log = logging.getLogger(__name__)


class SecretFile:
    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._secrets: tuple[bytes, ...] = ()

    def secrets(self) -> tuple[bytes, ...]:
        """The current secrets; empty when the file is missing or blank (every delivery fails)."""
        try:
            stat = os.stat(self._path)
        except OSError:
            return ()
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if stamp != self._stamp:
                try:
                    text = self._path.read_bytes()
                except OSError as err:
                    log.warning("cannot read the webhook secret file %s: %s", self._path, err.strerror)
                    return ()
                self._secrets = secret_lines(text)
                self._stamp = stamp
            return self._secrets


def secret_lines(text: bytes) -> tuple[bytes, ...]:
    """One secret per non-blank line, surrounding whitespace dropped."""
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@dataclass(frozen=True)
class Secrets:
    """A pool's webhook secrets, or why there are none (``problem``, for the pool's condition)."""

    values: tuple[bytes, ...] = ()
    problem: str | None = None


@dataclass
class _Read:
    at: float
    resource_version: str | None
    data: dict[str, str]
    problem: str | None
    #: The keys decoded so far (a delivery asks for the same ones again and again).
    decoded: dict[str, Secrets] = field(default_factory=dict)


class PoolSecrets:
    """The webhook secrets pools name in ``spec.autoscaling.webhookSecretRef``, read by name."""

    def __init__(
        self,
        kube: Kube,
        *,
        ttl: float = 60.0,
        retry_gap: float = 5.0,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._ttl, self._retry_gap, self._capacity = ttl, retry_gap, capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._reads: OrderedDict[tuple[str, str], _Read] = OrderedDict()

    def get(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
        read = self._read(namespace, ref.name, self._ttl)
        return _secrets_of(read, namespace, ref)

    def problem(self, namespace: str, ref: api.WebhookSecretRef) -> str | None:
        """Why ``ref`` gives no secret (for the pool's condition), ``None`` when it gives one.

        Read again when older than ``retry_gap``: the condition follows a Secret created or
        fixed at the pool's next reconcile, not a ``ttl`` later.
        """
        return _secrets_of(self._read(namespace, ref.name, self._retry_gap), namespace, ref).problem

    def refresh(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets | None:
        """Read again unless read within ``retry_gap``; ``None`` when not read again."""
        with self._lock:
            read = self._reads.get((namespace, ref.name))
        if read is not None and self._clock() - read.at < self._retry_gap:
            return None
        return _secrets_of(self._read(namespace, ref.name, 0.0), namespace, ref)

    def _read(self, namespace: str, name: str, max_age: float) -> _Read:
        key = (namespace, name)
        now = self._clock()
        with self._lock:
            cached = self._reads.get(key)
            if cached is not None and now - cached.at < max_age:
                self._reads.move_to_end(key)
                return cached
        fresh = self._fetch(namespace, name, cached, now)
        with self._lock:
            self._reads[key] = fresh
            self._reads.move_to_end(key)
            while len(self._reads) > self._capacity:
                self._reads.popitem(last=False)
        return fresh

    def _fetch(self, namespace: str, name: str, cached: _Read | None, now: float) -> _Read:
        try:
            raw: dict[str, Any] = self._kube.get(SECRETS, namespace, name)
        except ApiException as err:
            if err.status == 404:
                return _Read(now, None, {}, f"Secret {namespace}/{name} not found")
            log.warning("cannot read webhook Secret %s/%s: %s", namespace, name, describe(err))
            return _Read(now, None, {}, f"cannot read Secret {namespace}/{name}: {describe(err)}")
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if cached is not None and version is not None and cached.resource_version == version:
            return _Read(now, version, cached.data, cached.problem, cached.decoded)
        return _Read(now, version, dict(raw.get("data") or {}), None)


def _secrets_of(read: _Read, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
    if read.problem is not None:
        return Secrets(problem=read.problem)
    found = read.decoded.get(ref.key)
    if found is None:
        found = read.decoded[ref.key] = _decoded(read, namespace, ref)
    return found


def _decoded(read: _Read, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
    encoded = read.data.get(ref.key)
    if encoded is None:
        return Secrets(problem=f"Secret {namespace}/{ref.name} has no key {ref.key}")
    try:
        values = secret_lines(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return Secrets(problem=f"key {ref.key} of Secret {namespace}/{ref.name} is not valid base64")
    if not values:
        return Secrets(problem=f"key {ref.key} of Secret {namespace}/{ref.name} is empty")
    return Secrets(values=values)
