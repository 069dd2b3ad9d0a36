"""Delete a runner left over from an earlier JIT attempt, on the runner managers' terms.

The runner managers are the one owner of runner deletion on GitHub (``runnerpool.runners``).
A JIT fill (``secret_updater.jit``) that meets a 409 - a runner of the pod's name exists
already, from an attempt whose Secret write was lost or from before an operator restart - asks
here to remove it, with the same rule as every other deletion: a runner that is busy is never
deleted. The secret updater receives this function from the operator's assembly
(``runnerpool.operator``), since the background jobs never import each other.
"""

from __future__ import annotations

import logging

from runnerpool import naming
from runnerpool.domain import PoolRef
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import DeleteOutcome, Runner
from runnerpool.runners import listing
from runnerpool.runners.removal import ServiceRemoval, deleter

__all__ = ["delete_leftover_runner"]

log = logging.getLogger(__name__)


def delete_leftover_runner(
    github: GitHubClient,
    pool: PoolRef,
    name: str,
    *,
    runner_id: int | None = None,
    removal: ServiceRemoval | None = None,
) -> DeleteOutcome | None:
    """Delete the pool's runner called ``name`` unless it is busy, or another pool's
    (``DeleteOutcome.NOT_THE_POOLS``: ``_another_pools``); ``None``: there is none.

    ``runner_id``: the one runner GitHub made for a fill that knows it (its answer said), and
    only that one: the runner of that name may be another's by now (a new leader's fill of the
    same pod, after a 409, replaced it), and deleting it left the pod with a config of no runner.

    Found with GitHub's lookup by name (one small conditional request; the scope's whole listing
    cost a request per changed page, on every try of a fill and of a removal tried again). A
    runner listed busy is not even asked for (GitHub would refuse): ``DeleteOutcome.BUSY``.
    ``removal``: the Actions service's way for a scale-set pool (``runnerpool.runners.removal``).
    """
    named = github.runners_named(pool.scope, name)
    if runner_id is not None:
        named = [runner for runner in named if runner.id == runner_id]
    if not named:
        return None
    if any(runner.busy for runner in named):
        return DeleteOutcome.BUSY
    leftover = named[0]
    if _another_pools(leftover, pool):
        return DeleteOutcome.NOT_THE_POOLS
    outcome = deleter(removal, pool, github)(leftover.id)
    log.info("deleted leftover runner %s (id %d) of pool %s", leftover.name, leftover.id, pool.key)
    return outcome


def _another_pools(runner: Runner, pool: PoolRef) -> bool:
    """Whether ``runner`` is another pool's: it carries some pool's label (``<namespace>/<pool>``)
    and not this pool's. Pod names carry no namespace, so a pool of the same name in another
    namespace of the scope can have a runner of this name: that tenant's. A runner with no pool
    label at all may be this pool's (a scale set's runners keep none on a GitHub without custom
    scale-set labels), and is deleted as before."""
    own = listing.pool_runners([runner], pool.namespace, pool.name)
    return not own and any(naming.is_pool_runner_label(label) for label in runner.labels)
