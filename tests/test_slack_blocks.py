"""Block Kit rendering and interaction parsing, without Slack or Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from slack_standin import block_problems

from answerers.slack import Outcome, final_message, question_message
from answerers.slack._blocks import custom_modal, fallback_text, final_text, mrkdwn
from answerers.slack._clicks import build_answers
from answerers.slack._interactions import (
    BlockActions,
    CustomSubmitted,
    MalformedInteraction,
    parse_interaction,
)
from answerers.slack._state import Picks
from worker import MAX_CUSTOM, Answer, Caller, Question

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")
RID = "0123456789abcdef0123456789abcdef"


def question(**changes: Any) -> Question:
    base: dict[str, Any] = {
        "id": "cleanup",
        "header": "Confirm",
        "question": "Proceed with the destructive cleanup?",
        "options": [
            {"label": "Yes, delete them (Recommended)", "description": "Removes the files."},
            {"label": "No, keep them", "description": "Aborts the cleanup."},
        ],
    }
    return Question.model_validate({**base, **changes})


def longest(index: int, multi: bool) -> Question:
    """A question at every askq limit."""
    return question(
        id=f"q{index}" + "x" * 60,
        header="H" * 40,
        question="<!channel> " + "&" * 1989,  # 10,000 characters once escaped
        multiSelect=multi,
        options=[{"label": f"{n}" + "L" * 119, "description": "D" * 500} for n in range(10)],
    )


def worst(index: int, multi: bool) -> Question:
    """A question at every askq limit, all of it `&`: five times as long escaped."""
    return question(
        id=f"q{index}",
        header="&" * 40,
        question="&" * 2000,
        multiSelect=multi,
        options=[{"label": f"{n}" + "&" * 119, "description": "&" * 500} for n in range(10)],
    )


HOSTILE = question(
    header="<!channel> & go",
    question="<!here> <@U123> read <http://evil.example|click> & answer",
    options=[
        {"label": "<@U123> yes & <!channel>", "description": "<http://evil.example|click> &"},
        {"label": "no"},
    ],
)
AGENT_MARKUP = ("<!", "<@U123>", "<http")
# An `&` that does not start a whole escape: a text cut inside one.
BROKEN_ESCAPE = re.compile(r"&(?!amp;|lt;|gt;)")


def escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def kinds(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["type"] for b in blocks]


def sections(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"]["text"] for b in blocks if b["type"] == "section"]


def mrkdwn_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every text of the blocks Slack reads as mrkdwn (sections, context)."""
    texts = sections(blocks)
    for block in blocks:
        if block["type"] == "context":
            texts += [e["text"] for e in block["elements"] if e["type"] == "mrkdwn"]
    return texts


def test_one_single_select_question_is_buttons() -> None:
    blocks = question_message(RID, [question()], CALLER)
    assert kinds(blocks) == ["header", "section", "section", "actions", "context"]
    buttons = blocks[3]["elements"]
    assert [b["action_id"] for b in buttons] == ["askq.pick.0", "askq.pick.1", "askq.other"]
    assert buttons[0]["style"] == "primary" and "style" not in buttons[1]
    assert blocks[3]["block_id"] == f"askq:0:{RID}"
    assert "*No, keep them* — Aborts the cleanup." in blocks[2]["text"]["text"]
    assert block_problems(blocks) == []


def test_a_free_text_question_has_an_answer_button_and_no_submit() -> None:
    blocks = question_message(RID, [question(options=[])], CALLER)
    assert kinds(blocks) == ["header", "section", "actions", "context"]
    assert blocks[2]["elements"][0]["text"]["text"] == "Answer…"


def test_several_questions_are_one_form_with_one_submit() -> None:
    multi = question(id="langs", header="Languages", multiSelect=True)
    blocks = question_message(RID, [question(), multi, question(id="n", options=[])], CALLER)
    actions = [b for b in blocks if b["type"] == "actions"]
    assert [b["block_id"] for b in actions] == [
        f"askq:0:{RID}",
        f"askq:1:{RID}",
        f"askq:2:{RID}",
        f"askq:submit:{RID}",
    ]
    assert [e["type"] for e in actions[0]["elements"]] == ["radio_buttons", "button"]
    assert [e["type"] for e in actions[1]["elements"]] == ["checkboxes", "button"]
    assert actions[1]["elements"][0]["options"][1]["description"]["text"] == "Aborts the cleanup."
    assert [b["text"]["text"] for b in blocks if b["type"] == "header"] == [
        "Confirm (1/3)",
        "Languages (2/3)",
        "Confirm (3/3)",
    ]


