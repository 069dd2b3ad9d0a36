"""What a failed registration write is reported as: a reason for the condition, a message.

Shared by the pool token jobs (``secret_updater.updater``) and the JIT config jobs
(``secret_updater.jit``), which report their failures the same way (``TokenReady``).
"""

from __future__ import annotations

from runnerpool.github.credentials import CredentialError
from runnerpool.github.errors import GitHubError
from runnerpool.reasons import Reason

__all__ = ["INTERNAL_REASON", "PATCH_FAILED_REASON", "PatchFailedError", "classify"]

#: Reason recorded when the token Secret cannot be written (usually: it does not exist yet).
PATCH_FAILED_REASON = Reason.TOKEN_SECRET_PATCH_FAILED
#: Reason recorded for anything the updater did not anticipate; retried like a permanent error.
INTERNAL_REASON = Reason.TOKEN_REFRESH_ERROR


class PatchFailedError(Exception):
    """Writing the Secret failed; the message is already scrubbed.

    Transient: the usual cause is the reconciler's freshly created Secret not being visible
    yet, or an API server hiccup, and a pod may be waiting for this token.
    """

    transient = True


def classify(err: Exception) -> tuple[Reason, str]:
    if isinstance(err, GitHubError):
        return err.reason, err.message
    if isinstance(err, CredentialError):
        return err.reason, err.message
    if isinstance(err, PatchFailedError):
        return PATCH_FAILED_REASON, str(err)
    return INTERNAL_REASON, f"unexpected {type(err).__name__} while refreshing the registration token"
