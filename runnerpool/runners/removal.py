"""Which way a pool's runners are deleted on GitHub: REST, or the Actions service.

A scale-set pool's runners belong to its scale set, and GitHub's own clients (actions/scaleset,
ARC's ephemeral runner controller) remove them through the Actions service
(``DELETE _apis/distributedtask/pools/0/agents/{id}``), with the admin token the listener
already holds: no REST call per runner, so a busy scale set's churn spends none of the
credential's REST budget. Every other pool's runners go by REST
(``DELETE .../actions/runners/{id}``). Either answers the same ``DeleteOutcome``: the Actions
service's ``JobStillRunningException`` is REST's 422, ``BUSY``; its ``AgentNotFoundException``
is REST's 404, ``ALREADY_GONE``.

The runner managers stay the one owner of runner deletion (``runnerpool.runners.manager``);
this only picks the way. The scale-set side (``runnerpool.scale_set_pools``) provides the
service's way, as the operator's assembly wires it: the runner managers never import it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from runnerpool.domain import PoolRef
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import DeleteOutcome

__all__ = ["DeleteRunner", "ServiceRemoval", "deleter"]

#: Deletes one of the pool's runners by its id.
DeleteRunner = Callable[[int], DeleteOutcome]


class ServiceRemoval(Protocol):
    def remover(self, pool: PoolRef) -> DeleteRunner | None:
        """The Actions service's removal for a scale-set pool's runners; None for other pools."""
        ...


def deleter(removal: ServiceRemoval | None, pool: PoolRef, github: GitHubClient) -> DeleteRunner:
    """The pool's way: the service's when it has one, else REST with ``github``."""
    by_service = removal.remover(pool) if removal is not None else None
    return by_service if by_service is not None else functools.partial(github.delete_runner, pool.scope)
