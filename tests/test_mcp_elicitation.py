"""The MCP elicitation bridge inside a real client session (the `mcp` SDK's `Client`)
against a real MCP server written here that elicits: server-to-client
`elicitation/create` on 2025-11-25, an `input_required` result on 2026-07-28."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
import pytest
from conftest import Backend, running
from mcp import Client, MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_servers import ERAS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from askq import Caller, Offer, Seam
from askq.answerers.memory import MemoryAnswerer
from askq.integrations.mcp import ElicitationBridge

pytest.importorskip("mcp")

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "title": "Colour", "enum": ["red", "green", "blue"]},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
            "default": "l",
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b", "c"]},
            "minItems": 1,
        },
        "extras": {
            "type": "array",
            "items": {"anyOf": [{"const": "x", "title": "Extra X"}, {"const": "y", "title": "Y"}]},
        },
        "agree": {"type": "boolean", "title": "Agree?", "default": True},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 18, "maximum": 130},
        "ratio": {"type": "number"},
        "nickname": {"type": "string", "minLength": 2},
    },
    "required": ["color", "size", "tags", "agree", "email", "age", "ratio"],
}


def eliciting_server() -> Server[Any]:
    """A tool `elicit` that elicits what its arguments say (a form schema or a URL)
    and returns the client's ElicitResult (or the error it got) as JSON text."""

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        args = params.arguments or {}
        if "url" in args:
            request: types.ElicitRequestParams = types.ElicitRequestURLParams(
                message=args["message"], url=args["url"], elicitation_id="e-1"
            )
        else:
            request = types.ElicitRequestFormParams(
                message=args["message"], requested_schema=args["schema"]
            )
        try:
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                if not params.input_responses:
                    if isinstance(request, types.ElicitRequestURLParams):
                        request = request.model_copy(update={"elicitation_id": None})
                    return types.InputRequiredResult(
                        input_requests={"q": types.ElicitRequest(params=request)}
                    )
                result = params.input_responses["q"]
            else:
                result = await ctx.session.send_request(
                    types.ElicitRequest(params=request), types.ElicitResult
                )
            body = result.model_dump(mode="json", exclude_none=True, by_alias=True)
        except MCPError as exc:
            body = {"error": exc.code, "message": exc.message}
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))])

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        schema = {"type": "object", "additionalProperties": True}
        return types.ListToolsResult(tools=[types.Tool(name="elicit", input_schema=schema)])

    return Server("elicitor", on_call_tool=call_tool, on_list_tools=list_tools)


async def elicit(client: Client, **args: Any) -> dict[str, Any]:
    result = await client.call_tool("elicit", args)
    (block,) = result.content
    body: dict[str, Any] = json.loads(block.text)
    return body


def by_id(offer: Offer) -> dict[str, Any]:
    return {q.id: q for q in offer.questions}


@pytest.mark.parametrize("era", ERAS)
async def test_every_schema_type_becomes_a_question_and_typed_content(
    backend: Backend, seam: Seam, era: str
) -> None:
    mem = MemoryAnswerer()
    bridge = ElicitationBridge(seam, Caller(agent_id="agent-1", turn_id=f"t-{era}"))
    async with running(seam, mem, "humans"):
        async with Client(eliciting_server(), mode=era, elicitation_callback=bridge) as client:
            call = asyncio.ensure_future(elicit(client, message="Set up your profile", schema=FORM))
            offer = await mem.next_presented(20)
            q = by_id(offer)
            # askq asks at most 8 questions at once: the ninth comes next
            assert list(q) == list(FORM["properties"])[:8]
            assert [o.label for o in q["color"].options] == ["red", "green", "blue"]
            assert q["color"].header == "Colour" and not q["color"].multi_select
            assert "Set up your profile" in q["color"].question
            # the default is the recommended option, first
            assert [o.label for o in q["size"].options] == ["Large (Recommended)", "Small"]
            assert q["tags"].multi_select
            assert [o.label for o in q["tags"].options] == ["a", "b", "c"]
            assert [o.label for o in q["extras"].options] == ["Extra X", "Y"]
            assert [o.label for o in q["agree"].options] == ["Yes (Recommended)", "No"]
            for free in ("email", "age", "ratio"):
                assert q[free].options == []
            assert "at least 18" in q["age"].question
            await mem.answer(
                offer.request_id,
                [
                    {"id": "color", "selected": ["green"]},
                    {"id": "size", "selected": ["Small"]},
                    {"id": "tags", "selected": ["a", "c"]},
                    {"id": "extras", "selected": ["Extra X"]},
                    {"id": "agree", "selected": ["No"]},
                    {"id": "email", "selected": [], "custom": "ann@example.com"},
                    {"id": "age", "selected": [], "custom": "42"},
                    {"id": "ratio", "selected": [], "custom": "0.5"},
                ],
            )
            rest = await mem.next_presented(20)
            (nickname,) = rest.questions
            assert nickname.id == "nickname" and "optional" in nickname.question
            await mem.answer(rest.request_id, [{"id": "nickname", "custom": "-"}])
            result = await asyncio.wait_for(call, 20)
    assert result == {
        "action": "accept",
        "content": {
            "color": "green",
            "size": "s",
            "tags": ["a", "c"],
            "extras": ["x"],
            "agree": False,
            "email": "ann@example.com",
            "age": 42,
            "ratio": 0.5,
        },
    }
    assert type(result["content"]["age"]) is int and type(result["content"]["ratio"]) is float