@pytest.mark.parametrize("multi", [False, True])
def test_texts_at_askq_limits_fit_slack_limits(multi: bool) -> None:
    questions = [longest(i, multi) for i in range(8)]
    blocks = question_message(RID, questions, CALLER)
    assert block_problems(blocks) == []
    assert len(blocks) <= 50
    one = question_message(RID, [longest(0, multi)], CALLER)
    assert block_problems(one) == []
    # the full labels and descriptions are listed where the controls show them cut
    listing = one[2]["text"]["text"]
    assert listing.startswith("• *0" + "L" * 119 + "* — " + "D" * 100)
    section = one[1]["text"]["text"]
    assert section.startswith("&lt;!channel&gt; &amp;&amp;") and section.endswith("&amp;…")
    assert len(section) <= 3000
    answers = tuple(Answer(id=q.id, selected=q.labels, custom="C" * MAX_CUSTOM) for q in questions)
    final = final_message(
        questions, Outcome("ANSWERED", by="x", user="U1", answers=answers), CALLER
    )
    assert block_problems(final) == []


def test_agent_text_is_escaped_in_every_mrkdwn_text() -> None:
    caller = Caller(agent_id="<!here>", turn_id="<@U123>")
    for blocks in (
        question_message(RID, [HOSTILE, question(id="n", options=[])], caller),
        question_message(RID, [HOSTILE], caller),
        final_message(
            [HOSTILE],
            Outcome(
                "ANSWERED",
                user="U1",
                answers=(Answer(id="cleanup", selected=[HOSTILE.labels[0]], custom="<!here>"),),
            ),
            caller,
        ),
        final_message([HOSTILE], Outcome("ANSWERED", by="console:<!channel>"), caller),
        custom_modal(HOSTILE, {"r": RID, "q": 0}, submits_answer=True)["blocks"],
    ):
        for text in mrkdwn_texts(blocks):
            assert not any(markup in text for markup in AGENT_MARKUP), text
    # and the messages' top-level texts: the notification, what a screen reader says
    for text in (
        fallback_text([HOSTILE]),
        final_text([HOSTILE], Outcome("ANSWERED", user="U1")),
        final_text([HOSTILE], Outcome("ANSWERED", by="console:<!channel>")),
        final_text([HOSTILE], Outcome("CANCELLED", code="ABORTED")),
    ):
        assert not any(markup in text for markup in AGENT_MARKUP), text
    shown = "".join(sections(question_message(RID, [HOSTILE], caller)))
    assert escaped(HOSTILE.question) in shown and escaped(HOSTILE.labels[0]) in shown


def test_the_top_level_texts_are_escaped_and_keep_askqs_own_mention() -> None:
    text = fallback_text([HOSTILE, question(id="n")])
    assert text == (
        "&lt;!channel&gt; &amp; go: &lt;!here&gt; &lt;@U123&gt; read"
        " &lt;http://evil.example|click&gt; &amp; answer (+1 more)"
    )
    answered = final_text([HOSTILE], Outcome("ANSWERED", user="UALICE"))
    assert answered.startswith("✅ *Answered* by <@UALICE> — &lt;!channel&gt; &amp; go: ")
    elsewhere = final_text([HOSTILE], Outcome("ANSWERED", by="console:<!channel>"))
    assert elsewhere.startswith("✅ *Answered elsewhere* by console:&lt;!channel&gt; — ")
    for long in (
        fallback_text([worst(0, False)]),
        final_text([worst(0, False)], Outcome("OFFERED")),
    ):
        assert len(long) <= 300 and long.endswith("&amp;…") and not BROKEN_ESCAPE.search(long)


def test_mrkdwn_escapes_and_never_cuts_an_escape() -> None:
    assert mrkdwn("<@U1> & <!here>", 100) == "&lt;@U1&gt; &amp; &lt;!here&gt;"
    assert mrkdwn("ab&cd", 5) == "ab…"  # "&amp;" would not fit whole
    assert mrkdwn("abc", 3) == "abc"


def test_final_message_says_what_became_of_it() -> None:
    q = [question()]
    answered = Outcome(
        "ANSWERED",
        by="slack:U1 (al)",
        user="U1",
        answers=(Answer(id="cleanup", selected=[], custom="only *.tmp"),),
    )
    text = json.dumps(final_message(q, answered, CALLER), ensure_ascii=False)
    assert "✅ *Answered* by <@U1>" in text and "“only *.tmp”" in text
    assert "actions" not in text
    heads = {
        Outcome("ANSWERED", by="console:bob"): "✅ *Answered elsewhere* by console:bob",
        Outcome("CANCELLED", code="ABORTED"): "🚫 *Cancelled* (turn aborted)",
        Outcome("CANCELLED", code="TIMED_OUT"): "🚫 *Cancelled*",
        Outcome("OFFERED"): "⤴️ *Escalated* to another answerer",
        Outcome("FAILED", code="NO_ANSWERER"): "⌛ *No longer pending*",
    }
    for outcome, headline in heads.items():
        assert final_message(q, outcome, CALLER)[0]["text"]["text"] == headline
        assert Outcome.from_json(outcome.to_json()) == outcome


