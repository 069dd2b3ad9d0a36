"""Registration tokens for runner pools, refreshed on a schedule.

The reconciler starts one job per pool; each job keeps the pool's ``runner-token-<pool>``
Secret filled with a token that has at least ``margin`` left, and reports failures back so
they can become conditions instead of silently stale tokens.
"""

from secret_updater.credentials import ClientCache, CredentialError, client_from_secret_data
from secret_updater.filler import (
    DEFAULT_MARGIN,
    TOKEN_EXPIRY_ANNOTATION,
    TOKEN_SECRET_KEY,
    PoolRef,
    TokenFailure,
    TokenUpdater,
    token_patch,
)
from secret_updater.scheduler import RetryPolicy, next_run_after_failure, next_run_after_success

__all__ = [
    "DEFAULT_MARGIN",
    "TOKEN_EXPIRY_ANNOTATION",
    "TOKEN_SECRET_KEY",
    "ClientCache",
    "CredentialError",
    "PoolRef",
    "RetryPolicy",
    "TokenFailure",
    "TokenUpdater",
    "client_from_secret_data",
    "next_run_after_failure",
    "next_run_after_success",
    "token_patch",
]
