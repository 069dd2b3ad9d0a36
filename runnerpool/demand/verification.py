"""Which pools a webhook delivery may move, decided before its body is read as JSON.

A pool without ``spec.autoscaling.webhookSecretRef`` trusts the operator's cluster-wide
secret (``secret.SecretFile``); a pool with one trusts only its own (``secret.PoolSecrets``):
a tenant who knows the cluster-wide secret, or their own, cannot forge deliveries that move
another tenant's pools. A pool with its own secret does not also accept the cluster-wide
one: that one is known to whoever configured a webhook with it, which is what the pool's own
secret is there to exclude.

**Which secret to try is in the URL, never in the body** (:class:`Route`):

* ``POST /webhook``: the cluster-wide secret, and only it;
* ``POST /webhook/<namespace>/<secret>``: the keys of Secret ``<secret>`` that the pools of
  ``<namespace>`` name in their ``webhookSecretRef`` (one, ``webhook-secret``, unless pools
  name others), and only those, at most :data:`MAX_KEYS_PER_ROUTE` of them. A delivery
  verified there moves only those pools.

So an unverified body is never parsed: before, a delivery the cluster-wide secret did not
sign was parsed as JSON to find which pools' secrets to try (up to 64 KiB, ~3.4 ms of CPU;
10^5 ``[`` raised RecursionError). Now a forged delivery costs its sender a connection and
the receiver one HMAC per secret value the URL names: on ``/webhook`` the cluster-wide ones
(one, two during a rotation), on a pool-secret URL the values of that Secret's named keys,
found with one lookup of the namespace in the pool cache (no scan of every pool) and a
cached Secret lookup; a URL that no pool names costs no Secret read at all. A signature
header that is not ``sha256=`` and 64 hex digits cannot verify under any secret and costs no
lookup.

Why one URL per (namespace, Secret) and not per pool: one GitHub webhook (a repository's or
an organization's) feeds every pool of that scope, and a queued job must reach all of them
for the one-pool rule (``matching.counting_pool``) to choose; pools of one tenant that share
a Secret share a URL. Why not try every pool's secret on ``/webhook``: the cost of a forgery
would grow with the number of pools (1,000 HMACs at 1,000 pools).

When no secret named by the route signs a delivery, those secrets are re-read
(``PoolSecrets.refresh``, at most once per few seconds each) in case one was rotated, and
the delivery is refused with 401 when still none does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from runnerpool import api
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import verify
from runnerpool.domain import WebhookSecretProblem
from runnerpool.observe import WebhookSecretCheck
from runnerpool.reads import ParsedPool
from runnerpool.reasons import Reason

__all__ = [
    "ANY_POOL",
    "MAX_KEYS_PER_ROUTE",
    "Route",
    "RouteKeys",
    "Verdict",
    "Verifier",
    "load_json",
    "with_route_keys",
]

#: What GitHub sends in ``X-Hub-Signature-256``; nothing else can verify under any secret.
_WELL_FORMED = re.compile(r"sha256=[0-9a-f]{64}")
#: A namespace (DNS label) and a Secret name (DNS subdomain), as the API server allows them.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SECRET = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

#: Identifies one secret a pool may trust: (namespace, Secret name, key).
SecretId = tuple[str, str, str]
#: Keys of one Secret that a delivery to its URL is verified with, the first by name. Each
#: holds up to ``MAX_POOL_SECRET_LINES`` secrets, each an HMAC over the body of every delivery
#: to the URL, signed or forged, and a tenant's pools may name any number of keys: 1,000 pools
#: of one namespace, one key each, made one forged 64 KiB request cost 0.39 s of CPU (8,000
#: HMACs). At this bound a URL costs at most 64 HMACs (about 3 ms); pools past it are told.
MAX_KEYS_PER_ROUTE = 8


def load_json(body: bytes) -> Any:
    """``json.loads``, with every way a hostile body can fail it as ``ValueError``: not JSON,
    not UTF-8 (a ``ValueError`` already) or nested past the interpreter's recursion limit
    (``RecursionError``, which is not one). Only ever called on a verified body."""
    try:
        return json.loads(body)
    except RecursionError as err:
        raise ValueError("JSON nested too deep") from err


@dataclass(frozen=True)
class Route:
    """``/webhook/<namespace>/<secret>``: the pools of ``namespace`` that trust Secret ``secret``."""

    namespace: str
    secret: str

    @classmethod
    def parse(cls, rest: str) -> Route | None:
        """The route of the path after ``/webhook/``; ``None`` when it is not one."""
        namespace, sep, secret = rest.partition("/")
        if sep and _NAMESPACE.fullmatch(namespace) and _SECRET.fullmatch(secret):
            return cls(namespace, secret)
        return None


class _Candidates(Protocol):
    def pools_in(self, namespace: str) -> list[ParsedPool]: ...


class Verdict:
    """What one delivery's signature proves: ``accepted`` when some secret signed it;
    ``configured`` is False when no secret could have (the receiver answers 503).
    ``delivered``: this is a webhook delivery (it shows the webhook is configured)."""

    delivered = True

    def __init__(
        self,
        *,
        cluster: bool,
        signed: Iterable[SecretId] = (),
        configured: bool = True,
    ) -> None:
        self.cluster = cluster
        self.signed = frozenset(signed)
        self.accepted = cluster or bool(self.signed)
        self.configured = configured

    @property
    def signers(self) -> tuple[bool, tuple[SecretId, ...]]:
        """Which secrets signed it. Two deliveries alike here may move the same pools and no
        others: with the GUID, what names a delivery (``deliveries.DeliveryLog``). Tuples, not
        the set: the log keeps 10,000 of them, and a set costs 216 bytes even empty."""
        return self.cluster, tuple(sorted(self.signed))

    def admits(self, pool: api.RunnerPool) -> bool:
        """May this delivery move ``pool``?"""
        ref = pool.spec.webhook_secret_ref
        if ref is None:
            return self.cluster
        return (pool.namespace, ref.name, ref.key) in self.signed


#: A verdict that admits every pool: the poller and the tests that record jobs directly.
class _AnyPool(Verdict):
    delivered = False

    def __init__(self) -> None:
        super().__init__(cluster=True)

    def admits(self, pool: api.RunnerPool) -> bool:
        return True


ANY_POOL: Verdict = _AnyPool()


def _named_refs(parsed: Iterable[ParsedPool], secret: str) -> list[api.WebhookSecretRef]:
    """The distinct keys of Secret ``secret`` that autoscaling pools of ``parsed`` trust, by name."""
    unique: dict[str, api.WebhookSecretRef] = {}
    for item in parsed:
        ref = item.model.spec.webhook_secret_ref if item.model is not None else None
        if ref is not None and ref.name == secret:
            unique.setdefault(ref.key, ref)
    return [unique[key] for key in sorted(unique)]


def _refs(parsed: Iterable[ParsedPool], secret: str) -> list[api.WebhookSecretRef]:
    """The keys a delivery to Secret ``secret``'s URL is verified with: the first
    :data:`MAX_KEYS_PER_ROUTE` by name of those the pools name."""
    return _named_refs(parsed, secret)[:MAX_KEYS_PER_ROUTE]


class RouteKeys:
    """The operator's side of :data:`MAX_KEYS_PER_ROUTE`: a pool whose key its URL leaves out
    says so (``WebhookSecretReady=False``), as the receiver that leaves it out cannot."""

    def __init__(self, pools: _Candidates) -> None:
        self._pools = pools

    def problem(self, namespace: str, ref: api.WebhookSecretRef) -> WebhookSecretProblem | None:
        named = [r.key for r in _named_refs(self._pools.pools_in(namespace), ref.name)]
        if ref.key not in named[MAX_KEYS_PER_ROUTE:]:
            return None
        return WebhookSecretProblem(
            Reason.TOO_MANY_SECRET_KEYS,
            f"the pools of namespace {namespace} name {len(named)} keys of Secret {ref.name}, and a "
            f"delivery to its URL (/webhook/{namespace}/{ref.name}) is verified with the first "
            f"{MAX_KEYS_PER_ROUTE} by name only, not with key {ref.key}",
            "give this pool's webhook a Secret of its own (spec.autoscaling.webhookSecretRef.name, "
            f"its own URL), or name at most {MAX_KEYS_PER_ROUTE} keys of this one",
        )


def with_route_keys(pools: _Candidates, check: WebhookSecretCheck) -> WebhookSecretCheck:
    """``check`` (the Secret's own problems first), then whether the pool's URL tries its key."""
    keys = RouteKeys(pools)
    return lambda namespace, ref: check(namespace, ref) or keys.problem(namespace, ref)


class Verifier:
    """``cluster``: the cluster-wide secrets (may be none); ``pools``: the pool cache, and
    ``secrets`` the pools' own secrets (both ``None``: only ``/webhook`` verifies)."""

    def __init__(
        self,
        cluster: Callable[[], tuple[bytes, ...]],
        pools: _Candidates | None = None,
        secrets: PoolSecrets | None = None,
    ) -> None:
        self._cluster = cluster
        self._pools = pools
        self._secrets = secrets

    def __call__(self, body: bytes, header: str | None, route: Route | None = None) -> Verdict:
        if route is None:
            keys = self._cluster()
            return Verdict(
                cluster=bool(header and keys and verify(keys, body, header)), configured=bool(keys)
            )
        if self._pools is None or self._secrets is None or not header or not _WELL_FORMED.fullmatch(header):
            return Verdict(cluster=False)  # verifies under no secret: no lookup
        refs = _refs(self._pools.pools_in(route.namespace), route.secret)
        signed = self._signed(body, header, route.namespace, refs, refresh=False)
        return Verdict(
            cluster=False, signed=signed or self._signed(body, header, route.namespace, refs, refresh=True)
        )

    def _signed(
        self, body: bytes, header: str, namespace: str, refs: list[api.WebhookSecretRef], *, refresh: bool
    ) -> list[SecretId]:
        assert self._secrets is not None
        signed: list[SecretId] = []
        for ref in refs:
            found = self._secrets.refresh(namespace, ref) if refresh else self._secrets.get(namespace, ref)
            if found is not None and found.values and verify(found.values, body, header):
                signed.append((namespace, ref.name, ref.key))
        return signed
