"""Checks a GitHub App JWT the way GitHub does before minting an installation token.

The operator signs these itself, and the classic mistakes (a clock in the
future, ``exp`` more than ten minutes ahead, the wrong key) only surface
against the real service.  Catching them in the fake means a test fails with
GitHub's own message instead of a demo failing in front of people.  Signature
checking is optional: it needs the App's key, which only some tests have.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

# GitHub refuses JWTs that live longer than this (seconds, measured from now).
MAX_LIFETIME = 600
# Small clock skew GitHub tolerates between the signer and itself.
CLOCK_SKEW = 60

NOT_DECODABLE = "A JSON web token could not be decoded"
EXP_TOO_FAR = "'Expiration time' claim ('exp') is too far in the future"
EXPIRED = (
    "'Expiration time' claim ('exp') must be a numeric value representing the future time"
    " at which the assertion expires"
)
IAT_IN_FUTURE = (
    "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
)
NO_ISSUER = "'Issuer' claim ('iss') must be an Integer"
UNKNOWN_APP = "Integration not found"


class JWTRejectedError(Exception):
    """The JWT would be refused by GitHub; ``str(exc)`` is GitHub's message."""


@dataclass(frozen=True)
class AppClaims:
    """What the fake keeps from an accepted JWT: who signed it and until when."""

    app_id: str
    issued_at: int
    expires_at: int


def _b64decode(segment: str) -> bytes:
    padded = segment + "=" * (-len(segment) % 4)
    return base64.urlsafe_b64decode(padded.encode("ascii"))


def mint_jwt(claims: Mapping[str, Any]) -> str:
    """An unsigned-looking JWT (``alg`` RS256, a placeholder signature) carrying ``claims``: the
    shape of the Actions service's tokens, whose ``exp`` clients read without verifying."""

    def segment(data: Mapping[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(dict(data)).encode()).decode().rstrip("=")

    return f"{segment({'alg': 'RS256', 'typ': 'JWT'})}.{segment(claims)}.ZmFrZS1zaWduYXR1cmU"


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, unverified; None when it is not one."""
    if not looks_like_jwt(token):
        return None
    try:
        claims: Any = json.loads(_b64decode(token.split(".")[1]))
    except (ValueError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


def looks_like_jwt(token: str) -> bool:
    """Tell a JWT from a PAT or installation token without judging its validity."""
    parts = token.split(".")
    return len(parts) == 3 and all(parts[:2])


def _load_public_key(pem: str | bytes) -> rsa.RSAPublicKey:
    data = pem.encode() if isinstance(pem, str) else pem
    if b"PRIVATE KEY" in data:
        private = serialization.load_pem_private_key(data, password=None)
        if not isinstance(private, rsa.RSAPrivateKey):
            raise ValueError("GitHub App keys are RSA keys")
        return private.public_key()
    public = serialization.load_pem_public_key(data)
    if not isinstance(public, rsa.RSAPublicKey):
        raise ValueError("GitHub App keys are RSA keys")
    return public


def check_app_jwt(token: str, now: float, app_keys: Mapping[str, str | bytes] | None = None) -> AppClaims:
    """Return the claims of an acceptable App JWT or raise `JWTRejectedError`.

    ``app_keys`` maps an App ID to its PEM key (public, or the private key the
    test generated); when given, the signature is verified with RS256 and
    unknown Apps are refused.
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise JWTRejectedError(NOT_DECODABLE)
    try:
        header: Any = json.loads(_b64decode(parts[0]))
        payload: Any = json.loads(_b64decode(parts[1]))
        signature = _b64decode(parts[2])
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise JWTRejectedError(NOT_DECODABLE) from exc
    if not isinstance(header, dict) or not isinstance(payload, dict) or header.get("alg") != "RS256":
        raise JWTRejectedError(NOT_DECODABLE)
    issuer = payload.get("iss")
    if isinstance(issuer, bool) or not isinstance(issuer, (int, str)) or not str(issuer).isdigit():
        raise JWTRejectedError(NO_ISSUER)
    iat, exp = payload.get("iat"), payload.get("exp")
    if isinstance(iat, bool) or not isinstance(iat, (int, float)) or iat > now + CLOCK_SKEW:
        raise JWTRejectedError(IAT_IN_FUTURE)
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or exp <= now - CLOCK_SKEW:
        raise JWTRejectedError(EXPIRED)
    if exp > now + MAX_LIFETIME + CLOCK_SKEW:
        raise JWTRejectedError(EXP_TOO_FAR)
    app_id = str(issuer)
    if app_keys is not None:
        pem = app_keys.get(app_id)
        if pem is None:
            raise JWTRejectedError(UNKNOWN_APP)
        signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")
        try:
            _load_public_key(pem).verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature as exc:
            raise JWTRejectedError(NOT_DECODABLE) from exc
    return AppClaims(app_id=app_id, issued_at=int(iat), expires_at=int(exp))
