"""What every replica of a webhook group must see, kept in Redis: an answer may reach
any replica's callback, a send may run at any replica, and a replica may die at any
point. Every key is the group's (`{p}:webhook:<group>:`, its `ChannelStore`): two webhook
groups holding one request each send, and take answers to, their own.

| key (under {p}:webhook:<group>:) | type   | what                                       |
|----------------------------------|--------|--------------------------------------------|
| q:<request>                      | hash   | the question's delivery (fields below)     |
| lease:<request>                  | string | a short lease: one POST of it in flight    |
| used:<request>                   | string | its answer token was used (once)           |
| remind:<request>                 | string | a reminder was sent in the last minute     |

`q:<request>`: `nonce` and `token` (the SHA-256 of the answer token, never the token),
`url` (the receiver), `delivered`, `id:<event>`/`at:<event>` (each event's message id
and time, the same in every retry), `outcome` (what became of it), `closed` (its
closing event was delivered). Every key expires `settled_ttl` after its last write,
like the requests they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass

from askq import ChannelStore

from . import _signing as signing
from ._events import Outcome

# How long one attempt to POST a question may take before another replica may try
# (a replica that died mid-POST must not block the question for good).
POST_LEASE_SECONDS = 30


@dataclass(frozen=True)
class Delivered:
    nonce: str | None
    token_hash: str | None
    url: str | None
    delivered: bool
    outcome: Outcome | None
    closed: bool


class WebhookStore:
    def __init__(self, store: ChannelStore) -> None:
        self.store = store
        self.ttl = store.ttl

    async def record(self, request_id: str) -> Delivered:
        nonce, token, url, delivered, outcome, closed = await self.store.fields(
            f"q:{request_id}", "nonce", "token", "url", "delivered", "outcome", "closed"
        )
        return Delivered(
            nonce,
            token,
            url,
            delivered == "1",
            Outcome.from_json(outcome) if outcome else None,
            closed == "1",
        )

    async def nonce(self, request_id: str, token_of: signing.TokenOf) -> str:
        """The request's nonce (made once, whichever replica comes first), with the
        hash of the token it gives stored beside it."""
        nonce = signing.new_nonce()
        await self.store.set_fields(
            f"q:{request_id}",
            {"nonce": nonce, "token": signing.token_hash(token_of(nonce))},
            keep=True,
        )
        (kept,) = await self.store.fields(f"q:{request_id}", "nonce")
        assert kept is not None
        return kept

    async def message(self, request_id: str, event: str, now: float) -> tuple[str, float]:
        """The message id and time of one event of the request: the same in every retry
        (Standard Webhooks: a receiver drops a webhook-id it has seen)."""
        name = f"q:{request_id}"
        await self.store.set_fields(
            name,
            {f"id:{event}": signing.new_message_id(), f"at:{event}": repr(now)},
            keep=True,
        )
        message_id, at = await self.store.fields(name, f"id:{event}", f"at:{event}")
        assert message_id is not None and at is not None
        return message_id, float(at)

    async def lease_post(self, request_id: str) -> bool:
        return await self.store.lease(request_id, POST_LEASE_SECONDS)

    async def record_delivery(self, request_id: str, url: str) -> None:
        await self.store.set_fields(
            f"q:{request_id}", {"delivered": "1", "url": url}, drop_lease=request_id
        )

    async def set_outcome(self, request_id: str, outcome: Outcome, *, overwrite: bool) -> None:
        """Record what became of the request. A retraction does not overwrite (the
        replica whose callback took the answer knows better than one hearing it)."""
        await self.store.set_fields(
            f"q:{request_id}", {"outcome": outcome.to_json()}, keep=not overwrite
        )

    async def record_closed(self, request_id: str) -> None:
        await self.store.set_fields(f"q:{request_id}", {"closed": "1"})

    async def use_token(self, request_id: str) -> bool:
        """True the first time the request's token answers (single use)."""
        return await self.store.once(f"used:{request_id}", self.ttl)

    async def unuse_token(self, request_id: str) -> None:
        """The answer did not land for a reason worth trying again (Redis): the token
        may be used again."""
        await self.store.forget_once(f"used:{request_id}")
