"""What every replica of an email group must see, kept in Redis: a send may run at
any replica, a reply may land at any replica's listener, a replica may die anywhere.
Every key is the group's (`{p}:email:<group>:`, its `ChannelStore`): two email groups
holding one request (an escalation, two groups in one tier) each mail, lease, remind
and read replies on their own.

| key (under {p}:email:<group>:) | type   | what                                           |
|--------------------------------|--------|------------------------------------------------|
| msg:<request>                  | hash   | r:<recipient>: "sent" / "failed: why";         |
|                                |        | state, by, at: what became of the request      |
| lease:<request>:<tag>          | string | one send to one recipient in flight            |
| remind:<request>:<tag>         | string | a reminder went to this recipient lately       |
| note:<digest>                  | string | this note (feedback) was sent                  |
| in:<digest>                    | string | this reply (by Message-ID) was read            |

Every key expires `settled_ttl` after its last write, like the request it belongs to.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from askq import ChannelStore

SEND_LEASE_SECONDS = 120
SENT = "sent"
FAILED = "failed"


def tag(text: str) -> str:
    """A short stable name for an address or a Message-ID inside a key."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Outcome:
    state: str  # ANSWERED, CANCELLED, FAILED
    by: str | None
    at: float | None

    def when(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.at)) if self.at else ""


class EmailStore:
    def __init__(self, store: ChannelStore) -> None:
        self.store = store
        self.ttl = store.ttl

    async def deliveries(self, request_id: str) -> dict[str, str]:
        """recipient -> "sent" or "failed: why"."""
        fields = await self.store.all_fields(f"msg:{request_id}")
        return {k[2:]: v for k, v in fields.items() if k.startswith("r:")}

    async def lease_send(self, request_id: str, recipient: str) -> bool:
        return await self.store.lease(f"{request_id}:{tag(recipient)}", SEND_LEASE_SECONDS)

    async def drop_lease(self, request_id: str, recipient: str) -> None:
        await self.store.drop_lease(f"{request_id}:{tag(recipient)}")

    async def lease_left(self, request_id: str, recipient: str) -> float:
        return await self.store.lease_left(f"{request_id}:{tag(recipient)}")

    async def record_delivery(self, request_id: str, recipient: str, status: str) -> None:
        """Record how the send to `recipient` ended (the first verdict stands: a run
        repeated by the queue does not rewrite it) and end its lease."""
        await self.store.set_fields(
            f"msg:{request_id}",
            {f"r:{recipient}": status},
            keep=True,
            drop_lease=f"{request_id}:{tag(recipient)}",
        )

    async def record_bounce(self, request_id: str, recipient: str, why: str) -> None:
        await self.store.set_fields(f"msg:{request_id}", {f"r:{recipient}": f"{FAILED}: {why}"})

    async def outcome(self, request_id: str) -> Outcome | None:
        state, by, at = await self.store.fields(f"msg:{request_id}", "state", "by", "at")
        if state is None:
            return None
        return Outcome(state, by or None, float(at) if at else None)

    async def record_outcome(
        self, request_id: str, state: str, by: str | None, *, overwrite: bool
    ) -> None:
        """What became of the request, and when (for "already answered by … at …")."""
        values = {"state": state, "at": repr(time.time())}
        if by:
            values["by"] = by
        await self.store.set_fields(f"msg:{request_id}", values, keep=not overwrite)
