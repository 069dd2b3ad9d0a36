"""Per-pool exponential backoff of refused pod creates, and the refusal the pool reports meanwhile.

A create the API server refuses (a ResourceQuota, Pod Security, an admission webhook) is
refused again at once: the cause is in the cluster or the spec, not in the timing. The work
queue's backoff alone does not stop a hot loop, because every watch event of the pool (its
own status write saying the create failed, a pod event, a token refresh) adds its key again
without delay. So the pod step asks here before it creates: after the n-th refusal in a row
the pool's next create waits ``base * 2**(n-1)`` seconds, at most ``cap``; a create that
succeeds resets it.

The refusal is kept until then, so every reconcile meanwhile computes the same condition
(``PodCreateFailed``) and writes nothing. It belongs to the pod template it was made with: a
pool whose spec changed (the user fixed a volume, an image) tries its new template at once.
A cluster-side fix (a quota raised or removed) is seen at the next attempt, at most ``cap``
later.

Kept in memory, like the create expectations: a restarted operator tries once, then backs
off again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from runnerpool.reasons import Reason

__all__ = ["BASE_DELAY", "MAX_DELAY", "CreateBackoff", "CreateFailure", "Doubling"]

#: Seconds before the first retry: long enough that a pool's own status write and the watch
#: events it causes find the backoff still running.
BASE_DELAY = 2.0
#: The longest wait between attempts: a refused pool costs 30 creates an hour, and a quota
#: removed is noticed within two minutes.
MAX_DELAY = 120.0
#: 2**32 times any base already exceeds any cap; stops float overflow.
_MAX_EXPONENT = 32


@dataclass(frozen=True)
class Doubling:
    """Delays that double from ``base`` to at most ``cap`` (shared with the start backoff)."""

    base: float
    cap: float

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("need 0 < base <= cap")

    def after(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row."""
        return min(self.base * 2.0 ** min(failures - 1, _MAX_EXPONENT), self.cap)


@dataclass(frozen=True)
class CreateFailure:
    """The last refusal of a pool's pod create: what the API server said (``describe``d)."""

    cause: str
    #: The template hash the refused pod had.
    template: str
    #: Refusals in a row.
    failures: int
    #: Seconds from the refusal to the next attempt.
    delay: float
    #: Monotonic time from which the next create may be tried.
    retry_at: float
    #: The pod as written is refused (400 strict decoding, 422 invalid), not the cluster's
    #: state (a quota, Pod Security, a webhook): the pool's template needs a fix.
    invalid: bool = False
    #: A pod's own (JIT) Secret was refused, not the pod: only a Secret that goes through ends it.
    secret: bool = False

    @property
    def reason(self) -> Reason:
        return Reason.TEMPLATE_INVALID if self.invalid else Reason.POD_CREATE_FAILED


class CreateBackoff:
    def __init__(
        self,
        base: float = BASE_DELAY,
        cap: float = MAX_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._delays = Doubling(base, cap)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, CreateFailure] = {}

    def failure(self, pool: str, template: str) -> CreateFailure | None:
        """The refusal the pool reports, if its current template was refused."""
        with self._lock:
            found = self._failures.get(pool)
        return found if found is not None and found.template == template else None

    def wait(self, pool: str, template: str) -> float | None:
        """Seconds until the pool may try a create again; ``None``: it may now."""
        found = self.failure(pool, template)
        if found is None:
            return None
        left = found.retry_at - self._clock()
        return left if left > 0 else None

    def failed(
        self, pool: str, template: str, cause: str, *, invalid: bool = False, secret: bool = False
    ) -> CreateFailure:
        """Count a refusal (``invalid``: of the pod as written; ``secret``: of a pod's Secret);
        returns it with the time of the next attempt."""
        with self._lock:
            before = self._failures.get(pool)
            count = before.failures + 1 if before is not None and before.template == template else 1
            delay = self._delays.after(count)
            failure = CreateFailure(cause, template, count, delay, self._clock() + delay, invalid, secret)
            self._failures[pool] = failure
            return failure

    def succeeded(self, pool: str) -> None:
        """A create went through: the next refusal starts the backoff again from ``base``."""
        self.forget(pool)

    def forget(self, pool: str) -> None:
        with self._lock:
            self._failures.pop(pool, None)
