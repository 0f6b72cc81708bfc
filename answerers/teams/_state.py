"""What every replica of a Teams group must see, kept in Redis: a click may land at any
replica, a send may run at any replica, and a replica may die at any point. Every key
is the group's (`{p}:teams:<group>:`, its `ChannelStore`): two Teams groups holding one
request each post, update and answer their own card.

| key (under {p}:teams:<group>:) | type   | what                                        |
|--------------------------------|--------|---------------------------------------------|
| msg:<request>                  | hash   | the card's conversation, activity, outcome  |
| refs                           | hash   | conversation references (see below)         |
| who:<object id>                | hash   | a user's UPN, read once for UPN allowlists  |
| lease:<request>                | string | a short lease: one post in flight           |
| shown:<request>:<digest>       | string | this outcome was shown (the card updated)   |
| remind:<request>               | string | a reminder was posted in the last minute    |
| note:<request>                 | string | the thread's note of the outcome was posted |

`refs` holds the conversation references Teams gives when the app is installed:
`c:<conversation>`, `u:<object id>` (a personal chat), `t:<tenant>` (its service URL).

Every key expires `settled_ttl` after its last write, like the requests they belong
to, except `refs`: the references come once, at installation, so the record lasts until
the app is removed (a lasting record of the store), however long the group's replicas
are down meanwhile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from askq import ChannelStore

from ._cards import Outcome

# How long one attempt to post may take before another may try (a replica that died
# mid-post must not block the question for good).
POST_LEASE_SECONDS = 60
REFS = "refs"


@dataclass(frozen=True)
class PostedCard:
    conversation: str | None
    activity: str | None
    service_url: str | None
    threaded: bool  # a channel post: replies go into its thread
    outcome: Outcome | None

    @property
    def posted(self) -> bool:
        return self.conversation is not None and self.activity is not None


@dataclass(frozen=True)
class Reference:
    """Where to send to one conversation."""

    conversation: str
    service_url: str
    tenant: str | None
    kind: str  # channel | groupChat | personal
    name: str = ""  # a team's or channel's name, a person's: for the log

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Reference | None:
        try:
            data: dict[str, Any] = json.loads(text)
            return cls(**data)
        except (ValueError, TypeError):
            return None


class TeamsStore:
    """The Teams records, on the group's `ChannelStore` (`{p}:teams:<group>:`); its
    guards (`once`, the lease) are used on the store itself."""

    def __init__(self, store: ChannelStore) -> None:
        self.store = store
        self.ttl = store.ttl

    # --- the posted card ---------------------------------------------------------------

    async def card(self, request_id: str) -> PostedCard:
        conversation, activity, service_url, threaded, outcome = await self.store.fields(
            f"msg:{request_id}", "conversation", "activity", "service_url", "threaded", "outcome"
        )
        return PostedCard(
            conversation,
            activity,
            service_url,
            threaded == "1",
            Outcome.from_json(outcome) if outcome else None,
        )

    async def lease_post(self, request_id: str) -> bool:
        """True when this caller may post now; False while another attempt holds it."""
        return await self.store.lease(request_id, POST_LEASE_SECONDS)

    async def record_post(
        self, request_id: str, conversation: str, activity: str, service_url: str, threaded: bool
    ) -> None:
        await self.store.set_fields(
            f"msg:{request_id}",
            {
                "conversation": conversation,
                "activity": activity,
                "service_url": service_url,
                "threaded": "1" if threaded else "0",
            },
            drop_lease=request_id,
        )

    async def set_outcome(self, request_id: str, outcome: Outcome, *, overwrite: bool) -> None:
        """Record what became of the request. A retraction does not overwrite (the
        replica whose click answered knows better than one hearing "answered")."""
        await self.store.set_fields(
            f"msg:{request_id}", {"outcome": outcome.to_json()}, keep=not overwrite
        )

    # --- conversation references -------------------------------------------------------

    async def remember(self, reference: Reference, user: str | None = None) -> None:
        """Store where a conversation is (and, for a personal chat, whose it is)."""
        values = {f"c:{reference.conversation}": reference.to_json()}
        if reference.tenant:
            values[f"t:{reference.tenant.lower()}"] = reference.service_url
        if user:
            values[f"u:{user.lower()}"] = reference.to_json()
        await self.store.set_fields(REFS, values, lasting=True)

    async def forget(self, conversation: str, user: str | None = None) -> None:
        """The app was removed from a conversation (uninstalled)."""
        names = [f"c:{conversation}"] + ([f"u:{user.lower()}"] if user else [])
        await self.store.delete_fields(REFS, *names)

    async def reference(self, conversation: str) -> Reference | None:
        (raw,) = await self.store.fields(REFS, f"c:{conversation}")
        return Reference.from_json(raw) if raw else None

    async def personal(self, user: str) -> Reference | None:
        (raw,) = await self.store.fields(REFS, f"u:{user.lower()}")
        return Reference.from_json(raw) if raw else None

    async def tenant_service_url(self, tenant: str | None) -> str | None:
        if not tenant:
            return None
        (url,) = await self.store.fields(REFS, f"t:{tenant.lower()}")
        return url

    # --- people ------------------------------------------------------------------------

    async def upn(self, object_id: str) -> str | None:
        (upn,) = await self.store.fields(f"who:{object_id.lower()}", "upn")
        return upn

    async def remember_upn(self, object_id: str, upn: str) -> None:
        await self.store.set_fields(f"who:{object_id.lower()}", {"upn": upn.lower()})
