"""The contract the model sees: input validation, answer validation, schema, render."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from askq import (
    TOOL_NAME,
    AskError,
    AskUserQuestionTool,
    ErrorCode,
    Question,
    input_schema_json,
    parse_answers,
    parse_input,
)
from askq.protocol._models import MAX_OPTIONS, MAX_QUESTIONS

GOLDEN = Path(__file__).parent / "golden" / "ask_user_question.input_schema.json"


def q(
    qid: str = "q", labels: tuple[str, ...] = ("Yes", "No"), multi: bool = False
) -> dict[str, Any]:
    return {
        "id": qid,
        "question": "Proceed?",
        "header": "Confirm",
        "options": [{"label": label, "description": ""} for label in labels],
        "multiSelect": multi,
    }


def invalid(args: Any) -> str:
    with pytest.raises(AskError) as info:
        parse_input(args)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    return info.value.message


def test_valid_input_parses_with_aliases() -> None:
    parsed = parse_input({"questions": [q(multi=True)]})
    assert parsed.questions[0].multi_select is True
    assert parsed.questions[0].labels == ["Yes", "No"]


def test_json_text_input_is_accepted_and_bad_json_named() -> None:
    assert parse_input(json.dumps({"questions": [q()]})).questions[0].id == "q"
    assert invalid("{nope").startswith("input: not valid JSON")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda a: a.update(questions=[]), "questions: List should have at least 1 item"),
        (
            lambda a: a.update(questions=[q(f"q{i}") for i in range(MAX_QUESTIONS + 1)]),
            f"questions: List should have at most {MAX_QUESTIONS} items",
        ),
        (
            lambda a: a["questions"][0].update(id=""),
            "questions[0].id: String should have at least 1",
        ),
        (
            lambda a: a["questions"][0].update(id="has space"),
            "questions[0].id: String should match",
        ),
        (
            lambda a: a["questions"][0].update(header="h" * 41),
            "questions[0].header: String should have at most 40",
        ),
        (
            lambda a: a["questions"][0].update(question=""),
            "questions[0].question: String should have at least 1",
        ),
        (
            lambda a: a["questions"][0]["options"][1].update(label=""),
            "questions[0].options[1].label: String should have at least 1",
        ),
        (
            lambda a: a["questions"][0]["options"][0].update(label="x" * 121),
            "questions[0].options[0].label: String should have at most 120",
        ),
        (
            lambda a: a["questions"][0]["options"][0].update(description="d" * 501),
            "questions[0].options[0].description: String should have at most 500",
        ),
        (
            lambda a: a["questions"][0].update(
                options=[{"label": str(i)} for i in range(MAX_OPTIONS + 1)]
            ),
            f"questions[0].options: List should have at most {MAX_OPTIONS} items",
        ),
        (
            lambda a: a["questions"][0].update(surprise=1),
            "questions[0].surprise: Extra inputs are not permitted",
        ),
        (lambda a: a["questions"][0].pop("header"), "questions[0].header: Field required"),
        (
            lambda a: a["questions"][0].update(multiSelect="maybe"),
            "questions[0].multiSelect: Input should be a valid boolean",
        ),
    ],
)
def test_every_field_violation_names_its_path(mutate: Any, expected: str) -> None:
    args = {"questions": [q()]}
    mutate(args)
    assert invalid(args).startswith(expected)


def test_duplicate_label_and_id_are_named() -> None:
    message = invalid({"questions": [q("a"), q("b", labels=("Yes", "Maybe", "No", "No"))]})
    assert message == 'questions[1].options[3].label: duplicate label "No"'
    assert invalid({"questions": [q("a"), q("a")]}) == 'questions[1].id: duplicate id "a"'


def test_several_problems_are_all_reported() -> None:
    message = invalid({"questions": [q("a", labels=("x", "x")), q("a")]})
    assert 'questions[0].options[1].label: duplicate label "x"' in message
    assert 'questions[1].id: duplicate id "a"' in message


def test_question_without_options_is_free_text() -> None:
    parsed = parse_input({"questions": [{"id": "name", "question": "Name?", "header": "Name"}]})
    assert parsed.questions[0].options == []


QUESTIONS = [
    Question.model_validate(q("single", ("A (Recommended)", "B"))),
    Question.model_validate(q("multi", ("x", "y", "z"), multi=True)),
    Question.model_validate({"id": "free", "question": "Why?", "header": "Why"}),
]


def answers_error(raw: Any) -> str:
    with pytest.raises(AskError) as info:
        parse_answers(QUESTIONS, raw)
    assert info.value.code is ErrorCode.INVALID_REQUEST
    return info.value.message


def test_answers_are_put_in_question_order_and_rendered_compactly() -> None:
    answers = parse_answers(
        QUESTIONS,
        [
            {"id": "free", "custom": "because"},
            {"id": "multi", "selected": ["z", "x"], "custom": "and w"},
            {"id": "single", "selected": ["A (Recommended)"]},
        ],
    )
    assert answers.to_json() == (
        '{"answers":[{"id":"single","selected":["A (Recommended)"]},'
        '{"id":"multi","selected":["z","x"],"custom":"and w"},'
        '{"id":"free","selected":[],"custom":"because"}]}'
    )


def test_custom_overrides_single_select_and_blank_custom_is_omitted() -> None:
    answers = parse_answers(
        QUESTIONS,
        [
            {"id": "single", "selected": [], "custom": "neither"},
            {"id": "multi", "selected": [], "custom": "  "},
            {"id": "free", "custom": "ok"},
        ],
    )
    assert answers.answers[0].custom == "neither"
    assert answers.answers[1].custom is None
    assert '"custom"' not in json.dumps(json.loads(answers.to_json())["answers"][1])


def test_non_ascii_is_kept_verbatim_in_render() -> None:
    answers = parse_answers(
        [Question.model_validate({"id": "n", "question": "名字?", "header": "名字"})],
        [{"id": "n", "custom": "张三"}],
    )
    assert answers.to_json() == '{"answers":[{"id":"n","selected":[],"custom":"张三"}]}'


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            [{"id": "single", "selected": ["A (Recommended)"]}, {"id": "multi"}],
            'answer to "free": missing',
        ),
        (
            [{"id": "single", "selected": ["C"]}, {"id": "multi"}, {"id": "free", "custom": "x"}],
            'answer to "single".selected: no option labelled "C"',
        ),
        (
            [
                {"id": "single", "selected": ["A (Recommended)", "B"]},
                {"id": "multi"},
                {"id": "free", "custom": "x"},
            ],
            'answer to "single".selected: single-select takes at most one label',
        ),
        (
            [{"id": "single"}, {"id": "multi"}, {"id": "free", "custom": "x"}],
            'answer to "single": choose one option or give custom text',
        ),
        (
            [{"id": "single", "selected": ["B"]}, {"id": "multi"}, {"id": "free"}],
            'answer to "free".custom: a free-text question needs custom text',
        ),
        (
            [
                {"id": "single", "selected": ["B"]},
                {"id": "multi", "selected": ["x", "x"]},
                {"id": "free", "custom": "x"},
            ],
            'answer to "multi".selected: a label is selected twice',
        ),
        (
            [
                {"id": "single", "selected": ["B"]},
                {"id": "single", "selected": ["B"]},
                {"id": "multi"},
                {"id": "free", "custom": "x"},
            ],
            'answers[1].id: question "single" answered twice',
        ),
        (
            [
                {"id": "single", "selected": ["B"]},
                {"id": "multi"},
                {"id": "free", "custom": "x"},
                {"id": "ghost", "custom": "x"},
            ],
            'answers[3].id: no question with id "ghost"',
        ),
        (
            {"answers": [{"id": "single", "selected": "B"}]},
            "answers[0].selected: Input should be a valid list",
        ),
    ],
)
def test_every_answer_violation_is_named(raw: Any, expected: str) -> None:
    assert expected in answers_error(raw)


def test_recommended_labels() -> None:
    single = Question.model_validate(q("s", ("A", "B (Recommended)")))
    multi = Question.model_validate(q("m", ("A (Recommended)", "B", "C (Recommended)"), multi=True))
    plain = Question.model_validate(q("p", ("A", "B")))
    assert single.recommended == ["B (Recommended)"]
    assert multi.recommended == ["A (Recommended)", "C (Recommended)"]
    assert plain.recommended == ["A"]


def test_schema_matches_golden_file() -> None:
    # The schema sits in the model's cached prompt prefix: a change must be deliberate
    # (update the golden file in the same commit).
    assert input_schema_json() == GOLDEN.read_text()


def test_schema_is_byte_identical_across_processes() -> None:
    code = (
        "import hashlib, askq; print(hashlib.sha256(askq.input_schema_json().encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
            cwd=Path(__file__).parent.parent,
        ).stdout.strip()
        for seed in (0, 1, 2)
    }
    assert digests == {hashlib.sha256(input_schema_json().encode()).hexdigest()}


def test_schema_is_flat_and_describes_the_contract() -> None:
    schema = json.loads(input_schema_json())
    assert "$ref" not in input_schema_json() and "$defs" not in schema
    item = schema["properties"]["questions"]["items"]
    assert set(item["properties"]) == {"id", "question", "header", "options", "multiSelect"}
    assert item["additionalProperties"] is False


def test_tool_shapes() -> None:
    tool = AskUserQuestionTool(seam=None)  # type: ignore[arg-type]
    assert tool.anthropic() == {
        "name": TOOL_NAME,
        "description": tool.description,
        "input_schema": json.loads(input_schema_json()),
    }
    openai = tool.openai()
    assert openai["type"] == "function"
    assert openai["function"]["name"] == "ask_user_question"
    assert openai["function"]["parameters"] == json.loads(input_schema_json())
    assert "(Recommended)" in tool.description and "final result" in tool.description
