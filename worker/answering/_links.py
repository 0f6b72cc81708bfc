"""Signed single-question links: the token a channel puts in a URL (an email, a Slack
"open in browser" button, an MCP URL-mode elicitation) so that whoever follows it may
answer one request, for one group, as one recipient, until it expires, once.

Two forms, both checked by `resolve`:

- a stored link (`issue`), for a group that serves its own links (the email channel):
  the token is 32 characters, an opaque random id and an HMAC-SHA256 tag over it; the
  claims are a record in the group's `ChannelStore`, which expires with the store's
  keys (`ASKQ_SETTLED_TTL` after it was written). A person reads these links in a
  mail's text, so they are short (`https://host/a/` and 32 characters).

      token = await links.issue(group.store, request_id, group.name, "bob@example.com",
                                ttl=86400, question_id="go", option="Yes")
      claims = await links.resolve(token, group=group.name, store=group.store)

- a self-contained link (`mint`), for a link another process serves (a Slack worker
  links into the web inbox's group, whose store it does not write): the token is
  `<payload>.<signature>`, both base64url without padding, the payload the claims as
  compact JSON (some hundreds of characters).

      token = links.mint(request_id, "web", "slack:U01", ttl=86400)
      claims = links.check(token, group="web")                # LinkError: 403 or 410

Every tag and signature is HMAC-SHA256 under a key derived from the secret (so the raw
secret keys nothing else), compared in constant time against every secret, so a secret
can be rotated in (put it first) and the old one dropped once its links have expired.
A stored link whose tag does not verify is refused before Redis is read.

`resolve` and `check` prove a token is authentic, current and meant for the caller's
group; they do not spend it. Single use is the answering route's job: spend
`claims.jti` with the group's `ChannelStore.once(...)` where the POST answers, never on
GET or HEAD (mail scanners prefetch links).
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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..protocol._errors import AskError, ErrorCode
from ._store import ChannelStore

# Domain separation: the signing key is derived from the secret for this use alone.
_KEY_CONTEXT = b"askq signed link v1"
# ... and a stored link's tag is computed apart from a self-contained link's signature.
_STORED_CONTEXT = b"askq stored link v1:"
_STORED_ID_BYTES = 12  # 96 random bits: 16 base64url characters
_STORED_TAG_BYTES = 12  # 96 bits of HMAC: 16 characters
STORED_TOKEN_LENGTH = 32
_URL_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
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


# Why a link may not be used (the page a person sees words each its own way).
LinkProblem = Literal["malformed", "forged", "other group", "expired", "gone"]


class LinkError(AskError):
    """A link that may not be used: `status` is 403 (`problem` "malformed", "forged":
    altered or signed with an unknown secret, "other group") or 410 ("expired", at
    `expired_at`; "gone": a stored link whose record expired, with its request). The
    message says which for a log; a page words it for the person who followed the link.
    (A route also answers 410 for a link already used.)"""

    def __init__(
        self, status: int, message: str, problem: LinkProblem, expired_at: int | None = None
    ) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)
        self.status = status
        self.problem: LinkProblem = problem
        self.expired_at = expired_at


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

    async def issue(
        self,
        store: ChannelStore,
        request_id: str,
        group: str,
        recipient: str,
        *,
        ttl: float,
        question_id: str | None = None,
        option: str | None = None,
        now: float | None = None,
    ) -> str:
        """A short stored link: its claims written to `store` (the group's own, which
        serves it), valid `ttl` seconds from now and no longer than the store keeps
        the record (`store.ttl`)."""
        link_id = _b64encode(_secrets.token_bytes(_STORED_ID_BYTES))
        claims = self._claims(
            request_id, group, recipient, min(ttl, store.ttl), link_id, question_id, option, now
        )
        await store.set_fields(_record(link_id), _to_fields(claims))
        return link_id + self._tag(self._keys[0], link_id)

    async def resolve(
        self, token: str, *, group: str, store: ChannelStore, now: float | None = None
    ) -> LinkClaims:
        """The claims of an authentic, unexpired link of either form for `group` (a
        stored one read from `store`); otherwise a LinkError."""
        if "." in token:
            return self.check(token, group=group, now=now)
        if len(token) != STORED_TOKEN_LENGTH or not _URL_SAFE.issuperset(token):
            raise LinkError(403, "this link is malformed", "malformed")
        link_id, tag = token[: len(token) // 2], token[len(token) // 2 :]
        if not any(hmac.compare_digest(self._tag(key, link_id), tag) for key in self._keys):
            raise LinkError(403, "this link's tag does not match: altered or forged", "forged")
        fields = await store.all_fields(_record(link_id))
        if not fields:
            raise LinkError(410, "this link's record has expired (with its request)", "gone")
        try:
            claims = _from_fields(link_id, fields)
        except (ValueError, KeyError, ValidationError):
            raise LinkError(403, "this link's record is malformed", "malformed") from None
        return self._current(claims, group, now)

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
        """A self-contained URL-safe token for `recipient` to answer `request_id` for
        `group`, valid `ttl` seconds from now (rounded up to a whole second)."""
        jti = _secrets.token_urlsafe(12)
        claims = self._claims(request_id, group, recipient, ttl, jti, question_id, option, now)
        wire = {_WIRE[k]: v for k, v in claims.model_dump(exclude_none=True).items()}
        payload = _b64encode(json.dumps(wire, separators=(",", ":")).encode("utf-8"))
        return f"{payload}.{self._sign(self._keys[0], payload)}"

    @staticmethod
    def _claims(
        request_id: str,
        group: str,
        recipient: str,
        ttl: float,
        jti: str,
        question_id: str | None,
        option: str | None,
        now: float | None,
    ) -> LinkClaims:
        for name, value in (("request_id", request_id), ("group", group), ("recipient", recipient)):
            if not value:
                raise AskError(ErrorCode.INVALID_REQUEST, f"a signed link needs a {name}")
        if not math.isfinite(ttl) or ttl <= 0:
            raise AskError(ErrorCode.INVALID_REQUEST, f"a signed link's ttl must be > 0, not {ttl}")
        issued = time.time() if now is None else now
        return LinkClaims(
            request_id=request_id,
            group=group,
            recipient=recipient,
            expires_at=math.ceil(issued + ttl),
            jti=jti,
            question_id=question_id,
            option=option,
        )

    def check(self, token: str, *, group: str, now: float | None = None) -> LinkClaims:
        """The claims of an authentic, unexpired token minted for `group`; otherwise a
        LinkError (403 tampered, malformed or another group's; 410 expired). It does
        not spend the token (see the module docstring)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
            raise LinkError(403, "this link is malformed", "malformed")
        payload, signature = token.split(".")
        if not any(hmac.compare_digest(self._sign(key, payload), signature) for key in self._keys):
            raise LinkError(
                403, "this link's signature does not match: it was altered or forged", "forged"
            )
        return self._current(self._decode(payload), group, now)

    @staticmethod
    def _current(claims: LinkClaims, group: str, now: float | None) -> LinkClaims:
        if not hmac.compare_digest(claims.group.encode(), group.encode()):
            raise LinkError(403, "this link was issued for another group", "other group")
        current = time.time() if now is None else now
        if current >= claims.expires_at:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(claims.expires_at))
            raise LinkError(410, f"this link expired at {when}", "expired", claims.expires_at)
        return claims

    @staticmethod
    def _sign(key: bytes, payload: str) -> str:
        return _b64encode(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())

    @staticmethod
    def _tag(key: bytes, link_id: str) -> str:
        digest = hmac.new(key, _STORED_CONTEXT + link_id.encode("ascii"), hashlib.sha256)
        return _b64encode(digest.digest()[:_STORED_TAG_BYTES])

    @staticmethod
    def _decode(payload: str) -> LinkClaims:
        # Signed by us, so malformed here means a secret shared with something else.
        try:
            wire: Any = json.loads(_b64decode(payload))
            if not isinstance(wire, dict):
                raise ValueError("not an object")
            return LinkClaims(**{_FROM_WIRE[k]: v for k, v in wire.items()})
        except (ValueError, KeyError, TypeError, binascii.Error, ValidationError):
            raise LinkError(403, "this link is malformed", "malformed") from None


def _record(link_id: str) -> str:
    """The store record of a stored link's claims."""
    return f"linkclaims:{link_id}"


def _to_fields(claims: LinkClaims) -> dict[str, str]:
    return {_WIRE[k]: str(v) for k, v in claims.model_dump(exclude_none=True).items() if k != "jti"}


def _from_fields(link_id: str, fields: dict[str, str]) -> LinkClaims:
    named: dict[str, Any] = {_FROM_WIRE[k]: v for k, v in fields.items()}
    return LinkClaims(**{**named, "expires_at": int(named["expires_at"]), "jti": link_id})
