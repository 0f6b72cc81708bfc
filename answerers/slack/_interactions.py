"""Slack interaction payloads -> what a human did to one of our messages.

Parsing is strict about our own elements (a broken one is `MalformedInteraction`, which
the HTTP endpoint answers 400) and quiet about everything else (other apps' buttons,
closed modals): those are None, acknowledged and ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs

from . import _ids as ids

ActionKind = Literal["pick", "check", "radio", "other", "submit"]


class MalformedInteraction(ValueError):
    """A payload that is not what Slack sends for our messages."""


@dataclass(frozen=True)
class SlackUser:
    id: str
    name: str | None = None

    @property
    def by(self) -> str:
        """How the answer is attributed: the user id, stable; the name, readable."""
        return f"slack:{self.id}" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    request_id: str
    question: int | None  # None for submit
    options: tuple[int, ...] = ()  # pick: the option; check / radio: the selection now
    at: float = 0.0  # Slack's action_ts: selection changes may arrive out of order
    group: str | None = None  # the group whose message it is (None: posted before named)


@dataclass(frozen=True)
class BlockActions:
    """Clicks and selection changes on one of our question messages."""

    user: SlackUser
    channel: str | None
    message_ts: str | None
    trigger_id: str | None
    actions: tuple[Action, ...]
    # The message's checkboxes and radio buttons as Slack saw them at this click:
    # (request id, question index) -> selected option indices.
    state: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class CustomSubmitted:
    """The "Other…" modal was submitted with text."""

    user: SlackUser
    request_id: str
    question: int
    text: str
    channel: str | None
    message_ts: str | None
    group: str | None = None  # the group whose message it is (None: opened before named)


Interaction = BlockActions | CustomSubmitted


def _dict(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedInteraction(f"{where}: expected an object")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedInteraction(f"{where}: expected a non-empty string")
    return value


def _index(value: Any, where: str) -> int:
    if not isinstance(value, str) or not value.isdigit() or len(value) > 3:
        raise MalformedInteraction(f"{where}: expected an option index, got {value!r}")
    return int(value)


def _user(payload: dict[str, Any]) -> SlackUser:
    user = _dict(payload.get("user"), "user")
    name = user.get("username") or user.get("name")
    return SlackUser(
        id=_str(user.get("id"), "user.id"), name=name if isinstance(name, str) else None
    )


def _selection(element: dict[str, Any], where: str) -> tuple[int, ...]:
    if element.get("type") == "radio_buttons" or "selected_option" in element:
        chosen = element.get("selected_option")
        options = [chosen] if chosen else []
    else:
        options = element.get("selected_options") or []
        if not isinstance(options, list):
            raise MalformedInteraction(f"{where}.selected_options: expected a list")
    return tuple(
        _index(_dict(o, f"{where}.selected_option").get("value"), f"{where}.value") for o in options
    )


def _when(action: dict[str, Any]) -> float:
    try:
        return float(action.get("action_ts") or 0)
    except (TypeError, ValueError):
        return 0.0


def _action(raw: Any, n: int) -> Action | None:
    where = f"actions[{n}]"
    action = _dict(raw, where)
    split = ids.split_block(str(action.get("block_id") or ""))
    action_id = str(action.get("action_id") or "")
    if split is None or not action_id.startswith("askq."):
        return None  # not one of ours
    part, request_id, group = split
    if part == ids.SUBMIT:
        if action_id != ids.SUBMIT_ACTION:
            raise MalformedInteraction(f"{where}.action_id: {action_id!r} in a submit block")
        return Action("submit", request_id, None, group=group)
    question = _index(part, f"{where}.block_id")
    if action_id.startswith(ids.PICK):
        option = _index(action_id[len(ids.PICK) :], f"{where}.action_id")
        return Action("pick", request_id, question, (option,), group=group)
    if action_id in (ids.CHECK, ids.RADIO):
        kind: ActionKind = "check" if action_id == ids.CHECK else "radio"
        selection = _selection(action, where)
        return Action(kind, request_id, question, selection, _when(action), group)
    if action_id == ids.OTHER:
        return Action("other", request_id, question, group=group)
    raise MalformedInteraction(f"{where}.action_id: unknown action {action_id!r}")


def _state(payload: dict[str, Any]) -> dict[tuple[str, int], tuple[int, ...]]:
    values = (payload.get("state") or {}).get("values") or {}
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    if not isinstance(values, dict):
        raise MalformedInteraction("state.values: expected an object")
    for block_id, elements in values.items():
        split = ids.split_block(block_id)
        if split is None or split[0] == ids.SUBMIT or not isinstance(elements, dict):
            continue
        for action_id, element in elements.items():
            if action_id in (ids.CHECK, ids.RADIO):
                where = f"state.values[{block_id!r}]"
                question = _index(split[0], where)
                out[(split[1], question)] = _selection(_dict(element, where), where)
    return out


def _block_actions(payload: dict[str, Any]) -> BlockActions | None:
    raw_actions = payload.get("actions")
    if not isinstance(raw_actions, list):
        raise MalformedInteraction("actions: expected a list")
    actions = tuple(a for n, raw in enumerate(raw_actions) if (a := _action(raw, n)) is not None)
    if not actions:
        return None
    channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get(
        "channel_id"
    )
    message_ts = (payload.get("message") or {}).get("ts") or (payload.get("container") or {}).get(
        "message_ts"
    )
    trigger = payload.get("trigger_id")
    return BlockActions(
        user=_user(payload),
        channel=channel if isinstance(channel, str) else None,
        message_ts=message_ts if isinstance(message_ts, str) else None,
        trigger_id=trigger if isinstance(trigger, str) else None,
        actions=actions,
        state=_state(payload),
    )


def _view_submission(payload: dict[str, Any]) -> CustomSubmitted | None:
    view = _dict(payload.get("view"), "view")
    if view.get("callback_id") != ids.MODAL_CALLBACK:
        return None
    try:
        meta = json.loads(_str(view.get("private_metadata"), "view.private_metadata"))
    except ValueError:
        raise MalformedInteraction("view.private_metadata: not JSON") from None
    meta = _dict(meta, "view.private_metadata")
    question = meta.get("q")
    if not isinstance(question, int) or question < 0:
        raise MalformedInteraction("view.private_metadata.q: expected a question index")
    values = _dict(_dict(view.get("state"), "view.state").get("values"), "view.state.values")
    element = _dict(
        _dict(values.get(ids.CUSTOM_BLOCK), f"view.state.values.{ids.CUSTOM_BLOCK}").get(
            ids.CUSTOM_ACTION
        ),
        f"view.state.values.{ids.CUSTOM_BLOCK}.{ids.CUSTOM_ACTION}",
    )
    text = element.get("value")
    channel, ts, group = meta.get("c"), meta.get("ts"), meta.get("g")
    return CustomSubmitted(
        user=_user(payload),
        request_id=_str(meta.get("r"), "view.private_metadata.r"),
        question=question,
        text=text if isinstance(text, str) else "",
        channel=channel if isinstance(channel, str) else None,
        message_ts=ts if isinstance(ts, str) else None,
        group=group if isinstance(group, str) and group else None,
    )


def parse_interaction(payload: Any) -> Interaction | None:
    """What the payload asks of us; None when it is not about our messages."""
    payload = _dict(payload, "payload")
    kind = payload.get("type")
    if kind == "block_actions":
        return _block_actions(payload)
    if kind == "view_submission":
        return _view_submission(payload)
    if not isinstance(kind, str):
        raise MalformedInteraction("type: missing")
    return None  # view_closed, shortcuts, ...: nothing to do


def parse_form_body(body: bytes) -> Any:
    """The HTTP endpoint's body: `payload=<JSON>`, form-encoded."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=False)
    except UnicodeDecodeError:
        raise MalformedInteraction("body: not UTF-8") from None
    raw = form.get("payload")
    if not raw:
        raise MalformedInteraction("body: no `payload` field (expected payload=<JSON>)")
    try:
        return json.loads(raw[0])
    except ValueError as exc:
        raise MalformedInteraction(f"payload: not valid JSON ({exc})") from None
