"""Sign-in for the console: the user's own Drover token, kept in an HttpOnly, SameSite=Strict cookie and
looked up on every request like a gRPC call's bearer token (so expiry and revocation hold at once, on
every replica, with no session table). Every action carries a CSRF field derived from the token: a page
of another site can neither read the cookie nor compute the field."""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse

COOKIE = "drover_session"
MAX_FORM_BYTES = 64 * 1024


def csrf_token(token: str) -> str:
    return hmac.new(token.encode(), b"drover console csrf v1", hashlib.sha256).hexdigest()


def csrf_ok(token: str, sent: str) -> bool:
    return bool(token) and hmac.compare_digest(csrf_token(token), sent or "")


def cookie_header(token: str, secure: bool, max_age: int = 12 * 3600) -> str:
    """The Set-Cookie value that signs in (an empty token signs out)."""
    parts = [f"{COOKIE}={urllib.parse.quote(token)}", "HttpOnly", "SameSite=Strict", "Path=/"]
    parts.append(f"Max-Age={max_age if token else 0}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def parse_form(body: bytes) -> dict[str, str]:
    """An application/x-www-form-urlencoded body: each field's last value. ValueError when too large."""
    if len(body) > MAX_FORM_BYTES:
        raise ValueError(f"a form is at most {MAX_FORM_BYTES} bytes")
    fields = urllib.parse.parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in fields.items()}
