"""DKIM verification of replies at the SMTP listener (dkimpy), when
`ASKQ_EMAIL_REQUIRE_DKIM` is on: a reply counts only with a valid signature by the
From address's domain (or a parent of it: relaxed alignment, as DMARC has it), so a
forged From is refused even by someone who learned a reply address.

dkimpy's lookups block, so a check runs in a thread. `txt` replaces its DNS lookup
(tests pass a local stand-in; a deployment keeps the system resolver).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from email import policy
from email.parser import BytesHeaderParser
from email.utils import getaddresses

import dkim

from ._listener import DkimCheck

log = logging.getLogger("askq.email")

TxtLookup = Callable[..., bytes | None]


def _from_domain(raw: bytes) -> str | None:
    headers = BytesHeaderParser(policy=policy.default).parsebytes(raw)
    found = [a for _, a in getaddresses([str(v) for v in headers.get_all("From", [])]) if a]
    return found[0].rpartition("@")[2].lower() if len(found) == 1 else None


def aligned(signer: str, from_domain: str) -> bool:
    return from_domain == signer or from_domain.endswith("." + signer)


def verify(raw: bytes, txt: TxtLookup | None = None) -> str | None:
    """None when a DKIM signature of the From domain verifies; else why not."""
    from_domain = _from_domain(raw)
    if from_domain is None:
        return "no single From address to check DKIM for"
    checker = dkim.DKIM(raw)
    count = sum(1 for name, _ in checker.headers if name.lower() == b"dkim-signature")
    for index in range(count):
        try:
            ok = checker.verify(idx=index, dnsfunc=txt) if txt else checker.verify(idx=index)
        except dkim.DKIMException as exc:
            log.info("DKIM signature %d of a reply from %s: %s", index, from_domain, exc)
            continue
        signer = checker.domain.decode("ascii", "replace").lower() if checker.domain else ""
        if ok and aligned(signer, from_domain):
            return None
    return f"no valid DKIM signature of {from_domain}"


def dkim_check(txt: TxtLookup | None = None) -> DkimCheck:
    async def check(raw: bytes) -> str | None:
        return await asyncio.to_thread(verify, raw, txt)

    return check
