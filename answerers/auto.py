"""An answerer that answers by rules: for CI, and as a first tier for routine questions.

It runs as an ordinary answerer group (`askq worker auto --rules rules.toml`). Per
offer it works out an answer for every question; when it can answer them all it
accepts and answers at once, otherwise it declines and the waterfall moves on to the
next tier (usually humans). It never answers part of a request.

Rules file
----------
TOML (`.toml`) or YAML (`.yaml` / `.yml`, needs `pip install 'askq[auto]'`), chosen by
the file extension. Both hold one list, `rule`, checked in order::

    [[rule]]
    header = "Confirm"              # optional regex, must match the WHOLE header
    question = "destructive"        # optional regex, searched anywhere in the question
    scope = { tenant = "acme-*" }   # optional; every key must be in the request scope,
                                    # values are shell-style patterns
    action = "label"                # recommended | first | label | custom | decline
    label = "No, keep them"         # action = "label": the option to select
    # labels = ["A", "B"]           # ... or several, for a multi-select question
    # custom = "text"               # action = "custom": the free-text answer

    [[rule]]                        # no condition: matches every question
    action = "decline"

The same in YAML::

    rule:
      - header: Confirm
        question: destructive
        action: label
        label: No, keep them

Matching: `header` uses `re.fullmatch` (chips are short words such as "Confirm"; a
search would let "Confirm" match "Unconfirmed"); `question` uses `re.search` (the
prompt is prose, a rule names a word in it). Both are case-sensitive; write `(?i)` to
ignore case. A rule without conditions matches everything.

Answers, per question, from the FIRST rule that matches it (later rules are not tried):

- `recommended`: the options whose label ends with " (Recommended)" (all of them on a
  multi-select question, one otherwise), else the first option;
- `first`: the first option;
- `label`: the named option(s). A label also matches the option that carries the
  " (Recommended)" suffix, since agents add it per ask. A label the question does not
  have (or several labels on a single-select question) declines, with a warning;
- `custom`: `custom` as free text with nothing selected (on a single-select question
  custom text overrides a selection; on multi-select it stands alone);
- `decline`: decline the whole request.

A free-text question (no options) can only be answered by `custom`; `recommended`,
`first` and `label` decline it. A question no rule matches follows the `policy` option
(`recommended`, the default; `first`; or `decline`).

The answer is attributed `by="auto:rule[N]"` or `by="auto:policy=..."` (several sources,
comma-separated, when the questions of one request were answered by different rules).

Approvals (`askq.approve`, `@askq.require_approval`)
----------------------------------------------------
An approval is answered only by a rule that names its tool; the rules above (without
`tool`) and the `policy` never answer one, so nothing is approved by a catch-all::

    [[rule]]
    tool = "read_*"                  # shell-style pattern on the whole tool name
    action = "label"
    label = "Approve"

    [[rule]]
    tool = "deploy"
    arguments = { env = "staging", region = "eu-*" }   # every key must match
    scope = { tenant = "acme-*" }
    action = "label"
    label = "Approve"

    [[rule]]
    tool = "drop_*"
    action = "custom"
    custom = "Dropping tables needs a DBA: ask in #dba"  # reject, with this reason

`arguments` matches top-level arguments: a string argument as it is, any other value
as its compact JSON (`5`, `true`, `["a","b"]`); a missing argument does not match.
Patterns match the whole text, as strings, not paths: `"/tmp/*"` also matches
`/tmp/../etc/passwd`, so write them as narrow as the action allows. An approval rule
takes `action = "label"` with `Approve` or `Reject`, `custom` (free text: a reason to
reject, or edited arguments as one JSON object), or `decline`; it cannot have `header`
or `question` (the question's text is the agent's own words: a rule must not approve
because of what the agent wrote). An approval no rule names is declined, to the next
tier.
"""

from __future__ import annotations

import logging
import re
import tomllib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from askq import (
    FINAL_REFUSALS,
    MAX_CUSTOM,
    RECOMMENDED_SUFFIX,
    Answer,
    Answerer,
    AnswererOptions,
    Answers,
    AskError,
    ErrorCode,
    Offer,
    Question,
    Retraction,
    scope_matches,
)

log = logging.getLogger("askq.auto")

Action = Literal["recommended", "first", "label", "custom", "decline"]
Policy = Literal["recommended", "first", "decline"]

# Plans computed by `decide` wait here for `present`. Bounded, because an accepted
# decision may never be presented (another group of the tier claimed first); `present`
# recomputes a plan that is missing, so evicting one costs only time.
MAX_PENDING = 1024


