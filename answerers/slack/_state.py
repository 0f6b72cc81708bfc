"""What every replica of a Slack group must see, kept in Redis: a click may land at any
replica, a send may run at any replica, and a replica may die at any point. Every key
is the group's (`{p}:slack:<group>:`, its `ChannelStore`): two Slack groups holding one
request (an escalation, two groups in one tier) each post, update and collect answers
on their own message.

| key (under {p}:slack:<group>:) | type   | what                                       |
|--------------------------------|--------|--------------------------------------------|
| msg:<request>                  | hash   | channel, ts of the posted message; outcome |
| lease:<request>                | string | a short lease: one post in flight          |
| picks:<request>:<user>         | hash   | q<i>: chosen options (t<i>: when), c<i>: custom |
| remind:<request>               | string | a reminder was posted in the last minute   |
| shown:<request>:<digest>       | string | this outcome was shown (chat.update)       |

Every key expires `settled_ttl` after its last write, like the request it belongs to
(a question left unanswered for longer than that loses its message record: a recovered
claim would then post it again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from askq import ChannelStore

from ._blocks import Outcome

# How long one attempt to post may take before another may try (a replica that died
# mid-post must not block the question for good).
POST_LEASE_SECONDS = 60


@dataclass(frozen=True)
class PostedMessage:
    channel: str | None
    ts: str | None
    outcome: Outcome | None


@dataclass
class Picks:
    """One user's answers in progress on one request."""

    chosen: dict[int, tuple[int, ...]] = field(default_factory=dict)
    custom: dict[int, str] = field(default_factory=dict)


class SlackStore:
    """The Slack records, on the group's `ChannelStore` (`{p}:slack:<group>:`); its guards
    (`once`, the lease) are used on the store itself."""

    def __init__(self, store: ChannelStore) -> None:
        self.store = store
        self.ttl = store.ttl

    # --- the posted message ------------------------------------------------------------

    async def message(self, request_id: str) -> PostedMessage:
        channel, ts, outcome = await self.store.fields(
            f"msg:{request_id}", "channel", "ts", "outcome"
        )
        return PostedMessage(channel, ts, Outcome.from_json(outcome) if outcome else None)

    async def lease_post(self, request_id: str) -> bool:
        """True when this caller may post now; False while another attempt holds it."""
        return await self.store.lease(request_id, POST_LEASE_SECONDS)

    async def record_post(self, request_id: str, channel: str, ts: str) -> None:
        await self.store.set_fields(
            f"msg:{request_id}", {"channel": channel, "ts": ts}, drop_lease=request_id
        )

    async def set_outcome(self, request_id: str, outcome: Outcome, *, overwrite: bool) -> None:
        """Record what became of the request. A retraction does not overwrite (the
        replica whose click answered knows better than one hearing "answered")."""
        await self.store.set_fields(
            f"msg:{request_id}", {"outcome": outcome.to_json()}, keep=not overwrite
        )

    # --- answers in progress -----------------------------------------------------------

    async def picks(self, request_id: str, user: str) -> Picks:
        raw = await self.store.all_fields(f"picks:{request_id}:{user}")
        picks = Picks()
        for name, value in raw.items():
            kind, index = name[:1], int(name[1:])
            if kind == "q":
                picks.chosen[index] = tuple(json.loads(value))
            elif kind == "c":
                picks.custom[index] = value
        return picks

    async def choose(
        self, request_id: str, user: str, question: int, options: tuple[int, ...], at: float
    ) -> None:
        """Record a selection change unless a later one (by Slack's action_ts) is in:
        the events of quick clicks may be handled out of order, at several replicas."""
        await self.store.set_fields_unless_newer(
            f"picks:{request_id}:{user}",
            {f"q{question}": json.dumps(list(options))},
            f"t{question}",
            at,
        )

    async def write_custom(self, request_id: str, user: str, question: int, text: str) -> None:
        await self.store.set_fields(f"picks:{request_id}:{user}", {f"c{question}": text})

    async def forget_picks(self, request_id: str, user: str) -> None:
        await self.store.delete(f"picks:{request_id}:{user}")
