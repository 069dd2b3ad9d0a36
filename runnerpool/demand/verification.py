"""Which pools a webhook delivery may move: those whose webhook secret signed it.

A pool without ``spec.autoscaling.webhookSecretRef`` trusts the operator's cluster-wide
secret (``secret.SecretFile``); a pool with one trusts only its own (``secret.PoolSecrets``):
a tenant who knows the cluster-wide secret, or their own, cannot forge deliveries that move
another tenant's pools. A pool with its own secret does not also accept the cluster-wide
one: that one is known to whoever configured a webhook with it, which is what the pool's own
secret is there to exclude.

Cost, at any number of pools: a delivery the cluster-wide secret signs costs one HMAC up
front; each pool with its own secret among the job's candidates (the scope index of the pool
cache, ``matching.job_scope_keys``) costs a cached Secret lookup, and each *distinct* secret
value one HMAC, remembered for the delivery (:class:`Verdict`).

A delivery the cluster-wide secret does not sign is unverified: whoever sent it, the
internet included. Which pool secrets to try is written in the body (its repository or, for
an organization's ``ping``, its organization), so it must be parsed before it is verified;
that parse is bounded, so that a forged delivery costs its sender more than the receiver:

* only with a well-formed header (``sha256=`` and 64 hex digits): anything else cannot
  verify under any secret, and gets 401 unparsed;
* only up to :data:`UNVERIFIED_MAX` bytes (64 KiB, whatever the server's body limit: 20x
  the largest ``workflow_job`` delivery in the test data, 3.2 KiB, and 5x a real one with
  GitHub's full ``repository`` object, an estimated 12 KiB); a larger one is refused unparsed.
  Parsing 64 KiB costs at most some 3.4 ms of CPU (a list of 32,000 zeros; 0.1 ms for a
  delivery-shaped body; 1 MiB, the body cap before, took 48 ms);
* a body that is not JSON, or nested past the parser's depth (10^5 ``[``), has no
  candidates (:func:`load_json`), never an exception.

When none of the candidates' secrets signs it, those secrets are re-read
(``PoolSecrets.refresh``, at most once per few seconds each) in case one was rotated, and
the delivery is refused with 401 when still none does.

Not done here: routing per-pool secrets by URL path (``/webhook/<namespace>/<pool>``),
which would need no unverified parse at all but a webhook URL per pool on GitHub.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from runnerpool import api
from runnerpool.demand.matching import organization_scope_key, repository_scope_keys
from runnerpool.demand.secret import PoolSecrets
from runnerpool.demand.signature import verify

__all__ = ["ANY_POOL", "UNVERIFIED_MAX", "Verdict", "Verifier", "load_json"]

#: The largest unverified body parsed to find which pools' secrets to try (see the module).
UNVERIFIED_MAX = 64 * 1024
#: What GitHub sends in ``X-Hub-Signature-256``; nothing else can verify under any secret.
_WELL_FORMED = re.compile(r"sha256=[0-9a-f]{64}")


def load_json(body: bytes) -> Any:
    """``json.loads``, with every way a hostile body can fail it as ``ValueError``: not JSON,
    not UTF-8 (a ``ValueError`` already) or nested past the interpreter's recursion limit
    (``RecursionError``, which is not one)."""
    try:
        return json.loads(body)
    except RecursionError as err:
        raise ValueError("JSON nested too deep") from err


class _Candidates(Protocol):
    def autoscaling_pools(self, scopes: Iterable[str] | None = None) -> list[api.RunnerPool]: ...


class Verdict:
    """What one delivery's signature proves: ``accepted`` when some secret signed it;
    ``configured`` is False when no secret could have (the receiver answers 503).
    ``delivered``: this is a webhook delivery (it shows the webhook is configured)."""

    delivered = True

    def __init__(
        self,
        body: bytes,
        header: str | None,
        *,
        cluster: bool,
        secrets: PoolSecrets | None,
        accepted: bool | None = None,
        configured: bool = True,
    ) -> None:
        self._body, self._header = body, header
        self.cluster = cluster
        self._secrets = secrets
        self._memo: dict[bytes, bool] = {}
        self.accepted = cluster if accepted is None else accepted
        self.configured = configured

    def _signed_by(self, values: Iterable[bytes]) -> bool:
        signed = False
        for value in values:
            known = self._memo.get(value)
            if known is None:
                known = self._memo[value] = verify((value,), self._body, self._header)
            signed |= known
        return signed

    def admits(self, pool: api.RunnerPool) -> bool:
        """May this delivery move ``pool``?"""
        ref = pool.spec.autoscaling.webhook_secret_ref if pool.spec.autoscaling else None
        if ref is None:
            return self.cluster
        if self._secrets is None:
            return False
        return self._signed_by(self._secrets.get(pool.namespace, ref).values)

    def refreshed(self, pools: Iterable[api.RunnerPool]) -> bool:
        """Re-read the own secrets of ``pools`` (rate-limited); True when one of them signs."""
        if self._secrets is None:
            return False
        signed = False
        for namespace, ref in _refs(pools):
            fresh = self._secrets.refresh(namespace, ref)
            if fresh is not None:
                signed |= self._signed_by(fresh.values)
        return signed


#: A verdict that admits every pool: the poller and the tests that record jobs directly.
class _AnyPool(Verdict):
    delivered = False

    def __init__(self) -> None:
        super().__init__(b"", None, cluster=True, secrets=None)

    def admits(self, pool: api.RunnerPool) -> bool:
        return True


ANY_POOL: Verdict = _AnyPool()


def _refs(pools: Iterable[api.RunnerPool]) -> list[tuple[str, api.WebhookSecretRef]]:
    """The distinct own secrets of ``pools``."""
    unique: dict[tuple[str, str, str], tuple[str, api.WebhookSecretRef]] = {}
    for pool in pools:
        ref = pool.spec.autoscaling.webhook_secret_ref if pool.spec.autoscaling else None
        if ref is not None:
            unique.setdefault((pool.namespace, ref.name, ref.key), (pool.namespace, ref))
    return list(unique.values())


def scope_keys(payload: Any) -> list[str]:
    """The pool scope keys a delivery is about: its repository's, or its organization's (an
    organization webhook's ``ping`` names no repository)."""
    if not isinstance(payload, dict):
        return []
    repo, org = payload.get("repository"), payload.get("organization")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str) and isinstance(repo.get("url"), str):
        base, sep, _ = repo["url"].rpartition("/repos/")
        return repository_scope_keys(base, repo["full_name"]) if sep else []
    if isinstance(org, dict) and isinstance(org.get("login"), str) and isinstance(org.get("url"), str):
        base, sep, _ = org["url"].rpartition("/orgs/")
        return [organization_scope_key(base, org["login"])] if sep else []
    return []


