"""GitHub's webhook signature: HMAC-SHA256 of the raw body, ``X-Hub-Signature-256: sha256=<hex>``.

Compared in constant time (``hmac.compare_digest``) so that response timing says nothing
about how much of a forged signature was right. Several secrets may be valid at once, so a
secret can be rotated without failed deliveries: add the new one, change it on GitHub, then
remove the old one. The legacy SHA-1 header (``X-Hub-Signature``) is not accepted.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

__all__ = ["HEADER", "sign", "verify"]

HEADER = "X-Hub-Signature-256"
_PREFIX = "sha256="


def sign(secret: bytes, body: bytes) -> str:
    """The header value GitHub sends for ``body`` (also used by the test world)."""
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secrets: Iterable[bytes], body: bytes, header: str | None) -> bool:
    """True when ``header`` is a valid signature of ``body`` under one of ``secrets``."""
    if not header or not header.startswith(_PREFIX):
        return False
    given = header.encode("ascii", "replace")
    valid = False
    for secret in secrets:
        # No early exit: every configured secret costs the same time, match or not.
        valid |= hmac.compare_digest(sign(secret, body).encode("ascii"), given)
    return valid
