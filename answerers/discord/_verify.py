"""Discord's signature on every interaction it POSTs: Ed25519 over
`X-Signature-Timestamp` + the raw body, against the application's public key, hex in
`X-Signature-Ed25519`. A missing, malformed or wrong signature, or a timestamp further
than `max_skew` seconds from this clock (a replayed request), is refused: the endpoint
answers 401, as Discord requires (it sends bad signatures on purpose to check).

The check is `cryptography`'s Ed25519 (what PyNaCl's `VerifyKey` does, through OpenSSL):
the Teams channel and the test suite already install it, and it is PyCA's library.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SIGNATURE = "X-Signature-Ed25519"
TIMESTAMP = "X-Signature-Timestamp"


class Unsigned(Exception):  # noqa: N818 - a refusal, said to the log
    """Not signed by Discord for this application (or too old)."""


class Verifier:
    def __init__(
        self, public_key: bytes, max_skew: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = Ed25519PublicKey.from_public_bytes(public_key)
        self._max_skew = max_skew
        self._clock = clock

    def check(self, signature: str | None, timestamp: str | None, body: bytes) -> None:
        """Raises `Unsigned` saying why, unless Discord signed this body just now."""
        if not signature or not timestamp:
            raise Unsigned("no signature headers")
        try:
            raw = bytes.fromhex(signature)
        except ValueError:
            raise Unsigned("the signature is not hex") from None
        if len(raw) != 64:
            raise Unsigned("the signature is not an Ed25519 signature")
        if not timestamp.isdigit() or len(timestamp) > 12:
            raise Unsigned("the timestamp is not Unix seconds")
        try:
            self._key.verify(raw, timestamp.encode() + body)
        except InvalidSignature:
            raise Unsigned("bad signature") from None
        skew = abs(self._clock() - int(timestamp))
        if skew > self._max_skew:
            raise Unsigned(f"timestamp {skew:.0f} s off this clock (a replay?)")
