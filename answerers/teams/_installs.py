"""The conversation references proactive messages need, taken from the activities
Teams sends: the app's installation in a team, a group chat or for a person
(`installationUpdate`, `conversationUpdate` with the bot among the members added), and
any message to the bot. Teams lets a bot post only where its app is installed, and
tells it where (the conversation's id and regional service URL) only then."""

from __future__ import annotations

import logging
from typing import Any

from askq import visible

from ._state import Reference, TeamsStore

log = logging.getLogger("askq.teams")


def _reference(activity: Any) -> tuple[Reference, str | None]:
    conversation = activity.conversation
    kind = conversation.conversation_type or "personal"
    channel_data = activity.channel_data
    tenant = conversation.tenant_id or (
        channel_data.tenant.id if channel_data and channel_data.tenant else None
    )
    name = ""
    if channel_data is not None and channel_data.team is not None:
        name = channel_data.team.name or ""
    if kind == "personal":
        name = activity.from_.name or ""
    user = activity.from_.aad_object_id if kind == "personal" else None
    reference = Reference(
        conversation=conversation.id.split(";")[0],
        service_url=activity.service_url,
        tenant=tenant,
        kind=kind,
        name=name,
    )
    return reference, user


def _bot_among(members: list[Any] | None, bot_id: str) -> bool:
    return any(member.id == bot_id for member in members or ())


async def record(store: TeamsStore, activity: Any) -> None:
    """Keep (or drop, on removal) the reference of the activity's conversation."""
    reference, user = _reference(activity)
    bot_id = activity.recipient.id
    removed = (activity.type == "installationUpdate" and activity.action.startswith("remove")) or (
        activity.type == "conversationUpdate" and _bot_among(activity.members_removed, bot_id)
    )
    if removed:
        await store.forget(reference.conversation, user)
        log.info(
            "Teams app removed from %s %s (%s)",
            reference.kind,
            visible(reference.name),
            visible(reference.conversation),
        )
        return
    installed = activity.type == "installationUpdate" or (
        activity.type == "conversationUpdate" and _bot_among(activity.members_added, bot_id)
    )
    known = await store.reference(reference.conversation)
    await store.remember(reference, user)
    if installed or known is None:
        target = f'{{"user": "{user}"}}' if user else f'"{reference.conversation}"'
        log.info(
            "Teams app in %s %s (tenant %s): route questions there with %s",
            reference.kind,
            visible(reference.name) or "(unnamed)",
            visible(str(reference.tenant)),
            visible(target),
        )
