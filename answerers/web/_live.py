"""Live pages: each replica follows its group's feed (one blocking read, whatever the
number of open pages) and fans every event out to the Server-Sent Event streams open
at that replica. An event is rendered and encoded once per replica, not once per page.

A stream starts with a snapshot of the inbox (so a page that loaded just before an
event, or a browser that reconnected to another replica, catches up), then carries
`offer` (the rendered item), `gone` (id and reason) and `remind` events. A page that
cannot keep up (its queue full) is dropped; its browser reconnects and gets a snapshot.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent

from askq import FeedFollower, scope_matches

from ._access import Access
from ._inbox import Inbox, InboxEntry

log = logging.getLogger("askq.web")

QUEUE_SIZE = 256
Message = bytes  # one encoded Server-Sent Event


def sse(event: str, data: object) -> Message:
    """Encode an event once, however many streams it goes to."""
    return ServerSentEvent(data=json.dumps(data), event=event).encode()


@dataclass(eq=False)
class Subscriber:
    user: str
    selector: dict[str, str]
    only: str | None = None  # an answer page: the events of this one request
    queue: asyncio.Queue[Message | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))

    def wants(self, access: Access, request_id: str, scope: dict[str, str]) -> bool:
        if self.only is not None and self.only != request_id:
            return False
        return scope_matches(self.selector, scope) and access.allows(self.user, scope)


class LiveHub:
    def __init__(
        self,
        inbox: Inbox,
        access: Access,
        render_item: Callable[[InboxEntry], str],
        snapshot: Callable[[Subscriber], Awaitable[Message]],
    ) -> None:
        self._inbox = inbox
        self._access = access
        self._render_item = render_item
        self._snapshot = snapshot
        self._subscribers: set[Subscriber] = set()
        self._follower: FeedFollower | None = None

    @property
    def open_streams(self) -> int:
        return len(self._subscribers)

    async def start(self) -> None:
        self._follower = self._inbox.store.follow(
            self._inbox.feed, self._deliver, on_gap=self._refresh_all
        )
        await self._follower.start()

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.close()
            self._follower = None
        for sub in list(self._subscribers):
            self._drop(sub)

    def _drop(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)
        try:
            sub.queue.put_nowait(None)  # ends its stream
        except asyncio.QueueFull:
            while not sub.queue.empty():
                sub.queue.get_nowait()
            sub.queue.put_nowait(None)

    def _send(self, message: Message, request_id: str, scope: dict[str, str]) -> None:
        for sub in list(self._subscribers):
            if sub.wants(self._access, request_id, scope):
                try:
                    sub.queue.put_nowait(message)
                except asyncio.QueueFull:
                    log.info("a live page of %s fell behind; dropped", sub.user)
                    self._drop(sub)

    def _deliver(self, event_id: str, fields: dict[str, str]) -> None:
        kind = fields.get("kind")
        try:
            scope = json.loads(fields.get("scope") or "{}")
            if kind == "offer":
                entry = InboxEntry.model_validate_json(fields["entry"])
                html = self._render_item(entry)
                self._send(sse("offer", {"id": entry.id, "html": html}), entry.id, entry.scope)
            elif kind in ("gone", "remind"):
                data = {"id": fields["id"], "reason": fields.get("reason", "")}
                self._send(sse(kind, data), fields["id"], scope)
        except (KeyError, ValueError):
            log.warning("ignored a malformed inbox event %s", event_id)

    async def _refresh_all(self) -> None:
        """After a gap in the feed: every page gets a fresh snapshot."""
        for sub in list(self._subscribers):
            try:
                sub.queue.put_nowait(await self._snapshot(sub))
            except asyncio.QueueFull:
                self._drop(sub)

    async def stream(
        self, user: str, selector: dict[str, str], only: str | None = None
    ) -> AsyncIterator[Message]:
        """Events for `user` under the filter `selector` (`only`: of that request alone,
        for its answer page), starting with a snapshot."""
        sub = Subscriber(user, selector, only)
        self._subscribers.add(sub)
        try:
            yield await self._snapshot(sub)
            while True:
                message = await sub.queue.get()
                if message is None:
                    return
                yield message
        finally:
            self._subscribers.discard(sub)
