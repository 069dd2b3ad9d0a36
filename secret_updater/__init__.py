"""The secret updater: registration tokens and JIT configs for runner pools, on a schedule.

The reconciler starts one job per pool; each job keeps the pool's ``runner-token-<pool>``
Secret filled with a token that has at least ``margin`` left, and reports failures back so
they can become conditions instead of silently stale tokens (``updater``); a JIT pod's
Secret gets its own runner's config, and is emptied once used (``jit``). It is the one writer
of those Secrets' data, and deletes no runner on GitHub itself (``runnerpool.runners`` does).
The pool reference and the failure it reports are shared types (``runnerpool.domain``);
credential Secrets become GitHub clients in ``runnerpool.github.credentials``.
"""

from secret_updater.timing import RetryPolicy, next_run_after_failure, next_run_after_success
from secret_updater.updater import (
    SecretUpdater,
    token_patch,
)

__all__ = [
    "RetryPolicy",
    "SecretUpdater",
    "next_run_after_failure",
    "next_run_after_success",
    "token_patch",
]
