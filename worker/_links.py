"""Signed single-question links: the token a channel puts in a URL (an email, a Slack
"open in browser" button, an MCP URL-mode elicitation) so that whoever follows it may
answer one request, for one group, as one recipient, until it expires, once.

    links = SignedLinks([os.environ["ASKQ_WEB_SECRET"]])       # first signs, all verify
    token = links.mint(request_id, "email", "bob@example.com", ttl=86400, option="Yes")
    claims = links.check(token, group="email")                # LinkError: 403 or 410

A token is `<payload>.<signature>`, both base64url without padding: the payload is the
claims as compact JSON, the signature HMAC-SHA256 over the payload text with a key
derived from the secret (so the raw secret keys nothing else). `check` tries every
secret with a constant-time compare, so a secret can be rotated in (put it first) and
the old one dropped once its links have expired.

`check` proves a token is authentic, current and meant for the caller's group; it does
not spend it. Single use is the answering route's job: spend `claims.jti` with the
group's `ChannelStore.once(...)` where the POST answers, never on GET or HEAD (mail
scanners prefetch links).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import secrets as _secrets
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ._errors import AskError, ErrorCode

# Domain separation: the signing key is derived from the secret for this use alone.
_KEY_CONTEXT = b"askq signed link v1"
# A token longer than this is not one of ours; refuse it before decoding anything.
MAX_TOKEN_LENGTH = 4096
# Claims travel under short names to keep links short (they go in emails).
_WIRE = {
    "request_id": "r",
    "group": "g",
    "recipient": "u",
    "expires_at": "e",
    "jti": "j",
    "question_id": "q",
    "option": "o",
}
_FROM_WIRE = {short: name for name, short in _WIRE.items()}


class LinkError(AskError):
    """A link that may not be used: `status` is 403 (tampered, malformed, or for another
    group) or 410 (expired; a route also answers 410 for a link already used). The
    message says which, for the page the human sees."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)
        self.status = status


class LinkClaims(BaseModel):
    """What a valid token binds: the request, the group it answers for, who it was sent
    to (answers are attributed to them), when it expires (unix seconds), its single-use
    id, and optionally one question and the option the link pre-selects."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    group: str
    recipient: str
    expires_at: int
    jti: str
    question_id: str | None = None
    option: str | None = None


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _derive(secret: str) -> bytes:
    return hmac.new(secret.encode("utf-8"), _KEY_CONTEXT, hashlib.sha256).digest()


class SignedLinks:
    """Mints and checks link tokens with a list of secrets: the first signs, every one
    verifies (key rotation). No secret, or an empty one, is CONFIG_ERROR."""

    def __init__(self, secrets: Sequence[str]) -> None:
        if isinstance(secrets, str) or not secrets:
            raise AskError(ErrorCode.CONFIG_ERROR, "signed links need at least one secret")
        if any(not isinstance(s, str) or not s for s in secrets):
            raise AskError(ErrorCode.CONFIG_ERROR, "a signed-link secret is empty")
        self._keys = [_derive(s) for s in secrets]

    def mint(
        self,
        request_id: str,
        group: str,
        recipient: str,
        *,
        ttl: float,
        question_id: str | None = None,
        option: str | None = None,
        now: float | None = None,
    ) -> str:
        """A URL-safe token for `recipient` to answer `request_id` for `group`, valid
        `ttl` seconds from now (rounded up to a whole second)."""
        for name, value in (("request_id", request_id), ("group", group), ("recipient", recipient)):
            if not value:
                raise AskError(ErrorCode.INVALID_REQUEST, f"a signed link needs a {name}")
        if not math.isfinite(ttl) or ttl <= 0:
            raise AskError(ErrorCode.INVALID_REQUEST, f"a signed link's ttl must be > 0, not {ttl}")
        issued = time.time() if now is None else now
        claims = LinkClaims(
            request_id=request_id,
            group=group,
            recipient=recipient,
            expires_at=math.ceil(issued + ttl),
            jti=_secrets.token_urlsafe(12),
            question_id=question_id,
            option=option,
        )
        wire = {_WIRE[k]: v for k, v in claims.model_dump(exclude_none=True).items()}
        payload = _b64encode(json.dumps(wire, separators=(",", ":")).encode("utf-8"))
        return f"{payload}.{self._sign(self._keys[0], payload)}"

    def check(self, token: str, *, group: str, now: float | None = None) -> LinkClaims:
        """The claims of an authentic, unexpired token minted for `group`; otherwise a
        LinkError (403 tampered, malformed or another group's; 410 expired). It does
        not spend the token (see the module docstring)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
            raise LinkError(403, "this link is malformed")
        payload, signature = token.split(".")
        if not any(hmac.compare_digest(self._sign(key, payload), signature) for key in self._keys):
            raise LinkError(403, "this link's signature does not match: it was altered or forged")
        claims = self._decode(payload)
        if not hmac.compare_digest(claims.group.encode(), group.encode()):
            raise LinkError(403, "this link was issued for another group")
        current = time.time() if now is None else now
        if current >= claims.expires_at:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(claims.expires_at))
            raise LinkError(410, f"this link expired at {when}")
        return claims

    @staticmethod
    def _sign(key: bytes, payload: str) -> str:
        return _b64encode(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())

    @staticmethod
    def _decode(payload: str) -> LinkClaims:
        # Signed by us, so malformed here means a secret shared with something else.
        try:
            wire: Any = json.loads(_b64decode(payload))
            if not isinstance(wire, dict):
                raise ValueError("not an object")
            return LinkClaims(**{_FROM_WIRE[k]: v for k, v in wire.items()})
        except (ValueError, KeyError, TypeError, binascii.Error, ValidationError):
            raise LinkError(403, "this link is malformed") from None
