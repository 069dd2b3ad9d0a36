"""The one read interface of the controllers: what they ask the informer caches.

The reconciler, the runner managers, the pod step, credential protection, the demand
recorder and the poller all read through :class:`Reads` (``runnerpool.watches.PoolCache``
implements it on the informers; tests pass stand-ins with the reads they need).

Pools come parsed: each pool is validated once per resourceVersion, on the informer's
thread, and every reader shares the result (:class:`ParsedPool`).  The models are frozen
(``api.KubeModel``), so no reader can change what the next one sees; ``ParsedPool.raw`` is
the cached wire object itself: read it, never change it.  So are a pool's pods
(``list_pods``); every other read answers copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from runnerpool import api

__all__ = ["ParsedPool", "PodsNotCachedError", "Reads", "parse_pool"]


class PodsNotCachedError(LookupError):
    """The pods of a namespace whose pod informer is not running, or has not listed yet (not
    enabled yet, or no longer: ``runnerpool.namespace_access``): unknown, not "none". Nothing
    may be decided there on "no pod": a runner deleted on GitHub, a finalizer let go."""


@dataclass(frozen=True)
class ParsedPool:
    """A cached pool and its parse: ``model`` when the stored object validates, else
    ``problems`` says why (a spec written under an older, looser schema).

    A pool being deleted whose spec fails only today's rules has both: the ``model`` parsed
    without the rules (``api.rules_skipped``), so that its finalizer can run, and the
    ``problems``. Every reader sees that model, so ``_for_deletion`` keeps only one that still
    has what readers take for granted from the rules."""

    raw: dict[str, Any]
    model: api.RunnerPool | None
    problems: str = ""


def parse_pool(raw: dict[str, Any]) -> ParsedPool:
    """Never raises: it runs on the informer's thread, and a pool that cannot be parsed is
    one the reconciler reports (``InvalidSpecError``), not one the cache loses."""
    try:
        return ParsedPool(raw, api.RunnerPool.model_validate(raw))
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
    except Exception as err:  # a rule that broke on a shape it did not expect: still invalid
        problems = f"{type(err).__name__}: {err}"
    return ParsedPool(raw, _for_deletion(raw), problems)


def _for_deletion(raw: dict[str, Any]) -> api.RunnerPool | None:
    """A deleted pool's spec without the rules, which it may have been stored before (its
    scope, credential and scale set are what the finalizer needs); None when not deleted, or
    when even its types are not today's."""
    if not (raw.get("metadata") or {}).get("deletionTimestamp"):
        return None
    with api.rules_skipped():
        try:
            model = api.RunnerPool.model_validate(raw)
            # What every reader takes for granted from the rules: one scope, and a CA source
            # that names something (they raise otherwise, in readers that serve every pool).
            _ = model.scope, model.spec.connection
        except Exception:  # types or bounds, or one of those: the pool stays refused, as before
            return None
    return model


class Reads(Protocol):
    """Informer-backed reads; objects are wire-format (camelCase) dicts, copies unless said."""

    def pool(self, namespace: str, name: str) -> ParsedPool | None:
        """The pool, parsed (shared, read-only); ``None`` when it is not cached."""
        ...

    def pools_in(self, namespace: str) -> list[ParsedPool]:
        """Every cached pool of one namespace, parsed (shared, read-only)."""
        ...

    def autoscaling_pools(self, scopes: Iterable[str] | None = None) -> list[api.RunnerPool]:
        """Valid autoscaling pools not being deleted, under one of ``scopes`` (scope keys,
        ``runnerpool.demand.matching.job_scope_keys``); ``None``: all of them."""
        ...

    def scale_set_pools(self) -> list[api.RunnerPool]:
        """Valid pools with ``spec.scaleSet``, being deleted or not."""
        ...

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def list_secrets(self, namespace: str | None = None) -> list[dict[str, Any]]: ...
    def get_disruption_budget(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    # A kubernetes-mode pool's runner ServiceAccount and RoleBinding (runnerpool.children).
    def get_service_account(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_role_binding(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_pods(self, namespace: str, pool: str) -> list[dict[str, Any]]:
        """The runner pods of one pool (by the pool label), sorted by name: the cached objects
        themselves, shared like the pools (read them, never change them), because every pass
        and every runner-manager round reads them and copying them was a tenth of the CPU.
        ``PodsNotCachedError`` where they are not known (a namespace not watched yet)."""
        ...

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether the namespace is being deleted (or already gone) as far as the cache knows."""
        ...
