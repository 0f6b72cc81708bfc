"""Block Kit rendering and interaction parsing, without Slack or Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from slack_standin import block_problems

from askq import MAX_CUSTOM, Answer, Caller, Question
from askq.answerers.slack import Outcome, final_message, question_message
from askq.answerers.slack._blocks import custom_modal, fallback_text, final_text, mrkdwn
from askq.answerers.slack._clicks import build_answers
from askq.answerers.slack._interactions import (
    BlockActions,
    CustomSubmitted,
    MalformedInteraction,
    parse_interaction,
)
from askq.answerers.slack._state import Picks

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


def listing(q: Question) -> str:
    """The option list as the message shows it, escaped, in full."""
    return "\n".join(
        f"• *{escaped(o.label)}*" + (f" — {escaped(o.description)}" if o.description else "")
        for o in q.options
    )


def test_one_single_select_question_is_buttons() -> None:
    blocks = question_message(RID, [question()], CALLER, group="slack")
    assert kinds(blocks) == ["header", "section", "section", "actions", "context"]
    buttons = blocks[3]["elements"]
    assert [b["action_id"] for b in buttons] == ["askq.pick.0", "askq.pick.1", "askq.other"]
    assert buttons[0]["style"] == "primary" and "style" not in buttons[1]
    assert blocks[3]["block_id"] == f"askq:0:{RID}:slack"
    assert "*No, keep them* — Aborts the cleanup." in blocks[2]["text"]["text"]
    assert block_problems(blocks) == []


def test_a_free_text_question_has_an_answer_button_and_no_submit() -> None:
    blocks = question_message(RID, [question(options=[])], CALLER, group="slack")
    assert kinds(blocks) == ["header", "section", "actions", "context"]
    assert blocks[2]["elements"][0]["text"]["text"] == "Answer…"


def test_several_questions_are_one_form_with_one_submit() -> None:
    multi = question(id="langs", header="Languages", multiSelect=True)
    blocks = question_message(
        RID, [question(), multi, question(id="n", options=[])], CALLER, group="slack"
    )
    actions = [b for b in blocks if b["type"] == "actions"]
    assert [b["block_id"] for b in actions] == [
        f"askq:0:{RID}:slack",
        f"askq:1:{RID}:slack",
        f"askq:2:{RID}:slack",
        f"askq:submit:{RID}:slack",
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
    blocks = question_message(RID, questions, CALLER, group="slack")
    assert block_problems(blocks) == []
    assert len(blocks) <= 50
    one = question_message(RID, [longest(0, multi)], CALLER, group="slack")
    assert block_problems(one) == []
    # all of the question (10,000 characters escaped), then the full labels and
    # descriptions, listed since the controls show them cut
    whole = longest(0, multi)
    assert "".join(sections(one)) == escaped(whole.question) + listing(whole)
    answers = tuple(Answer(id=q.id, selected=q.labels, custom="C" * MAX_CUSTOM) for q in questions)
    final = final_message(
        questions, Outcome("ANSWERED", by="x", user="U1", answers=answers), CALLER
    )
    assert block_problems(final) == []


def test_a_long_question_is_shown_whole_in_sections_that_keep_escapes_whole() -> None:
    text = "<!channel> " + "&" * 1989  # 10,000 characters once escaped
    blocks = question_message(RID, [question(question=text, options=[])], CALLER, group="slack")
    assert kinds(blocks) == ["header"] + ["section"] * 4 + ["actions", "context"]
    pieces = sections(blocks)
    assert "".join(pieces) == escaped(text)
    assert all(len(p) <= 3000 and not BROKEN_ESCAPE.search(p) for p in pieces)
    assert block_problems(blocks) == []


def test_a_long_text_is_split_at_a_newline_or_a_space_near_the_limit() -> None:
    typical = question(question=("word " * 400)[:2000], options=[])
    assert len(sections(question_message(RID, [typical], CALLER, group="slack"))) == 1  # as before
    # a space in a section's last quarter is where it ends
    words = question(question="&" * 500 + " " + "word " * 299, options=[])  # 3,996 escaped
    pieces = sections(question_message(RID, [words], CALLER, group="slack"))
    assert "".join(pieces) == escaped(words.question)
    assert [len(p) for p in pieces] == [2996, 1000] and pieces[0].endswith(" word ")
    # a newline in its second half, before that
    lines = question(question=("&" * 300 + "\n") * 6, options=[])  # 1,501 characters a line
    pieces = sections(question_message(RID, [lines], CALLER, group="slack"))
    assert "".join(pieces) == escaped(lines.question)
    assert [len(p) for p in pieces] == [1501] * 6 and all(p.endswith("\n") for p in pieces)


def test_a_long_option_list_is_shown_whole() -> None:
    q = worst(0, multi=True)  # ten options of 3,107 characters each once escaped
    blocks = question_message(RID, [q], CALLER, group="slack")
    assert block_problems(blocks) == []
    assert "".join(sections(blocks)) == escaped(q.question) + listing(q)
    assert not any(BROKEN_ESCAPE.search(t) for t in mrkdwn_texts(blocks))
    assert kinds(blocks)[-3:] == ["actions", "actions", "context"]  # checkboxes, Submit


@pytest.mark.parametrize("multi", [False, True])
def test_the_worst_case_fits_50_blocks_cutting_option_lists_first(multi: bool) -> None:
    """8 questions of 2,000 `&`, each with ten options as long as askq allows: in full
    well over 50 blocks. Each question and option list keeps its first section; what
    is left goes to the questions; nothing is cut inside an escape."""
    questions = [worst(i, multi) for i in range(8)]
    blocks = question_message(RID, questions, CALLER, group="slack")
    assert block_problems(blocks) == []
    assert len(blocks) == 50
    texts = mrkdwn_texts(blocks)
    assert not any(BROKEN_ESCAPE.search(t) for t in texts)
    # per question: the sections between its header and its controls
    shown: list[list[str]] = [[]]
    for block in blocks[1:]:
        if block["type"] == "header":
            shown.append([])
        elif block["type"] == "section":
            shown[-1].append(block["text"]["text"])
    assert len(shown) == 8
    for pieces in shown:
        question_part = [p for p in pieces if not p.startswith("• *")]
        list_part = [p for p in pieces if p.startswith("• *")]
        assert len(list_part) == 1 and list_part[0].endswith("…")  # cut first
        assert len(question_part) >= 2 and question_part[-1].endswith("…")
        assert all(p.startswith("&amp;") for p in question_part)
    assert sum(len(p) for p in shown) == 50 - 8 - 7 - 8 - 2  # headers, dividers, controls


def test_the_final_message_fits_and_keeps_the_answers_longest() -> None:
    questions = [worst(i, False) for i in range(8)]
    answers = tuple(
        Answer(id=q.id, selected=q.labels[:1], custom="&" * MAX_CUSTOM) for q in questions
    )
    outcome = Outcome("ANSWERED", by="x", user="U1", answers=answers)
    blocks = final_message(questions, outcome, CALLER)
    assert block_problems(blocks) == []
    assert len(blocks) <= 50
    assert not any(BROKEN_ESCAPE.search(t) for t in mrkdwn_texts(blocks))
    one = final_message(questions[:1], outcome, CALLER)
    answer = "→ " + f"*{escaped(questions[0].labels[0])}*, “{escaped('&' * MAX_CUSTOM)}”"
    assert "".join(sections(one)) == "✅ *Answered* by <@U1>" + escaped("&" * 2000) + answer


def test_agent_text_is_escaped_in_every_mrkdwn_text() -> None:
    caller = Caller(agent_id="<!here>", turn_id="<@U123>")
    for blocks in (
        question_message(RID, [HOSTILE, question(id="n", options=[])], caller, group="slack"),
        question_message(RID, [HOSTILE], caller, group="slack"),
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
    shown = "".join(sections(question_message(RID, [HOSTILE], caller, group="slack")))
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
    assert elsewhere.startswith("✅ *Answered* in a terminal by &lt;!channel&gt; — ")
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
        Outcome("ANSWERED", by="console:bob"): "✅ *Answered* in a terminal by bob",
        Outcome("ANSWERED", by="link:slack:U1"): "✅ *Answered* through a link from Slack by U1",
        Outcome("CANCELLED", code="ABORTED", why="the turn was aborted"): (
            "🚫 *Cancelled* (the turn was aborted)"
        ),
        Outcome("CANCELLED", code="ABORTED", why="the caller is gone"): (
            "🚫 *Cancelled* (the caller is gone)"
        ),
        Outcome("CANCELLED", code="TIMED_OUT", why="the ask timed out"): (
            "🚫 *Cancelled* (the ask timed out)"
        ),
        Outcome("CANCELLED", code="ABORTED"): "🚫 *Cancelled*",
        Outcome("OFFERED"): "⤴️ *Escalated* to another answerer",
        Outcome("FAILED", code="NO_ANSWERER"): "⌛ *No longer pending*",
    }
    for outcome, headline in heads.items():
        assert final_message(q, outcome, CALLER)[0]["text"]["text"] == headline
        assert Outcome.from_json(outcome.to_json()) == outcome


def test_modal_fits_slack_limits_and_shows_the_whole_question() -> None:
    view = custom_modal(longest(0, False), {"r": RID, "q": 0}, submits_answer=True, initial="x")
    assert len(view["title"]["text"]) <= 24
    assert len(view["private_metadata"]) <= 3000
    assert kinds(view["blocks"]) == ["section"] * 4 + ["input"]
    assert "".join(sections(view["blocks"])) == escaped(longest(0, False).question)
    element = view["blocks"][-1]["element"]
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


def test_a_click_names_the_group_whose_message_it_is() -> None:
    """Block ids carry the group that posted the message (and the modal's metadata
    does), so a click on another group's message is told apart; a message posted
    before (`askq:<part>:<request>`) names none."""
    blocks = question_message(RID, [question()], CALLER, group="slack-mgr")
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U1"},
        "actions": [
            {"block_id": blocks[3]["block_id"], "action_id": "askq.pick.1", "type": "button"}
        ],
    }
    parsed = parse_interaction(payload)
    assert isinstance(parsed, BlockActions)
    assert [(a.request_id, a.group) for a in parsed.actions] == [(RID, "slack-mgr")]
    payload["actions"][0]["block_id"] = f"askq:0:{RID}"
    legacy = parse_interaction(payload)
    assert isinstance(legacy, BlockActions)
    assert [(a.request_id, a.group) for a in legacy.actions] == [(RID, None)]
    meta = {"r": RID, "q": 0, "c": "C1", "ts": "1.2", "g": "slack-mgr"}
    view = custom_modal(question(), meta, submits_answer=True)
    submitted = parse_interaction(
        {
            "type": "view_submission",
            "user": {"id": "U1"},
            "view": {
                "callback_id": view["callback_id"],
                "private_metadata": view["private_metadata"],
                "state": {"values": {"askq:custom": {"custom": {"value": "text"}}}},
            },
        }
    )
    assert isinstance(submitted, CustomSubmitted) and submitted.group == "slack-mgr"


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