@pytest.mark.parametrize("era", ERAS)
async def test_an_answer_that_does_not_fit_is_asked_again_with_the_reason(
    backend: Backend, seam: Seam, era: str
) -> None:
    mem = MemoryAnswerer()
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2},
            "age": {"type": "integer", "minimum": 18},
        },
        "required": ["name", "age"],
    }
    bridge = ElicitationBridge(seam, Caller(agent_id="agent-1", turn_id=f"t-{era}"))
    async with running(seam, mem, "humans"):
        async with Client(eliciting_server(), mode=era, elicitation_callback=bridge) as client:
            call = asyncio.ensure_future(elicit(client, message="Who?", schema=schema))
            first = await mem.next_presented(20)
            await mem.answer(
                first.request_id,
                [{"id": "name", "custom": "Ann"}, {"id": "age", "custom": "twelve"}],
            )
            second = await mem.next_presented(20)
            (again,) = second.questions  # only the field that did not fit
            assert again.id == "age" and "must be a whole number" in again.question
            await mem.answer(second.request_id, [{"id": "age", "custom": "17"}])
            third = await mem.next_presented(20)
            assert "must be at least 18" in third.questions[0].question
            await mem.answer(third.request_id, [{"id": "age", "custom": "30"}])
            assert await asyncio.wait_for(call, 20) == {
                "action": "accept",
                "content": {"name": "Ann", "age": 30},
            }
            # An answer that never fits: declined after the last attempt.
            call = asyncio.ensure_future(elicit(client, message="Who?", schema=schema))
            for _ in range(3):
                offer = await mem.next_presented(20)
                await mem.answer(
                    offer.request_id,
                    [{"id": q.id, "custom": "x"} for q in offer.questions],
                )
            assert await asyncio.wait_for(call, 20) == {"action": "decline"}


@pytest.mark.parametrize("era", ERAS)
async def test_decline_and_cancel(backend: Backend, seam: Seam, era: str) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    caller = Caller(agent_id="agent-1", turn_id=f"t-cancel-{era}")
    bridge = ElicitationBridge(seam, caller)
    async with Client(eliciting_server(), mode=era, elicitation_callback=bridge) as client:
        # Nobody to ask (no answerer group): declined.
        assert await elicit(client, message="Go?", schema=schema) == {"action": "decline"}
        mem = MemoryAnswerer()
        async with running(seam, mem, "humans"):
            # The agent's turn is aborted while the human has it: cancelled, retracted.
            call = asyncio.ensure_future(elicit(client, message="Go?", schema=schema))
            offer = await mem.next_presented(20)
            await seam.abort_turn(caller.turn_id)
            assert await asyncio.wait_for(call, 20) == {"action": "cancel"}
            assert (await mem.next_retracted(20)).request_id == offer.request_id
        # A schema askq cannot put to a human: an error for the server, not a guess.
        # (2025: the server's request fails; 2026: the client's driver raises it.)
        nested = {"type": "object", "properties": {"a": {"type": "object"}}}
        if era == "legacy":
            body = await elicit(client, message="?", schema=nested)
            assert body["error"] == types.INVALID_PARAMS and "askq:" in body["message"]
        else:
            with pytest.raises(MCPError, match="askq: property 'a'") as raised:
                await elicit(client, message="?", schema=nested)
            assert raised.value.code == types.INVALID_PARAMS


