"""The inbox every replica of a web group shows, kept in Redis: the replica that was
offered a question records it, any replica serves the pages, and a feed tells every
replica's live pages at once.

| key (under {p}:web:<group>:)  | type   | what                                            |
|-------------------------------|--------|-------------------------------------------------|
| inbox:<group>                 | hash   | request id -> the entry (JSON) while it waits   |
| feed:<group>                  | stream | offer / gone / remind events, capped            |
| final:<group>:<request>       | hash   | what became of it: state, by, at, reason        |
| link:<jti>                    | string | a signed link was spent (ChannelStore.once)     |
| linkclaims:<id>               | hash   | a stored link's claims (`SignedLinks.issue`)    |
| linkused:<jti>                | hash   | who spent it, when (for "already answered")     |

The group's `ChannelStore` keeps them (as it keeps the sign-in counts, `count:signin:…`):
another web group's inbox, links and counts are never read here. Every key expires
`settled_ttl` after its last write; the replica that shows an entry
writes it again every `REFRESH_SECONDS`, so a question pending for days stays listed.
"""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, ConfigDict

from askq import ChannelStore, Offer, Retraction, answered_by

FEED_MAXLEN = 1000


class InboxEntry(BaseModel):
    """One waiting question as the inbox lists it."""

    model_config = ConfigDict(frozen=True)

    id: str
    headers: list[str]
    question: str  # the first question's text
    count: int  # questions in the request
    agent: str
    scope: dict[str, str]
    created_ms: int
    reminded_ms: int | None = None

    @classmethod
    def of(cls, offer: Offer) -> InboxEntry:
        return cls(
            id=offer.request_id,
            headers=[q.header for q in offer.questions],
            question=offer.questions[0].question,
            count=len(offer.questions),
            agent=offer.caller.agent_id,
            scope=dict(offer.scope),
            created_ms=offer.created_ms,
        )


class Final(BaseModel):
    """What became of a request, as this group learned it."""

    state: str
    by: str | None = None
    at: float  # unix seconds
    reason: str


def reason_for(state: str, by: str | None, code: str | None, cause: str | None = None) -> str:
    """ "answered in Slack by U01", "cancelled: the turn was aborted", ... for a person."""
    if state == "ANSWERED":
        return answered_by(by)
    retraction = Retraction(request_id="-", state=state, code=code, by=by, cause=cause)  # type: ignore[arg-type]
    return retraction.reason


class Inbox:
    def __init__(self, store: ChannelStore, group: str) -> None:
        self.store = store
        self.group = group
        self._record = f"inbox:{group}"
        self.feed = f"feed:{group}"

    def _final(self, request_id: str) -> str:
        return f"final:{self.group}:{request_id}"

    async def entries(self) -> list[InboxEntry]:
        raw = await self.store.all_fields(self._record)
        entries = []
        for text in raw.values():
            try:
                entries.append(InboxEntry.model_validate_json(text))
            except ValueError:
                continue  # written by another version: leave it to expire
        return sorted(entries, key=lambda e: (e.created_ms, e.id), reverse=True)

    async def entry(self, request_id: str) -> InboxEntry | None:
        (text,) = await self.store.fields(self._record, request_id)
        return InboxEntry.model_validate_json(text) if text else None

    async def add(self, entry: InboxEntry, *, announce: bool = True) -> None:
        text = entry.model_dump_json()
        await self.store.set_fields(self._record, {entry.id: text})
        if announce:
            await self.store.publish(
                self.feed, {"kind": "offer", "id": entry.id, "entry": text}, maxlen=FEED_MAXLEN
            )

    async def remind(self, request_id: str) -> None:
        entry = await self.entry(request_id)
        if entry is None:
            return
        stamped = entry.model_copy(update={"reminded_ms": int(time.time() * 1000)})
        await self.store.set_fields(self._record, {request_id: stamped.model_dump_json()})
        await self.store.publish(
            self.feed,
            {"kind": "remind", "id": request_id, "scope": json.dumps(entry.scope)},
            maxlen=FEED_MAXLEN,
        )

    async def settle(
        self,
        request_id: str,
        state: str,
        *,
        by: str | None,
        code: str | None,
        overwrite: bool,
        cause: str | None = None,
    ) -> Final:
        """Take it out of the inbox, record what became of it, and tell every page.
        `overwrite`: this replica knows (its own answer); a retraction keeps an earlier
        record."""
        final = Final(state=state, by=by, at=time.time(), reason=reason_for(state, by, code, cause))
        await self.store.set_fields(
            self._final(request_id),
            {k: str(v) for k, v in final.model_dump(exclude_none=True).items()},
            keep=not overwrite,
        )
        kept = await self.final(request_id) or final
        entry = await self.entry(request_id)
        await self.store.delete_fields(self._record, request_id)
        if entry is None:
            return kept  # taken off already (by the replica that answered): pages know
        scope = entry.scope
        await self.store.publish(
            self.feed,
            {
                "kind": "gone",
                "id": request_id,
                "reason": kept.reason,
                "scope": json.dumps(scope),
                "by": kept.by or "",
                "state": kept.state,
                "created_ms": str(entry.created_ms),
            },
            maxlen=FEED_MAXLEN,
        )
        return kept

    async def final(self, request_id: str) -> Final | None:
        raw = await self.store.all_fields(self._final(request_id))
        if not raw.get("state"):
            return None
        return Final(
            state=raw["state"],
            by=raw.get("by") or None,
            at=float(raw.get("at", "0")),
            reason=raw.get("reason", ""),
        )

    # --- signed links spent --------------------------------------------------------------

    async def spend_link(self, jti: str, seconds: int) -> bool:
        """True the first time; a replay (at any replica) is False."""
        return await self.store.once(f"link:{jti}", seconds)

    async def unspend_link(self, jti: str) -> None:
        await self.store.forget_once(f"link:{jti}")

    async def record_link_use(self, jti: str, by: str) -> None:
        await self.store.set_fields(f"linkused:{jti}", {"by": by, "at": repr(time.time())})

    async def link_use(self, jti: str) -> tuple[str, float] | None:
        by, at = await self.store.fields(f"linkused:{jti}", "by", "at")
        return (by, float(at or 0)) if by else None
