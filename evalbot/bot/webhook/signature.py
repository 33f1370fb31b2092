"""GitHub webhook signatures: HMAC-SHA256 of the raw body, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_PREFIX = "sha256="


def sign(secret: str, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body` (also used by tests and tools)."""
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_problem(secret: str, body: bytes, header: str | None) -> str | None:
    """None when the signature is valid; otherwise why it is not (said to the sender as a 401)."""
    if not secret:
        return "the service has no webhook secret configured"
    if not header:
        return "missing X-Hub-Signature-256 header"
    if not header.startswith(SIGNATURE_PREFIX):
        return "X-Hub-Signature-256 must start with sha256="
    digest = header[len(SIGNATURE_PREFIX):]
    if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
        return "X-Hub-Signature-256 is not a sha256 hex digest"
    if not hmac.compare_digest(sign(secret, body).encode(), (SIGNATURE_PREFIX + digest.lower()).encode()):
        return "signature does not match"
    return None