class Rule(BaseModel):
    """One `[[rule]]` entry, as written in the file."""

    model_config = ConfigDict(extra="forbid")

    header: str | None = None
    question: str | None = None
    scope: dict[str, str] | None = None
    tool: str | None = Field(default=None, min_length=1)
    arguments: dict[str, str] | None = None
    action: Action
    label: str | None = Field(default=None, min_length=1)
    labels: list[str] | None = Field(default=None, min_length=1)
    custom: str | None = Field(default=None, max_length=MAX_CUSTOM)

    @field_validator("header", "question")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regex {value!r}: {exc}") from None
        return value


class RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: list[Rule] = Field(default_factory=list)


@dataclass(frozen=True)
class CompiledRule:
    index: int
    header: re.Pattern[str] | None
    question: re.Pattern[str] | None
    scope: dict[str, str]
    action: Action
    labels: tuple[str, ...]
    custom: str | None
    tool: str | None = None  # an approval rule: matches approvals of this tool only
    arguments: tuple[tuple[str, str], ...] = ()

    def matches(self, question: Question, scope: dict[str, str]) -> bool:
        if (question.action is None) != (self.tool is None):
            return False  # approvals only by approval rules, questions only by the others
        if question.action is not None and self.tool is not None:
            return question.action.matches(self.tool, dict(self.arguments)) and scope_matches(
                self.scope, scope
            )
        return (
            (self.header is None or self.header.fullmatch(question.header) is not None)
            and (self.question is None or self.question.search(question.question) is not None)
            and scope_matches(self.scope, scope)
        )


