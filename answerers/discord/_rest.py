"""Discord's REST API (v10), the few calls askq makes, over httpx, and what a failed
call means for a retried send.

Retries are the send queue's, not this client's: a `429` is `RetryLater` (its
`retry_after`, in the JSON body and the `Retry-After` header), a `5xx` or a lost
connection is raised as is (the queue backs off), any other refusal (`403` missing
access, `404` a channel or message gone, `400` a message Discord will not take) is
`DiscordRefused`: retrying will not help.

Rate limits are read from every response, as Discord asks ("parse the headers; do not
hard-code limits"): a bucket (`X-RateLimit-Bucket`, per route and channel) with no
`X-RateLimit-Remaining` left is not called again before its `X-RateLimit-Reset-After`,
and a global 429 (`X-RateLimit-Global`, or `"global": true`) holds every call for its
`retry_after`: the send is put back with `RetryLater` instead of spending a request
on a certain 429. This memory is the replica's own: the other replicas learn from their
own responses (a 429 at worst).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import httpx

from askq import RetryLater

from ._messages import Message

log = logging.getLogger("askq.discord")

TIMEOUT_SECONDS = 15.0
DEFAULT_RETRY_AFTER = 1.0
TRANSIENT_STATUS = frozenset({408, 425})
USER_AGENT = "DiscordBot (https://github.com/askq/askq, 0.1) askq"
# A route's rate-limit key: the method and path, its ids other than a channel's (the
# top-level resource Discord counts apart) replaced, and an interaction's token (each
# its own webhook, good for 15 minutes: a key per token would only grow).
_IDS = re.compile(r"(?<!/channels)/[0-9]{15,21}")
_TOKEN = re.compile(r"^(POST /webhooks/:id)/.*$")
MAX_REMEMBERED = 1000  # buckets and resets kept; the past ones are dropped beyond it


def route_key(method: str, path: str) -> str:
    """The rate-limit memory's key of a call (until Discord names its bucket)."""
    return _TOKEN.sub(r"\1/:token", f"{method} {_IDS.sub('/:id', path)}")


class DiscordRefused(Exception):  # noqa: N818 - Discord's answer, not our failure
    """Discord refused the call for good."""

    def __init__(self, what: str, status: int, detail: str) -> None:
        super().__init__(f"{what}: HTTP {status} {detail}".rstrip())
        self.status = status


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        return f"{body.get('code', '')}: {body.get('message', '')}"[:300]
    return str(body)[:300]


def _seconds(raw: Any) -> float | None:
    try:
        return max(float(raw), 0.0) if raw is not None else None
    except (TypeError, ValueError):
        return None


class RateLimits:
    """What the responses said about the limits, per bucket and globally."""

    def __init__(self) -> None:
        self._bucket_of: dict[str, str] = {}  # route key -> bucket id
        self._until: dict[str, float] = {}  # bucket id (or route key) -> monotonic time
        self._global_until = 0.0

    def wait(self, route: str) -> float:
        """Seconds until `route` may be called (0: now)."""
        now = time.monotonic()
        bucket = self._bucket_of.get(route, route)
        return max(self._global_until - now, self._until.get(bucket, 0.0) - now, 0.0)

    def record(self, route: str, response: httpx.Response) -> float | None:
        """Learn from a response; for a 429, the seconds to wait."""
        headers = response.headers
        bucket = headers.get("X-RateLimit-Bucket")
        if bucket:
            self._bucket_of[route] = bucket
        key = bucket or route
        now = time.monotonic()
        if len(self._until) > MAX_REMEMBERED:  # resets long past tell nothing
            self._until = {k: t for k, t in self._until.items() if t > now}
        if response.status_code != 429:
            if headers.get("X-RateLimit-Remaining") == "0":
                reset = _seconds(headers.get("X-RateLimit-Reset-After"))
                if reset:
                    self._until[key] = now + reset
            return None
        try:
            body = response.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        wait = (
            _seconds(body.get("retry_after"))
            or _seconds(headers.get("Retry-After"))
            or _seconds(headers.get("X-RateLimit-Reset-After"))
            or DEFAULT_RETRY_AFTER
        )
        if body.get("global") is True or headers.get("X-RateLimit-Global", "").lower() == "true":
            self._global_until = max(self._global_until, now + wait)
        else:
            self._until[key] = max(self._until.get(key, 0.0), now + wait)
        return wait


class DiscordRest:
    """One HTTP client for the bot's calls; each sorted for the send queue."""

    def __init__(self, api_url: str, bot_token: str, application_id: str) -> None:
        self.api_url = api_url
        self.application_id = application_id
        self.limits = RateLimits()
        self._http = httpx.AsyncClient(
            base_url=api_url,
            timeout=TIMEOUT_SECONDS,
            headers={"Authorization": f"Bot {bot_token}", "User-Agent": USER_AGENT},
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def call(self, what: str, method: str, path: str, body: Any = None) -> Any:
        """The call's JSON answer; RetryLater, DiscordRefused, or an httpx error."""
        route = route_key(method, path)
        wait = self.limits.wait(route)
        if wait > 0:
            raise RetryLater(wait, f"Discord's rate limit ({what})")
        response = await self._http.request(method, path, json=body)
        retry = self.limits.record(route, response)
        if retry is not None:
            raise RetryLater(retry, f"Discord rate-limited {what}")
        status = response.status_code
        if status >= 500 or status in TRANSIENT_STATUS:
            response.raise_for_status()
        if status >= 400:
            raise DiscordRefused(what, status, _detail(response))
        return response.json() if response.content else None

    async def post(self, channel: str, message: Message) -> str:
        """A new message in the channel; its id."""
        sent = await self.call("post", "POST", f"/channels/{channel}/messages", message)
        return str(sent["id"])

    async def edit(self, channel: str, message_id: str, message: Message) -> None:
        await self.call("edit", "PATCH", f"/channels/{channel}/messages/{message_id}", message)

    async def open_dm(self, user: str) -> str:
        """The id of the bot's DM channel with `user` (created if need be)."""
        channel = await self.call(
            "open a DM", "POST", "/users/@me/channels", {"recipient_id": user}
        )
        return str(channel["id"])

    async def follow_up(self, token: str, message: Message) -> None:
        """A follow-up to an interaction (within its 15 minutes): e.g. an ephemeral word
        to the clicker after a deferred answer. Best effort, not retried."""
        try:
            await self.call(
                "follow-up", "POST", f"/webhooks/{self.application_id}/{token}", message
            )
        except Exception as exc:  # noqa: BLE001 - a lost word to one person is logged
            log.warning("could not send a Discord follow-up: %s", exc)
