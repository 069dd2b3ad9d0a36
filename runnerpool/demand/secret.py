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
The reads go through the operator's one bounded by-name reader (``runnerpool.secret_reads``):
a read is kept for ``ttl`` seconds (a removed secret stops verifying within it) and re-read
sooner, at most once per ``retry_gap``, when nothing verified a delivery (a rotated or
newly created Secret works at its first delivery).
"""

from __future__ import annotations

import base64
import binascii
import http.client
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3.exceptions
from cachetools import TTLCache
from kubernetes.client.rest import ApiException

from runnerpool import api, naming
from runnerpool.api_errors import describe
from runnerpool.domain import WebhookSecretProblem
from runnerpool.reasons import Reason
from runnerpool.secret_reads import SecretReads

__all__ = [
    "MAX_POOL_SECRET_BYTES",
    "MAX_POOL_SECRET_LINES",
    "STALE_COPY_FOR",
    "PoolSecrets",
    "SecretFile",
    "Secrets",
    "secret_lines",
]

#: What a read can raise besides a 404: the API server's refusals, and a connection that broke
#: (``runnerpool.runtime.transport`` gives up after its attempts with the socket's error; the
#: kubernetes client's urllib3, used where that transport is not, with urllib3's).
_READ_FAILED = (ApiException, OSError, http.client.HTTPException, urllib3.exceptions.HTTPError)
#: Failed reads remembered at most (one per webhook Secret pools name).
_FAILED_MAX = 4096
#: While reads fail, the last copy found is used for at most this long after it was read: a
#: secret rotated because it leaked must not go on verifying deliveries for as long as the
#: API server cannot be reached.
STALE_COPY_FOR = 300.0

#: A pool's own webhook secret: at most this many lines (the secret, and the next one while
#: rotating, with room to spare) of at most this many bytes in all. Every line is tried as an
#: HMAC key on every delivery that names the pool, and deliveries come from anyone on the
#: internet: a tenant's Secret of 230,000 short lines cost 4.5 s of CPU per forged request.
#: The receiver's copy of these secrets (one Secret under 1 MiB for every pool) is shared
#: between namespaces (``secret_mirror.fair_share``): a tenant cannot fill it for the others
#: with many secrets at this bound, only its own share.
MAX_POOL_SECRET_LINES = 8
MAX_POOL_SECRET_BYTES = 4096

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


class PoolSecrets:
    """The webhook secrets pools name in ``spec.autoscaling.webhookSecretRef``, read by name
    through the operator's one Secret reader (``runnerpool.secret_reads``)."""

    def __init__(self, reads: SecretReads, *, ttl: float = 60.0, retry_gap: float = 5.0) -> None:
        self._reads = reads
        self._ttl, self._retry_gap = ttl, retry_gap
        #: Reads that failed (but for a 404, which the reader backs off itself), not tried again
        #: for ``retry_gap`` (``_read``): every delivery asks, and ones the internet sends by the
        #: thousand, signed or not, must not read the Secret (or log) once each while the API
        #: server refuses or cannot be reached.
        self._failed: TTLCache[tuple[str, str], Secrets] = TTLCache(_FAILED_MAX, retry_gap)
        self._failed_lock = threading.Lock()

    def get(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets:
        return self._secrets(namespace, ref, self._ttl)

    def problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None:
        """Why ``ref`` gives no secret (for the pool's condition), ``None`` when it gives one.

        Read again when older than ``retry_gap``: the condition follows a Secret created or
        fixed at the pool's next reconcile, not a ``ttl`` later.
        """
        cause = self._secrets(namespace, ref, self._retry_gap).problem
        if cause is None:
            return None
        fix = "create the Secret or fix spec.autoscaling.webhookSecretRef"
        return WebhookSecretProblem(Reason.SECRET_NOT_USABLE, cause, fix)

    def refresh(self, namespace: str, ref: api.WebhookSecretRef) -> Secrets | None:
        """Read again unless read within ``retry_gap``; ``None`` when not read again."""
        age = self._reads.age(namespace, ref.name)
        if age is not None and age < self._retry_gap:
            return None
        return self._secrets(namespace, ref, 0.0)

    def _secrets(self, namespace: str, ref: api.WebhookSecretRef, max_age: float) -> Secrets:
        raw, failed = self._read(namespace, ref.name, max_age)
        if failed is not None:
            return failed
        if raw is None:
            return Secrets(problem=f"Secret {namespace}/{ref.name} not found")
        if _is_credential(raw):
            return Secrets(
                problem=f"Secret {namespace}/{ref.name} is a pool's GitHub credential (it carries "
                f"{naming.CREDENTIAL_LABEL}): a webhook secret must be a Secret of its own, since it "
                "is copied where the internet-facing webhook receiver reads it"
            )
        return _decoded(raw.get("data") or {}, namespace, ref)

    def _read(
        self, namespace: str, name: str, max_age: float
    ) -> tuple[dict[str, Any] | None, Secrets | None]:
        """The Secret (``None``: not found), or why it cannot be read. While a read failed less
        than ``retry_gap`` ago it is not read again: the last copy found is used meanwhile, if
        it was read less than ``STALE_COPY_FOR`` ago (a secret rotated meanwhile verifies once
        the API server answers again)."""
        key = (namespace, name)
        with self._failed_lock:
            failed = self._failed.get(key)
        if failed is None:
            try:
                return self._reads.get(namespace, name, max_age), None
            except _READ_FAILED as err:
                log.warning("cannot read webhook Secret %s/%s: %s", namespace, name, describe(err))
                failed = Secrets(problem=f"cannot read Secret {namespace}/{name}: {describe(err)}")
                with self._failed_lock:
                    self._failed[key] = failed
        kept = self._reads.kept(namespace, name)
        age = self._reads.age(namespace, name)
        if kept is None or (age is not None and age > STALE_COPY_FOR):
            return None, failed
        return kept, None


def _is_credential(secret: dict[str, Any]) -> bool:
    """A Secret some pool uses as its credential: the operator labels and finalizes every one
    (``runnerpool.credential_protection``). The CRD refuses a pool naming its own credential as
    its webhook secret, but not a sibling pool's; this refuses it at the read, so that neither
    the pool's verification nor the receiver's mirror (``runnerpool.demand.secret_mirror``)
    takes a PAT for a webhook secret."""
    meta = secret.get("metadata") or {}
    return naming.CREDENTIAL_LABEL in (meta.get("labels") or {}) or naming.CREDENTIAL_FINALIZER in (
        meta.get("finalizers") or ()
    )


def _decoded(data: Mapping[str, str], namespace: str, ref: api.WebhookSecretRef) -> Secrets:
    encoded = data.get(ref.key)
    if encoded is None:
        return Secrets(problem=f"Secret {namespace}/{ref.name} has no key {ref.key}")
    try:
        values = secret_lines(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return Secrets(problem=f"key {ref.key} of Secret {namespace}/{ref.name} is not valid base64")
    if not values:
        return Secrets(problem=f"key {ref.key} of Secret {namespace}/{ref.name} is empty")
    size = sum(map(len, values))
    if len(values) > MAX_POOL_SECRET_LINES or size > MAX_POOL_SECRET_BYTES:
        return Secrets(
            problem=f"key {ref.key} of Secret {namespace}/{ref.name} holds {len(values)} line(s), "
            f"{size} bytes: a webhook secret may have at most {MAX_POOL_SECRET_LINES} "
            f"lines (one secret per line) of {MAX_POOL_SECRET_BYTES} bytes in all"
        )
    return Secrets(values=values)
