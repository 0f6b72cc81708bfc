"""Per-request, per-recipient return addresses (VERP-style), bound by an HMAC.

Each question email carries `Reply-To: answer+<request>.<mac>@<domain>` and is sent
from the envelope address `bounce+<request>.<mac>@<domain>`, where `mac` is an HMAC
of the kind, the request id, the recipient's address and the answerer group under a
key derived from `ASKQ_EMAIL_SECRET`. So a reply is bound to its request, to the person
it was sent to and to the group that mailed it: a reply to another request's address,
from another sender, to another group's address (even one with the same secret and
reply domain), or to an address someone made up, does not verify, and nothing is
recorded. A bounce names, through its address, which recipient it is about.

Addresses minted before the group was bound (`_KEY_CONTEXT_V1`, no group in the MAC)
still verify, so a reply to a question mailed before an upgrade counts; none is minted.

The MAC is 80 bits in lowercase base32: local parts may be case-folded by the servers
in between, and each guess costs the guesser a whole SMTP transaction.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from askq import AskError, ErrorCode

from ._routes import normal

Kind = Literal["answer", "bounce"]
_KEY_CONTEXT = b"askq email reply address v2"
_KEY_CONTEXT_V1 = b"askq email reply address v1"
MAC_BYTES = 10
_LOCAL = re.compile(r"^(answer|bounce)\+([A-Za-z0-9_-]{1,64})\.([a-z2-7]{16})$")


@dataclass(frozen=True)
class ReturnAddress:
    kind: Kind
    request_id: str
    mac: str


class ReplyAddresses:
    """Mints and checks return addresses at `domain` for one group (`for_group`); the
    first secret signs, every one verifies (rotation, as for signed links)."""

    def __init__(self, secrets: Sequence[str], domain: str, group: str | None = None) -> None:
        if not secrets or any(not s for s in secrets):
            raise AskError(ErrorCode.CONFIG_ERROR, "ASKQ_EMAIL_SECRET: a secret is empty")
        self._secrets = tuple(secrets)
        self._keys = [hmac.new(s.encode(), _KEY_CONTEXT, hashlib.sha256).digest() for s in secrets]
        self._keys_v1 = [
            hmac.new(s.encode(), _KEY_CONTEXT_V1, hashlib.sha256).digest() for s in secrets
        ]
        self.domain = domain.lower()
        self.group = group

    def for_group(self, group: str) -> ReplyAddresses:
        """The same addresses, minted and checked for `group` (the answerer binds its
        own at start-up)."""
        return ReplyAddresses(self._secrets, self.domain, group)

    def _group(self) -> str:
        if self.group is None:
            raise AskError(ErrorCode.INTERNAL, "reply addresses used before for_group()")
        return self.group

    @staticmethod
    def _mac(key: bytes, kind: Kind, request_id: str, recipient: str, group: str | None) -> str:
        parts = [kind, request_id, normal(recipient)] + ([group] if group is not None else [])
        digest = hmac.new(key, "\n".join(parts).encode(), hashlib.sha256).digest()[:MAC_BYTES]
        return base64.b32encode(digest).decode("ascii").lower()

    def address(self, kind: Kind, request_id: str, recipient: str) -> str:
        """The return address of this group's mail about `request_id` to `recipient`."""
        mac = self._mac(self._keys[0], kind, request_id, recipient, self._group())
        return f"{kind}+{request_id}.{mac}@{self.domain}"

    def parse(self, address: str) -> ReturnAddress | None:
        """The parts of one of our return addresses; None for any other address."""
        local, at, domain = normal(address).rpartition("@")
        if not at or domain != self.domain:
            return None
        found = _LOCAL.match(local)
        if found is None:
            return None
        kind: Kind = "answer" if found.group(1) == "answer" else "bounce"
        return ReturnAddress(kind, found.group(2), found.group(3))

    def verifies(self, address: ReturnAddress, recipient: str) -> bool:
        """Whether `address` was minted by this group for `recipient` (constant-time,
        every secret; an address of before the group was bound verifies without it)."""
        group = self._group()
        minted = [
            self._mac(key, address.kind, address.request_id, recipient, group) for key in self._keys
        ] + [
            self._mac(key, address.kind, address.request_id, recipient, None)
            for key in self._keys_v1
        ]
        found = False
        for mac in minted:  # every one compared: the time taken tells nothing
            found |= hmac.compare_digest(mac, address.mac)
        return found
