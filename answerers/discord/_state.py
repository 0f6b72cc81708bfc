"""What every replica of a Discord group must see, kept in Redis: an interaction may land
at any replica, a send may run at any replica, and a replica may die at any point. Every
key is the group's (`{p}:discord:<group>:`, its `ChannelStore`): two Discord groups
holding one request each post, edit and answer their own message.

| key (under {p}:discord:<group>:) | type   | what                                       |
|----------------------------------|--------|--------------------------------------------|
| msg:<request>                    | hash   | the message's channel and id, the outcome  |
| draft:<request>:<user>           | hash   | a clicker's choices so far (several questions) |
| dms                              | hash   | user id -> the bot's DM channel with them  |
| lease:<request>                  | string | a short lease: one post in flight          |
| shown:<request>:<digest>         | string | this outcome was shown (the message edited) |
| remind:<request>                 | string | a reminder was posted in the last minute   |
| note:<request>                   | string | the note of the outcome was posted         |

Every key expires `settled_ttl` after its last write, like the requests they belong to
(a DM channel is asked for again after that: Discord gives the same one).
"""

from __future__ import annotations

from dataclasses import dataclass

from askq import ChannelStore

from ._messages import Outcome

# How long one attempt to post may take before another may try (a replica that died
# mid-post must not block the question for good).
POST_LEASE_SECONDS = 60
DMS = "dms"


@dataclass(frozen=True)
class PostedMessage:
    channel: str | None
    message: str | None
    outcome: Outcome | None

    @property
    def posted(self) -> bool:
        return self.channel is not None and self.message is not None


class DiscordStore:
    """The Discord records, on the group's `ChannelStore`; its guards (`once`, the
    lease) are used on the store itself."""

    def __init__(self, store: ChannelStore) -> None:
        self.store = store
        self.ttl = store.ttl

    async def message(self, request_id: str) -> PostedMessage:
        channel, message, outcome = await self.store.fields(
            f"msg:{request_id}", "channel", "message", "outcome"
        )
        return PostedMessage(channel, message, Outcome.from_json(outcome) if outcome else None)

    async def lease_post(self, request_id: str) -> bool:
        """True when this caller may post now; False while another attempt holds it."""
        return await self.store.lease(request_id, POST_LEASE_SECONDS)

    async def record_post(self, request_id: str, channel: str, message: str) -> None:
        await self.store.set_fields(
            f"msg:{request_id}", {"channel": channel, "message": message}, drop_lease=request_id
        )

    async def set_outcome(self, request_id: str, outcome: Outcome, *, overwrite: bool) -> None:
        """Record what became of the request. A retraction does not overwrite (the
        replica whose click answered knows better than one hearing "answered")."""
        await self.store.set_fields(
            f"msg:{request_id}", {"outcome": outcome.to_json()}, keep=not overwrite
        )

    # --- a clicker's choices across several selects ------------------------------------

    async def draft(self, request_id: str, user: str) -> dict[str, str]:
        return await self.store.all_fields(f"draft:{request_id}:{user}")

    async def keep_choice(self, request_id: str, user: str, question: int, values: str) -> None:
        await self.store.set_fields(f"draft:{request_id}:{user}", {f"q{question}": values})

    # --- DM channels -------------------------------------------------------------------

    async def dm_channel(self, user: str) -> str | None:
        (channel,) = await self.store.fields(DMS, user)
        return channel

    async def remember_dm(self, user: str, channel: str) -> None:
        await self.store.set_fields(DMS, {user: channel})
