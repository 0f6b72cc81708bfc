"""The Bot Connector REST API, through the Teams SDK's client (`microsoft_teams.api`),
and what a failed call means for a retried send.

Retries are the send queue's, not the client's: a `429` is `RetryLater(Retry-After)`,
a `5xx` or a lost connection is raised as is (backoff), and any other refusal (`403`
when the app was removed or the user blocked it, `404` for a conversation that is gone,
`400`/`413` for a card Teams will not take) is `TeamsRefused`: retrying will not help.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable
from typing import TypeVar

import httpx
from microsoft_teams.api import ActivityParams, ApiClient
from microsoft_teams.api.activities.message.message import MessageActivityInput
from microsoft_teams.api.clients.conversation.params import CreateConversationParams
from microsoft_teams.api.models import Account, Attachment
from microsoft_teams.common import Client, ClientOptions

from askq import RetryLater

from ._cards import CARD_CONTENT_TYPE, Card
from ._token import BotToken

log = logging.getLogger("askq.teams")

TIMEOUT_SECONDS = 15.0
DEFAULT_RETRY_AFTER = 1.0
TRANSIENT_STATUS = frozenset({408, 425, 429})

T = TypeVar("T")


class TeamsRefused(Exception):  # noqa: N818 - Teams' answer, not our failure
    """The Bot Connector refused the call for good."""

    def __init__(self, what: str, status: int, detail: str) -> None:
        super().__init__(f"{what}: HTTP {status} {detail}".rstrip())
        self.status = status


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code', '')}: {error.get('message', '')}"[:300]
    return str(body)[:300]


def _retry_after(response: httpx.Response) -> float:
    raw = response.headers.get("Retry-After")
    try:
        return max(float(raw), 0.0) if raw is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER


async def call(what: str, request: Awaitable[T]) -> T:
    """Await a Bot Connector call, its failures sorted for the send queue."""
    try:
        return await request
    except httpx.HTTPStatusError as exc:
        response = exc.response
        if response.status_code == 429:
            raise RetryLater(_retry_after(response), f"Teams rate-limited {what}") from exc
        if response.status_code >= 500 or response.status_code in TRANSIENT_STATUS:
            raise
        raise TeamsRefused(what, response.status_code, _detail(response)) from exc


def message(card: Card, summary: str) -> MessageActivityInput:
    return MessageActivityInput.model_validate(
        {
            "attachments": [Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
            "summary": summary,  # what a notification shows (a field the SDK's model lacks)
        }
    )


class Connector:
    """One HTTP client for every service URL the group's conversations live at."""

    def __init__(self, token: BotToken, app_id: str, service_url: str) -> None:
        self.bot_id = f"28:{app_id}"
        self._http = Client(ClientOptions(timeout=TIMEOUT_SECONDS))
        with warnings.catch_warnings():  # the SDK's own constructor uses its deprecated bot client
            warnings.simplefilter("ignore", DeprecationWarning)
            self._api = ApiClient(service_url, self._http, token_provider=token)
        self._at: dict[str, ApiClient] = {}

    def at(self, service_url: str) -> ApiClient:
        service_url = service_url.rstrip("/")
        if service_url not in self._at:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self._at[service_url] = self._api.clone(service_url=service_url)
        return self._at[service_url]

    async def post(self, service_url: str, conversation: str, activity: ActivityParams) -> str:
        """Start a conversation's new message (a channel's new thread); its id."""
        conversations = self.at(service_url).conversations
        sent = await call("post", conversations.create_activity(conversation, activity))
        return sent.id

    async def update(
        self, service_url: str, conversation: str, activity_id: str, activity: ActivityParams
    ) -> None:
        conversations = self.at(service_url).conversations
        await call("update", conversations.update_activity(conversation, activity_id, activity))

    async def reply(
        self,
        service_url: str,
        conversation: str,
        activity_id: str,
        activity: ActivityParams,
        *,
        threaded: bool,
    ) -> None:
        """Into the message's thread (a channel), or after it (a chat has no threads)."""
        conversations = self.at(service_url).conversations
        if threaded:
            thread = f"{conversation.split(';')[0]};messageid={activity_id}"
            await call("reply", conversations.create_activity(thread, activity))
        else:
            await call(
                "reply", conversations.reply_to_activity(conversation, activity_id, activity)
            )

    async def open_personal(self, service_url: str, tenant: str | None, user: str) -> str:
        """The id of the bot's personal chat with `user` (created if need be: the app
        must be installed for them)."""
        params = CreateConversationParams.model_validate(
            {
                "members": [Account(id=user)],
                "tenantId": tenant,
                "channelData": {"tenant": {"id": tenant}} if tenant else None,
                "isGroup": False,  # ConversationParameters' fields the SDK's model lacks
                "bot": {"id": self.bot_id},
            }
        )
        conversations = self.at(service_url).conversations
        created = await call("create conversation", conversations.create(params))
        return created.id

    async def upn(self, service_url: str, conversation: str, user: str) -> str | None:
        """A member's user principal name (activities carry only the object id)."""
        conversations = self.at(service_url).conversations
        member = await call("get member", conversations.get_member_by_id(conversation, user))
        upn = member.user_principal_name or member.email
        return str(upn) if upn else None

    async def close(self) -> None:
        await self._http.http.aclose()