class Verifier:
    """``cluster``: the cluster-wide secrets (may be none); ``pools``: the pool cache."""

    def __init__(
        self,
        cluster: Callable[[], tuple[bytes, ...]],
        pools: _Candidates | None = None,
        secrets: PoolSecrets | None = None,
    ) -> None:
        self._cluster = cluster
        self._pools = pools
        self._secrets = secrets

    def __call__(self, body: bytes, header: str | None) -> Verdict:
        keys = self._cluster()
        if header and keys and verify(keys, body, header):
            return Verdict(body, header, cluster=True, secrets=self._secrets)
        candidates = self._candidates(body, header)
        own = [
            pool
            for pool in candidates or ()
            if pool.spec.autoscaling and pool.spec.autoscaling.webhook_secret_ref
        ]
        # Without candidates to look at (a body the per-pool path does not parse), a receiver
        # that knows pool secrets cannot say none is configured: 401, not 503.
        unknown = candidates is None and self._secrets is not None
        verdict = Verdict(
            body,
            header,
            cluster=False,
            secrets=self._secrets,
            accepted=False,
            configured=bool(keys or own or unknown),
        )
        if own:
            verdict.accepted = any(verdict.admits(pool) for pool in own) or verdict.refreshed(own)
        return verdict

    def _candidates(self, body: bytes, header: str | None) -> list[api.RunnerPool] | None:
        """The pools an unverified delivery is about; ``None`` when it is not looked at."""
        if self._pools is None or self._secrets is None:
            return []
        if not header or not _WELL_FORMED.fullmatch(header) or len(body) > UNVERIFIED_MAX:
            return None  # verifies under no secret, or too large to parse unverified
        try:
            keys = scope_keys(load_json(body))
        except ValueError:
            return None  # not JSON: nothing to look up, and no secret of ours signed it
        return self._pools.autoscaling_pools(keys) if keys else []