@pytest.mark.parametrize("era", ERAS)
async def test_url_mode_is_a_question_carrying_the_link(
    backend: Backend, seam: Seam, era: str
) -> None:
    mem = MemoryAnswerer()
    bridge = ElicitationBridge(seam, Caller(agent_id="agent-1", turn_id=f"t-url-{era}"))
    url = "https://auth.example.com/authorize?state=abc"
    async with running(seam, mem, "humans"):
        async with Client(eliciting_server(), mode=era, elicitation_callback=bridge) as client:
            for label, action in (("Done", "accept"), ("Decline", "decline")):
                call = asyncio.ensure_future(elicit(client, message="Sign in to Example", url=url))
                offer = await mem.next_presented(20)
                (question,) = offer.questions
                assert url in question.question and "Sign in to Example" in question.question
                assert [o.label for o in question.options] == ["Done", "Decline"]
                await mem.answer(offer.request_id, [{"id": question.id, "selected": [label]}])
                assert await asyncio.wait_for(call, 20) == {"action": action}


async def test_more_choices_than_askq_shows_are_free_text_checked_against_them(
    backend: Backend, seam: Seam
) -> None:
    choices = [f"zone-{n}" for n in range(12)]
    schema = {
        "type": "object",
        "properties": {
            "zone": {"type": "string", "enum": choices},
            "tier": {"type": "string", "enum": ["1", "2"], "enumNames": ["Gold", "Silver"]},
        },
        "required": ["zone", "tier"],
    }
    mem = MemoryAnswerer()
    bridge = ElicitationBridge(seam, Caller(agent_id="agent-1", turn_id="t-zones"))
    async with running(seam, mem, "humans"):
        async with Client(eliciting_server(), mode="legacy", elicitation_callback=bridge) as client:
            call = asyncio.ensure_future(elicit(client, message="Where?", schema=schema))
            offer = await mem.next_presented(20)
            zone, tier = offer.questions
            assert zone.options == [] and "zone-11" in zone.question
            assert [o.label for o in tier.options] == ["Gold", "Silver"]
            await mem.answer(
                offer.request_id,
                [{"id": "zone", "custom": "zone-99"}, {"id": "tier", "selected": ["Silver"]}],
            )
            again = await mem.next_presented(20)
            assert [q.id for q in again.questions] == ["zone"]
            assert "not one of the choices" in again.questions[0].question
            await mem.answer(again.request_id, [{"id": "zone", "custom": "ZONE-7"}])
            assert await asyncio.wait_for(call, 20) == {
                "action": "accept",
                "content": {"zone": "zone-7", "tier": "2"},
            }


async def test_property_names_askq_cannot_use_as_ids_still_come_back_by_name(
    backend: Backend, seam: Seam
) -> None:
    schema = {
        "type": "object",
        "properties": {"first name": {"type": "string"}, "field0": {"type": "boolean"}},
        "required": ["first name", "field0"],
    }
    mem = MemoryAnswerer()
    bridge = ElicitationBridge(seam, Caller(agent_id="agent-1", turn_id="t-names"))
    async with running(seam, mem, "humans"):
        async with Client(eliciting_server(), mode="2026-07-28", elicitation_callback=bridge) as c:
            call = asyncio.ensure_future(elicit(c, message="Name?", schema=schema))
            offer = await mem.next_presented(20)
            first, flag = offer.questions
            assert first.header == "first name" and first.id != flag.id
            await mem.answer(
                offer.request_id,
                [{"id": first.id, "custom": "Ann"}, {"id": flag.id, "selected": ["Yes"]}],
            )
            assert await asyncio.wait_for(call, 20) == {
                "action": "accept",
                "content": {"first name": "Ann", "field0": True},
            }
