"""The controller runtime, kept apart from reconcile logic.

Work queue, controller loop, informer caches and leader election: the pieces
controller-runtime gives a Go operator.  The reconciler is a plain
``key -> Result`` callable and knows none of this.
"""

from runnerpool.runtime.controller import Controller, Result
from runnerpool.runtime.informers import InformerSet, NamespaceNotWatchedError, owner_key
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.workqueue import RateLimiter, RateLimitingQueue

__all__ = [
    "Controller",
    "InformerSet",
    "LeaderElector",
    "NamespaceNotWatchedError",
    "RateLimiter",
    "RateLimitingQueue",
    "Result",
    "owner_key",
]
