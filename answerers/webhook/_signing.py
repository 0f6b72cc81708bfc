"""Signing what the group POSTs (Standard Webhooks, through the `standardwebhooks`
package the receiver verifies with) and the answer tokens.

A question's answer token must be the same in every POST of it (a retry after a lost
response re-sends the question the receiver may already hold), yet Redis must not hold
it: it is derived, `HMAC-SHA256(key, "askq-webhook-token|group|request|nonce")`, from
the group's secret and a random nonce kept with the request's record; Redis keeps the
nonce and the token's SHA-256 only. An answer's token is hashed and compared with that
in constant time. A token names one group and one request: another group's token, or
this group's for another request, never matches.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime

from standardwebhooks import Webhook

TOKEN_CONTEXT = b"askq-webhook-token"


class Signer:
    def __init__(self, secret: str, key: bytes) -> None:
        self._webhook = Webhook(secret)
        self._key = key

    def headers(self, message_id: str, at: float, body: str) -> dict[str, str]:
        """The three Standard Webhooks headers of one attempt (`at`: its time)."""
        moment = datetime.fromtimestamp(at, tz=UTC)
        return {
            "webhook-id": message_id,
            "webhook-timestamp": str(int(at)),
            "webhook-signature": self._webhook.sign(message_id, moment, body),
        }

    def token(self, group: str, request_id: str, nonce: str) -> str:
        message = b"|".join((TOKEN_CONTEXT, group.encode(), request_id.encode(), nonce.encode()))
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_token(given: str, stored_hash: str) -> bool:
    return hmac.compare_digest(token_hash(given).encode(), stored_hash.encode())


TokenOf = Callable[[str], str]  # nonce -> the request's answer token
