"""GitHub App authentication as GitHub checks it: an RS256 JWT whose `iss` is the app's id, signed with the
app's private key, issued no later than now (a minute of clock drift allowed) and living at most ten minutes."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

DRIFT = 60
MAX_LIFETIME = 600


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


def verify_jwt(token: str, keys: dict[int, Any]) -> tuple[int | None, str]:
    """The app id the JWT proves, or None and GitHub's reason. `keys`: app id -> its RSA public key."""
    try:
        head_b64, claims_b64, sig_b64 = token.split(".")
        head, claims, signature = json.loads(_b64(head_b64)), json.loads(_b64(claims_b64)), _b64(sig_b64)
        app_id = int(claims["iss"])
        issued, expires = int(claims["iat"]), int(claims["exp"])
    except (ValueError, KeyError, TypeError):
        return None, "A JSON web token could not be decoded"
    if head.get("alg") != "RS256":
        return None, "A JSON web token could not be decoded"
    key = keys.get(app_id)
    if not isinstance(key, rsa.RSAPublicKey):
        return None, f"Integration not found: {app_id}"
    try:
        key.verify(signature, f"{head_b64}.{claims_b64}".encode(), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return None, "A JSON web token could not be decoded"
    moment = time.time()
    if issued > moment + DRIFT:
        return None, "'Issued at' claim ('iat') must be an Integer representing a time in the past."
    if expires <= moment:
        return (
            None,
            "'Expiration time' claim ('exp') must be a numeric value representing the future time "
            "at which the assertion expires.",
        )
    if expires - issued > MAX_LIFETIME + DRIFT:
        return None, "'Expiration time' claim ('exp') is too far in the future"
    return app_id, ""