@dataclass(frozen=True)
class Plan:
    """The answers to one request and who (which rules) gave them."""

    answers: Answers
    by: str


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "file"


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise AskError(
            ErrorCode.CONFIG_ERROR, f"{path}: unknown rules format; use .toml, .yaml or .yml"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AskError(ErrorCode.CONFIG_ERROR, f"{path}: cannot read rules file: {exc}") from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise AskError(ErrorCode.CONFIG_ERROR, f"{path}: not valid TOML: {exc}") from None
    try:  # imported here: YAML is an optional extra, TOML rules must work without it
        import yaml
    except ImportError:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"{path}: YAML rules need PyYAML; run: pip install 'askq[auto]' (or use .toml)",
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AskError(ErrorCode.CONFIG_ERROR, f"{path}: not valid YAML: {exc}") from None
    return {} if data is None else data  # an empty file: no rules


def load_rules(path: Path) -> list[CompiledRule]:
    """Read and check a rules file; every problem names the file, rule and field."""
    data = _read(path)
    if not isinstance(data, dict):
        raise AskError(
            ErrorCode.CONFIG_ERROR, f"{path}: the top level must be a mapping with a `rule` list"
        )
    try:
        parsed = RulesFile.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{_loc(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        ]
        raise AskError(ErrorCode.CONFIG_ERROR, f"{path}: " + "; ".join(problems)) from None
    # Cross-field checks by hand, so each problem names its field (a pydantic model
    # validator would only name the rule).
    problems = []
    compiled: list[CompiledRule] = []
    for i, r in enumerate(parsed.rule):
        where = f"rule[{i}]"
        if r.action == "label":
            if (r.label is None) == (r.labels is None):
                problems.append(f'{where}.label: action = "label" needs `label` or `labels`')
        else:
            for name in ("label", "labels"):
                if getattr(r, name) is not None:
                    problems.append(f'{where}.{name}: only used with action = "label"')
        if r.action == "custom":
            if r.custom is None or not r.custom.strip():
                problems.append(f'{where}.custom: action = "custom" needs non-empty `custom` text')
        elif r.custom is not None:
            problems.append(f'{where}.custom: only used with action = "custom"')
        if r.labels is not None and len(set(r.labels)) != len(r.labels):
            problems.append(f"{where}.labels: a label is listed twice")
        problems += _approval_problems(r, where)
        compiled.append(
            CompiledRule(
                index=i,
                header=re.compile(r.header) if r.header is not None else None,
                question=re.compile(r.question) if r.question is not None else None,
                scope=dict(r.scope or {}),
                action=r.action,
                labels=(r.label,) if r.label is not None else tuple(r.labels or ()),
                custom=r.custom,
                tool=r.tool,
                arguments=tuple((r.arguments or {}).items()),
            )
        )
    if problems:
        raise AskError(ErrorCode.CONFIG_ERROR, f"{path}: " + "; ".join(problems))
    return compiled


APPROVAL_LABELS = ("Approve", "Reject")


def _approval_problems(r: Rule, where: str) -> list[str]:
    """An approval rule's own checks (see the module docstring)."""
    if r.tool is None:
        return [f"{where}.arguments: needs `tool` (it matches approvals)"] if r.arguments else []
    problems = []
    for name in ("header", "question"):
        if getattr(r, name) is not None:
            problems.append(
                f"{where}.{name}: an approval rule matches `tool` and `arguments`, not the"
                " agent's own words"
            )
    if r.action in ("recommended", "first"):
        problems.append(
            f'{where}.action: an approval rule takes "label" (Approve or Reject), "custom"'
            ' or "decline"'
        )
    for label in (r.label,) if r.label is not None else tuple(r.labels or ()):
        if label not in APPROVAL_LABELS:
            problems.append(f"{where}.label: an approval is answered Approve or Reject")
    return problems


def _pick_labels(question: Question, wanted: tuple[str, ...]) -> list[str] | None:
    """The question's labels named by a rule, or None when one is missing."""
    have = question.labels
    picked: list[str] = []
    for label in wanted:
        if label in have:
            picked.append(label)
        elif label + RECOMMENDED_SUFFIX in have:
            picked.append(label + RECOMMENDED_SUFFIX)
        else:
            return None
    return picked


class AutoOptions(AnswererOptions):
    rules: Path | None = Field(default=None, description="Rules file (.toml, .yaml, .yml).")
    policy: Policy = Field(
        default="recommended", description="Answer to a question no rule matches."
    )


class AutoAnswerer(Answerer[AutoOptions]):
    kind = "auto"
    Options = AutoOptions

    def __init__(self, options: AutoOptions | None = None) -> None:
        super().__init__(options)
        self.policy: Policy = self.options.policy
        # Loaded now, so a bad file stops the worker before it joins the waterfall.
        self.rules: list[CompiledRule] = (
            load_rules(self.options.rules) if self.options.rules else []
        )
        self._plans: OrderedDict[str, Plan] = OrderedDict()

    # --- the rules, without Redis -------------------------------------------------------

    def _answer_one(self, question: Question, scope: dict[str, str]) -> tuple[Answer | None, str]:
        """One question's answer (None: decline) and its source."""
        rule = next((r for r in self.rules if r.matches(question, scope)), None)
        if rule is None and question.action is not None:
            return None, "no rule names its tool"  # the policy never approves
        action: Action = rule.action if rule is not None else self.policy
        source = f"rule[{rule.index}]" if rule is not None else f"policy={self.policy}"
        if action == "decline":
            return None, source
        if action == "custom":
            return Answer(id=question.id, custom=rule.custom if rule else None), source
        if not question.options:  # free text: only custom text can answer it
            return None, source
        if action == "recommended":
            return Answer(id=question.id, selected=question.recommended), source
        if action == "first":
            return Answer(id=question.id, selected=question.labels[:1]), source
        wanted = rule.labels if rule is not None else ()
        picked = _pick_labels(question, wanted)
        if picked is None or (len(picked) > 1 and not question.multi_select):
            log.warning(
                "auto %s names %s, which question %r (options %s) cannot take; declining",
                source,
                list(wanted),
                question.id,
                question.labels,
            )
            return None, source
        return Answer(id=question.id, selected=picked), source

    def plan(self, offer: Offer) -> Plan | None:
        """Answers to every question of the offer, or None when any one declines."""
        answers: list[Answer] = []
        sources: list[str] = []
        for question in offer.questions:
            answer, source = self._answer_one(question, offer.scope)
            if answer is None:
                log.info(
                    "auto declines %s: question %r by %s", offer.request_id, question.id, source
                )
                return None
            answers.append(answer)
            if source not in sources:
                sources.append(source)
        return Plan(answers=Answers(answers=answers), by="auto:" + ",".join(sources))

    # --- the answerer interface -------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        plan = self.plan(offer)
        if plan is None:
            return False
        self._plans[offer.request_id] = plan
        while len(self._plans) > MAX_PENDING:
            self._plans.popitem(last=False)
        return True

    async def answer_at_once(self, offer: Offer) -> tuple[Any, str] | None:
        # Claimed and answered in one step; present() is left for recovered claims.
        plan = self._plans.pop(offer.request_id, None) or self.plan(offer)
        return None if plan is None else (plan.answers, plan.by)

    async def present(self, offer: Offer) -> None:
        # Missing when the claim was recovered after a restart, or the plan was evicted.
        plan = self._plans.pop(offer.request_id, None) or self.plan(offer)
        if plan is None:  # the rules changed under a recovered claim: let the next tier try
            await self.group.release(offer.request_id)
            return
        try:
            await self.group.answer(offer.request_id, plan.answers, by=plan.by)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                # Another group of the tier answered first, or the turn was aborted.
                log.info("auto answer to %s not needed: %s", offer.request_id, exc.message)
                return
            if exc.code is ErrorCode.INVALID_REQUEST:
                # A rule produced an answer the question refuses; give it to the next tier.
                log.warning("auto answer to %s refused: %s", offer.request_id, exc.message)
                await self.group.release(offer.request_id)
                return
            raise

    async def retract(self, retraction: Retraction) -> None:
        self._plans.pop(retraction.request_id, None)