def test_modal_fits_slack_limits() -> None:
    view = custom_modal(longest(0, False), {"r": RID, "q": 0}, submits_answer=True, initial="x")
    assert len(view["title"]["text"]) <= 24
    assert len(view["private_metadata"]) <= 3000
    element = view["blocks"][1]["element"]
    assert element["max_length"] == 3000 and element["initial_value"] == "x"
    assert block_problems(view["blocks"]) == []


def test_build_answers_follows_the_contract() -> None:
    single, multi, free = (
        question(),
        question(id="m", multiSelect=True),
        question(id="f", options=[]),
    )
    picks = Picks(chosen={0: (1,), 1: (1, 0)}, custom={0: "mine", 1: "more"})
    answers, missing = build_answers([single, multi, free], picks)
    assert answers == [
        {"id": "cleanup", "selected": [], "custom": "mine"},  # custom overrides a choice
        {
            "id": "m",
            "selected": ["Yes, delete them (Recommended)", "No, keep them"],
            "custom": "more",
        },
        {"id": "f", "selected": []},
    ]
    assert missing == ["Confirm"]
    _, missing = build_answers([single, multi], Picks())
    assert missing == ["Confirm"]  # a multi-select may stay empty


def test_parse_block_actions_with_state() -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": "U1", "username": "al"},
        "channel": {"id": "C1"},
        "message": {"ts": "1.2"},
        "trigger_id": "t",
        "actions": [
            {"block_id": f"askq:submit:{RID}", "action_id": "askq.submit", "type": "button"},
            {"block_id": "someone-else", "action_id": "their.button", "type": "button"},
        ],
        "state": {
            "values": {
                f"askq:1:{RID}": {
                    "askq.check": {"type": "checkboxes", "selected_options": [{"value": "2"}]}
                },
                f"askq:0:{RID}": {"askq.radio": {"type": "radio_buttons", "selected_option": None}},
            }
        },
    }
    parsed = parse_interaction(payload)
    assert isinstance(parsed, BlockActions)
    assert [a.kind for a in parsed.actions] == ["submit"]
    assert parsed.state == {(RID, 1): (2,), (RID, 0): ()}
    assert parsed.user.by == "slack:U1 (al)"
    # only other apps' elements: nothing to do
    payload["actions"] = payload["actions"][1:]
    assert parse_interaction(payload) is None
    assert parse_interaction({"type": "view_closed", "user": {"id": "U1"}}) is None


def test_parse_view_submission() -> None:
    view = custom_modal(question(), {"r": RID, "q": 0, "c": "C1", "ts": "1.2"}, submits_answer=True)
    payload = {
        "type": "view_submission",
        "user": {"id": "U1"},
        "view": {
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "state": {"values": {"askq:custom": {"custom": {"value": "text"}}}},
        },
    }
    parsed = parse_interaction(payload)
    assert parsed == CustomSubmitted(
        user=parsed.user, request_id=RID, question=0, text="text", channel="C1", message_ts="1.2"
    )
    payload["view"]["private_metadata"] = "{}"
    with pytest.raises(MalformedInteraction, match="private_metadata.q"):
        parse_interaction(payload)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("x", "payload: expected an object"),
        ({"type": 3}, "type: missing"),
        ({"type": "block_actions", "actions": []}, "actions"),  # none: nothing to do
        (
            {
                "type": "block_actions",
                "actions": [{"block_id": f"askq:0:{RID}", "action_id": "askq.pick.x"}],
            },
            r"actions\[0\]\.action_id: expected an option index",
        ),
        (
            {
                "type": "block_actions",
                "actions": [{"block_id": f"askq:0:{RID}", "action_id": "askq.nope"}],
            },
            "unknown action",
        ),
        (
            {
                "type": "block_actions",
                "actions": [{"block_id": f"askq:0:{RID}", "action_id": "askq.other"}],
            },
            "user: expected an object",
        ),
    ],
)
def test_malformed_payloads_say_what_is_wrong(payload: Any, message: str) -> None:
    if message == "actions":
        assert parse_interaction(payload) is None
        return
    with pytest.raises(MalformedInteraction, match=message):
        parse_interaction(payload)
