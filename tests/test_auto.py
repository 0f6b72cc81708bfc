"""The rules answerer: matching and config errors without Redis, then as a real tier."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import running
from pydantic import ValidationError

from askq import AskError, Caller, ErrorCode, Offer, Seam
from askq.answerers.auto import AutoAnswerer, AutoOptions
from askq.answerers.memory import MemoryAnswerer

CALLER = Caller(agent_id="a", turn_id="t")

CLEANUP: dict[str, Any] = {
    "id": "cleanup",
    "header": "Confirm",
    "question": "Delete the 3 destructive temp files?",
    "options": [
        {"label": "Yes, delete them (Recommended)"},
        {"label": "No, keep them"},
    ],
}
LANGS: dict[str, Any] = {
    "id": "langs",
    "header": "Languages",
    "question": "Which languages should the build target?",
    "multiSelect": True,
    "options": [
        {"label": "Python (Recommended)"},
        {"label": "Go"},
        {"label": "Rust (Recommended)"},
    ],
}
PLAIN: dict[str, Any] = {
    "id": "color",
    "header": "Color",
    "question": "Which color?",
    "options": [{"label": "Red"}, {"label": "Blue"}],
}
NAME: dict[str, Any] = {"id": "name", "header": "Name", "question": "What is the project called?"}


def q(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def offer(*questions: dict[str, Any], scope: dict[str, str] | None = None) -> Offer:
    return Offer.model_validate(
        {
            "request_id": "r1",
            "group": "auto",
            "tier": 0,
            "offer_id": "1-0",
            "questions": list(questions),
            "scope": scope or {},
            "caller": CALLER,
            "created_ms": 0,
        }
    )


def write(tmp_path: Path, text: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def auto(tmp_path: Path | None = None, rules: str | None = None, **options: Any) -> AutoAnswerer:
    if rules is not None:
        assert tmp_path is not None
        options["rules"] = write(tmp_path, rules)
    return AutoAnswerer(AutoOptions(**options))


def compact(a: AutoAnswerer, o: Offer) -> str | None:
    plan = a.plan(o)
    return None if plan is None else plan.answers.to_json()


# --- matching -------------------------------------------------------------------------


def test_default_policy_is_recommended() -> None:
    a = AutoAnswerer()
    plan = a.plan(offer(CLEANUP))
    assert plan is not None
    assert plan.answers.to_json() == (
        '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]}]}'
    )
    assert plan.by == "auto:policy=recommended"


def test_policy_recommended_without_marker_takes_first() -> None:
    assert (
        compact(AutoAnswerer(), offer(PLAIN)) == '{"answers":[{"id":"color","selected":["Red"]}]}'
    )


def test_policy_first() -> None:
    a = auto(policy="first")
    assert (
        compact(a, offer(LANGS))
        == '{"answers":[{"id":"langs","selected":["Python (Recommended)"]}]}'
    )
    assert a.plan(offer(LANGS)).by == "auto:policy=first"  # type: ignore[union-attr]


def test_policy_decline() -> None:
    assert auto(policy="decline").plan(offer(CLEANUP)) is None


def test_multi_select_recommended_selects_every_marked_option() -> None:
    assert compact(AutoAnswerer(), offer(LANGS)) == (
        '{"answers":[{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
    )


def test_header_is_a_full_match(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\nheader = "Confirm"\naction = "decline"\n')
    assert a.plan(offer(CLEANUP)) is None
    assert a.plan(offer(q(CLEANUP, header="Unconfirmed"))) is not None
    assert a.plan(offer(q(CLEANUP, header="Confirm it"))) is not None
    b = auto(tmp_path, '[[rule]]\nheader = "Conf.*"\naction = "decline"\n')
    assert b.plan(offer(q(CLEANUP, header="Confirm it"))) is None


def test_question_is_searched(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\nquestion = "destructive"\naction = "decline"\n')
    assert a.plan(offer(CLEANUP)) is None
    assert a.plan(offer(PLAIN)) is not None
    # case-sensitive unless the pattern says otherwise
    assert a.plan(offer(q(CLEANUP, question="DESTRUCTIVE?"))) is not None
    b = auto(tmp_path, '[[rule]]\nquestion = "(?i)destructive"\naction = "decline"\n')
    assert b.plan(offer(q(CLEANUP, question="DESTRUCTIVE?"))) is None


def test_scope_patterns(tmp_path: Path) -> None:
    a = auto(
        tmp_path,
        '[[rule]]\nscope = { tenant = "acme-*", env = "prod" }\naction = "decline"\n',
    )
    assert a.plan(offer(CLEANUP, scope={"tenant": "acme-eu", "env": "prod", "x": "y"})) is None
    assert a.plan(offer(CLEANUP, scope={"tenant": "acme-eu"})) is not None  # env missing
    assert a.plan(offer(CLEANUP, scope={"tenant": "other", "env": "prod"})) is not None
    assert a.plan(offer(CLEANUP)) is not None


def test_all_conditions_must_hold(tmp_path: Path) -> None:
    a = auto(
        tmp_path,
        '[[rule]]\nheader = "Confirm"\nquestion = "temp"\nscope = { tenant = "acme" }\n'
        'action = "decline"\n',
    )
    assert a.plan(offer(CLEANUP, scope={"tenant": "acme"})) is None
    assert a.plan(offer(CLEANUP, scope={"tenant": "other"})) is not None
    assert a.plan(offer(q(CLEANUP, question="Delete it?"), scope={"tenant": "acme"})) is not None


def test_first_matching_rule_decides(tmp_path: Path) -> None:
    a = auto(
        tmp_path,
        '[[rule]]\nheader = "Confirm"\naction = "label"\nlabel = "No, keep them"\n'
        '[[rule]]\naction = "decline"\n',
    )
    plan = a.plan(offer(CLEANUP))
    assert plan is not None
    assert plan.answers.to_json() == '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'
    assert plan.by == "auto:rule[0]"
    assert a.plan(offer(PLAIN)) is None  # rule[1], the catch-all


def test_action_first(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\naction = "first"\n')
    assert (
        compact(a, offer(LANGS))
        == '{"answers":[{"id":"langs","selected":["Python (Recommended)"]}]}'
    )


def test_action_recommended_overrides_policy(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\nheader = "Color"\naction = "recommended"\n', policy="decline")
    assert compact(a, offer(PLAIN)) == '{"answers":[{"id":"color","selected":["Red"]}]}'
    assert a.plan(offer(CLEANUP)) is None


def test_action_label_accepts_label_without_recommended_suffix(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\naction = "label"\nlabel = "Yes, delete them"\n')
    assert compact(a, offer(CLEANUP)) == (
        '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]}]}'
    )


def test_action_labels_on_multi_select(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\naction = "label"\nlabels = ["Go", "Rust"]\n')
    assert compact(a, offer(LANGS)) == (
        '{"answers":[{"id":"langs","selected":["Go","Rust (Recommended)"]}]}'
    )
    # several labels cannot answer a single-select question
    b = auto(tmp_path, '[[rule]]\naction = "label"\nlabels = ["Red", "Blue"]\n')
    assert b.plan(offer(PLAIN)) is None


def test_unknown_label_declines_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = auto(tmp_path, '[[rule]]\naction = "label"\nlabel = "Maybe"\n')
    with caplog.at_level(logging.WARNING, logger="askq.auto"):
        assert a.plan(offer(CLEANUP)) is None
    assert "Maybe" in caplog.text and "cleanup" in caplog.text


def test_action_custom(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\naction = "custom"\ncustom = "ship it"\n')
    assert compact(a, offer(CLEANUP, NAME)) == (
        '{"answers":[{"id":"cleanup","selected":[],"custom":"ship it"},'
        '{"id":"name","selected":[],"custom":"ship it"}]}'
    )


def test_action_decline(tmp_path: Path) -> None:
    a = auto(tmp_path, '[[rule]]\nheader = "Name"\naction = "decline"\n')
    assert a.plan(offer(NAME)) is None
    # one declined question declines the whole request
    assert a.plan(offer(CLEANUP, NAME)) is None


@pytest.mark.parametrize("policy", ["recommended", "first"])
def test_free_text_needs_custom(tmp_path: Path, policy: str) -> None:
    assert auto(policy=policy).plan(offer(NAME)) is None
    assert auto(tmp_path, f'[[rule]]\naction = "{policy}"\n').plan(offer(NAME)) is None
    assert auto(tmp_path, '[[rule]]\naction = "label"\nlabel = "x"\n').plan(offer(NAME)) is None
    a = auto(
        tmp_path, '[[rule]]\nheader = "Name"\naction = "custom"\ncustom = "askq"\n', policy=policy
    )
    plan = a.plan(offer(CLEANUP, NAME))
    assert plan is not None
    assert plan.by == f"auto:policy={policy},rule[0]"


def test_yaml_rules(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "rule:\n"
        "  - header: Confirm\n"
        "    question: destructive\n"
        "    scope: {tenant: acme-*}\n"
        "    action: label\n"
        "    label: No, keep them\n"
        "  - header: Name\n"
        "    action: custom\n"
        "    custom: askq\n",
        "rules.yaml",
    )
    a = AutoAnswerer(AutoOptions(rules=path))
    assert compact(a, offer(CLEANUP, NAME, scope={"tenant": "acme-1"})) == (
        '{"answers":[{"id":"cleanup","selected":["No, keep them"]},'
        '{"id":"name","selected":[],"custom":"askq"}]}'
    )
    empty = AutoAnswerer(AutoOptions(rules=write(tmp_path, "", "empty.yml")))
    assert empty.rules == []


def test_options_are_checked() -> None:
    with pytest.raises(ValidationError):
        AutoOptions(policy="custom")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        AutoOptions(rulez="x")  # type: ignore[call-arg]


# --- config errors ----------------------------------------------------------------------

TOML_ERRORS = [
    ('[[rule]]\naction = "first"\n[[rule]]\naction = "x"\n', "rule[1].action: Input should be"),
    ("[[rule]]\n", "rule[0].action: Field required"),
    ('[[rule]]\naction = "first"\nlable = "x"\n', "rule[0].lable: Extra inputs are not permitted"),
    ('[[rule]]\nheader = "("\naction = "first"\n', "rule[0].header: invalid regex '('"),
    ('[[rule]]\nquestion = "a[b"\naction = "first"\n', "rule[0].question: invalid regex 'a[b'"),
    ('[[rule]]\nscope = { tenant = 3 }\naction = "first"\n', "rule[0].scope.tenant:"),
    ('[[rule]]\naction = "label"\n', 'rule[0].label: action = "label" needs `label` or `labels`'),
    (
        '[[rule]]\naction = "label"\nlabel = "a"\nlabels = ["b"]\n',
        'rule[0].label: action = "label" needs `label` or `labels`',
    ),
    ('[[rule]]\naction = "label"\nlabels = []\n', "rule[0].labels: List should have at least 1"),
    (
        '[[rule]]\naction = "label"\nlabels = ["a", "a"]\n',
        "rule[0].labels: a label is listed twice",
    ),
    ('[[rule]]\naction = "first"\nlabel = "a"\n', 'rule[0].label: only used with action = "label"'),
    (
        '[[rule]]\naction = "first"\nlabels = ["a"]\n',
        'rule[0].labels: only used with action = "label"',
    ),
    ('[[rule]]\naction = "custom"\n', 'rule[0].custom: action = "custom" needs non-empty'),
    ('[[rule]]\naction = "custom"\ncustom = "  "\n', 'rule[0].custom: action = "custom" needs'),
    (
        '[[rule]]\naction = "decline"\ncustom = "x"\n',
        'rule[0].custom: only used with action = "custom"',
    ),
    ("rules = []\n", "rules: Extra inputs are not permitted"),
    ('rule = "x"\n', "rule: Input should be a valid list"),
    ("[[rule]\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "message"), TOML_ERRORS)
def test_toml_config_errors_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(AskError) as info:
        AutoAnswerer(AutoOptions(rules=path))
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert info.value.message.startswith(f"{path}: ")
    assert message in info.value.message


YAML_ERRORS = [
    ("rule:\n  - action: first\n  - action: nope\n", "rule[1].action: Input should be"),
    ("rule:\n  - header: '('\n    action: first\n", "rule[0].header: invalid regex"),
    ("rule:\n  - action: label\n", 'rule[0].label: action = "label" needs'),
    (
        "rule:\n  - action: first\n    custom: x\n",
        'rule[0].custom: only used with action = "custom"',
    ),
    ("- action: first\n", "the top level must be a mapping"),
    ("rule: [\n", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "message"), YAML_ERRORS)
def test_yaml_config_errors_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text, "rules.yml")
    with pytest.raises(AskError) as info:
        AutoAnswerer(AutoOptions(rules=path))
    assert info.value.code is ErrorCode.CONFIG_ERROR
    assert info.value.message.startswith(f"{path}: ")
    assert message in info.value.message


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    path = write(tmp_path, '[[rule]]\naction = "label"\n[[rule]]\naction = "custom"\n')
    with pytest.raises(AskError) as info:
        AutoAnswerer(AutoOptions(rules=path))
    assert "rule[0].label" in info.value.message and "rule[1].custom" in info.value.message


def test_file_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(AskError, match="nope.toml: cannot read rules file"):
        AutoAnswerer(AutoOptions(rules=missing))
    with pytest.raises(AskError, match=r"rules\.json: unknown rules format"):
        AutoAnswerer(AutoOptions(rules=write(tmp_path, "{}", "rules.json")))
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(AskError, match=r"pip install 'askq\[auto\]'") as info:
        AutoAnswerer(AutoOptions(rules=write(tmp_path, "rule: []", "rules.yaml")))
    assert info.value.code is ErrorCode.CONFIG_ERROR


# --- decide / present against a stand-in group ------------------------------------------


class StubGroup:
    def __init__(self, error: AskError | None = None) -> None:
        self.error = error
        self.answered: list[tuple[str, str, str]] = []
        self.released: list[str] = []

    async def answer(self, request_id: str, answers: Any, *, by: str) -> Any:
        if self.error is not None:
            raise self.error
        self.answered.append((request_id, answers.to_json(), by))
        return answers

    async def release(self, request_id: str) -> bool:
        self.released.append(request_id)
        return True


async def started(a: AutoAnswerer, group: StubGroup) -> AutoAnswerer:
    await a.start(group)  # type: ignore[arg-type]
    return a


async def test_decide_then_present(tmp_path: Path) -> None:
    group = StubGroup()
    a = await started(
        auto(tmp_path, '[[rule]]\nheader = "Name"\naction = "custom"\ncustom = "x"\n'), group
    )
    o = offer(CLEANUP, NAME)
    assert await a.decide(o) is True
    await a.present(o)
    assert group.answered == [
        (
            "r1",
            '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]},'
            '{"id":"name","selected":[],"custom":"x"}]}',
            "auto:policy=recommended,rule[0]",
        )
    ]
    assert await a.decide(offer(NAME, q(PLAIN, id="c2"))) is True
    assert await a.decide(offer(q(NAME, header="Other"))) is False


async def test_present_without_decide_recomputes_or_releases(tmp_path: Path) -> None:
    group = StubGroup()
    a = await started(AutoAnswerer(), group)
    await a.present(offer(PLAIN))  # a claim recovered after a restart
    assert [by for _, _, by in group.answered] == ["auto:policy=recommended"]
    await a.present(offer(NAME))  # cannot be answered: give it back
    assert group.released == ["r1"]


@pytest.mark.parametrize("code", [ErrorCode.ALREADY_SETTLED, ErrorCode.NOT_CLAIMED])
async def test_present_tolerates_lost_races(
    code: ErrorCode, caplog: pytest.LogCaptureFixture
) -> None:
    group = StubGroup(AskError(code, "already settled: answered by human"))
    a = await started(AutoAnswerer(), group)
    o = offer(CLEANUP)
    assert await a.decide(o)
    with caplog.at_level(logging.INFO, logger="askq.auto"):
        await a.present(o)  # does not raise
    assert "r1" in caplog.text
    assert group.released == []


# --- as a tier of the waterfall ---------------------------------------------------------


async def ask(seam: Seam, *questions: dict[str, Any], scope: dict[str, str] | None = None) -> str:
    answers = await asyncio.wait_for(seam.ask(list(questions), CALLER, scope=scope), 10)
    return answers.to_json()


async def test_answers_by_policy(seam: Seam) -> None:
    async with running(seam, AutoAnswerer(), "auto", 0):
        assert await ask(seam, CLEANUP) == (
            '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]}]}'
        )
        assert await ask(seam, PLAIN, LANGS) == (
            '{"answers":[{"id":"color","selected":["Red"]},'
            '{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
        )


async def test_answers_by_rules(seam: Seam, tmp_path: Path) -> None:
    rules = write(
        tmp_path,
        '[[rule]]\nheader = "Confirm"\nscope = { tenant = "acme-*" }\naction = "label"\n'
        'label = "No, keep them"\n'
        '[[rule]]\nheader = "Name"\naction = "custom"\ncustom = "askq"\n',
    )
    async with running(seam, AutoAnswerer(AutoOptions(rules=rules)), "auto", 0):
        assert await ask(seam, CLEANUP, NAME, LANGS, scope={"tenant": "acme-eu"}) == (
            '{"answers":[{"id":"cleanup","selected":["No, keep them"]},'
            '{"id":"name","selected":[],"custom":"askq"},'
            '{"id":"langs","selected":["Python (Recommended)","Rust (Recommended)"]}]}'
        )
        assert await ask(seam, CLEANUP, scope={"tenant": "other"}) == (
            '{"answers":[{"id":"cleanup","selected":["Yes, delete them (Recommended)"]}]}'
        )


async def test_decline_falls_through_to_the_next_tier(seam: Seam, tmp_path: Path) -> None:
    rules = write(tmp_path, '[[rule]]\nquestion = "destructive"\naction = "decline"\n')
    memory = MemoryAnswerer(
        reply=lambda o: [{"id": qq.id, "selected": [qq.labels[-1]]} for qq in o.questions]
    )
    async with (
        running(seam, AutoAnswerer(AutoOptions(rules=rules)), "auto", 0),
        running(seam, memory, "humans", 10),
    ):
        assert await ask(seam, CLEANUP) == (
            '{"answers":[{"id":"cleanup","selected":["No, keep them"]}]}'
        )
        assert await ask(seam, PLAIN) == '{"answers":[{"id":"color","selected":["Red"]}]}'
    assert len(memory.decided) == 1  # only the declined request reached the memory tier


async def test_decline_without_another_tier_fails_no_answerer(seam: Seam) -> None:
    async with running(seam, AutoAnswerer(AutoOptions(policy="decline")), "auto", 0):
        with pytest.raises(AskError) as info:
            await ask(seam, CLEANUP)
    assert info.value.code is ErrorCode.NO_ANSWERER
