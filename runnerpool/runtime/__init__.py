"""The controller runtime, kept apart from reconcile logic.

Work queue, controller loop, informers built from a declared table of watches (with their
indexed stores) and leader election: the pieces controller-runtime gives a Go operator.
The reconciler is a plain ``key -> Result`` callable and knows none of this.
"""

from runnerpool.runtime.controller import Controller, Result
from runnerpool.runtime.informers import Event, InformerSet, NamespaceNotWatchedError, Watch
from runnerpool.runtime.leader import LeaderElector
from runnerpool.runtime.workqueue import RateLimiter, RateLimitingQueue

__all__ = [
    "Controller",
    "Event",
    "InformerSet",
    "LeaderElector",
    "NamespaceNotWatchedError",
    "RateLimiter",
    "RateLimitingQueue",
    "Result",
    "Watch",
]
