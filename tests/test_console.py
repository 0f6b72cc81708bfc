"""The console answerer, driven through a real worker loop with scripted keyboard input."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import running
from rich.console import Console

from askq import AnswererRuntime, Answers, AskError, Caller, ErrorCode, Retraction, Seam
from askq.answerers.console import ConsoleAnswerer, ConsoleOptions
from askq.answerers.memory import MemoryAnswerer
from askq.protocol._text import visible

CONFIRM = {
    "id": "deploy",
    "question": "Deploy build 42 to production?",
    "header": "Confirm",
    "options": [
        {"label": "Yes (Recommended)", "description": "ship it now"},
        {"label": "No", "description": "keep staging"},
    ],
}
REGIONS = {
    "id": "regions",
    "question": "Which regions?",
    "header": "Regions",
    "multiSelect": True,
    "options": [{"label": "eu"}, {"label": "us"}, {"label": "ap"}],
}
NAME = {"id": "name", "question": "Name the release", "header": "Name"}
PROMPT = " > "


@dataclass
class Desk:
    """One console worker and the person in front of it."""

    seam: Seam
    reader: asyncio.StreamReader
    out: io.StringIO
    runtime: AnswererRuntime
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.out.getvalue()

    async def until(self, needle: str, count: int = 1, timeout: float = 5.0) -> None:
        try:
            async with asyncio.timeout(timeout):
                while self.text.count(needle) < count:
                    await asyncio.sleep(0.005)
        except TimeoutError:
            pytest.fail(f"never saw {needle!r} x{count} in:\n{self.text}")

    async def presented(self, count: int, timeout: float = 5.0) -> None:
        """Wait until the runtime has handed `count` requests to the console."""
        async with asyncio.timeout(timeout):
            while len(self.runtime.presented) < count:
                await asyncio.sleep(0.005)

    async def type(self, line: str, prompts: int) -> None:
        """Wait for the `prompts`-th prompt, then type a line."""
        await self.until(PROMPT, prompts)
        self.reader.feed_data(line.encode() + b"\n")

    def ask(self, *questions: dict[str, Any], turn: str = "t") -> asyncio.Task[Answers]:
        task = asyncio.create_task(
            self.seam.ask(list(questions), Caller(agent_id="a", turn_id=turn))
        )
        self.tasks.append(task)
        return task

    async def serve(self, answerer: Any, group: str) -> AnswererRuntime:
        runtime = AnswererRuntime(self.seam, answerer, group=group, priority=0)
        self.tasks.append(await runtime.start(timeout=5))
        return runtime


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in reversed(tasks):
        task.cancel()
    for task in reversed(tasks):
        with contextlib.suppress(asyncio.CancelledError, AskError):
            await task


@pytest.fixture
async def make_desk(seam: Seam) -> AsyncIterator[Callable[..., Awaitable[Desk]]]:
    desks: list[Desk] = []

    async def make(
        answerer_cls: type[ConsoleAnswerer] = ConsoleAnswerer,
        *,
        terminal: bool = False,
        width: int = 120,
    ) -> Desk:
        reader = asyncio.StreamReader()
        out = io.StringIO()
        console = Console(file=out, width=width, force_terminal=terminal)
        answerer = answerer_cls(ConsoleOptions(by="console:alice"), input=reader, console=console)
        runtime = AnswererRuntime(seam, answerer, group="console", priority=0)
        desk = Desk(seam, reader, out, runtime, [await runtime.start(timeout=5)])
        desks.append(desk)
        return desk

    yield make
    for d in desks:
        await _cancel(d.tasks)


@pytest.fixture
async def desk(make_desk: Callable[..., Awaitable[Desk]]) -> Desk:
    return await make_desk()


async def test_single_select(desk: Desk) -> None:
    asked = desk.ask(CONFIRM)
    await desk.type("1", prompts=1)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == '{"answers":[{"id":"deploy","selected":["Yes (Recommended)"]}]}'
    await desk.until("✓ Confirm: answered")
    out = desk.text
    assert "[Confirm] Deploy build 42 to production?" in out
    assert "1. Yes (Recommended) — ship it now" in out
    assert "3. Other…" in out


async def test_single_select_other_overrides(desk: Desk) -> None:
    asked = desk.ask(CONFIRM)
    await desk.type("o", prompts=1)
    await desk.type("after the freeze", prompts=2)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == (
        '{"answers":[{"id":"deploy","selected":[],"custom":"after the freeze"}]}'
    )


async def test_multi_select_with_other(desk: Desk) -> None:
    asked = desk.ask(REGIONS, CONFIRM)
    await desk.type("3, 1 4", prompts=1)
    await desk.type("sa-east too", prompts=2)
    await desk.type("2", prompts=3)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == (
        '{"answers":[{"id":"regions","selected":["eu","ap"],"custom":"sa-east too"},'
        '{"id":"deploy","selected":["No"]}]}'
    )
    assert "[Regions] (1/2) Which regions?" in desk.text
    assert "[Confirm] (2/2)" in desk.text


async def test_multi_select_none(desk: Desk) -> None:
    asked = desk.ask(REGIONS)
    await desk.type("", prompts=1)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == '{"answers":[{"id":"regions","selected":[]}]}'


async def test_free_text(desk: Desk) -> None:
    asked = desk.ask(NAME)
    await desk.type("   ", prompts=1)  # blank is refused
    await desk.type("  Hazel  ", prompts=2)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == '{"answers":[{"id":"name","selected":[],"custom":"Hazel"}]}'
    assert "cannot be empty" in desk.text
    assert "Other…" not in desk.text


async def test_invalid_input_then_valid(desk: Desk) -> None:
    asked = desk.ask(CONFIRM)
    await desk.type("9", prompts=1)
    await desk.type("yes please", prompts=2)
    await desk.type("1,2", prompts=3)
    await desk.type("0", prompts=4)
    await desk.type("2", prompts=5)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.to_json() == '{"answers":[{"id":"deploy","selected":["No"]}]}'
    out = desk.text
    assert "'9' is not a choice: type numbers from 1 to 3" in out
    assert "'yes' is not a choice" in out
    assert "type one number from 1 to 3" in out
    assert "'0' is not a choice" in out
    assert out.count("[Confirm] Deploy") == 1  # re-prompted, not re-shown


async def test_two_requests_one_after_another(desk: Desk) -> None:
    first = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    second = desk.ask(NAME, turn="t2")
    await desk.presented(2)
    assert "[Name]" not in desk.text  # queued behind the question on screen
    desk.reader.feed_data(b"2\n")
    await desk.type("Hazel", prompts=2)
    assert (await asyncio.wait_for(first, 5)).to_json() == (
        '{"answers":[{"id":"deploy","selected":["No"]}]}'
    )
    assert (await asyncio.wait_for(second, 5)).to_json() == (
        '{"answers":[{"id":"name","selected":[],"custom":"Hazel"}]}'
    )
    assert desk.text.index("[Confirm]") < desk.text.index("[Name]")


async def test_retracted_while_prompting(desk: Desk) -> None:
    first = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    second = desk.ask(NAME, turn="t2")
    await desk.presented(2)
    assert await desk.seam.abort_turn("t") == 1
    with pytest.raises(AskError) as err:
        await asyncio.wait_for(first, 5)
    assert err.value.code is ErrorCode.ABORTED
    await desk.until("✗ Confirm: retracted — cancelled: the turn was aborted")
    await desk.type("Hazel", prompts=2)  # the next question took over the prompt
    assert (await asyncio.wait_for(second, 5)).to_json() == (
        '{"answers":[{"id":"name","selected":[],"custom":"Hazel"}]}'
    )


async def test_retracted_while_queued(desk: Desk) -> None:
    first = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    second = desk.ask(NAME, turn="t2")
    await desk.presented(2)
    await desk.seam.abort_turn("t2")
    await desk.until("✗ Name: retracted — cancelled: the turn was aborted")
    with pytest.raises(AskError):
        await asyncio.wait_for(second, 5)
    await desk.type("1", prompts=1)
    await asyncio.wait_for(first, 5)
    await desk.until("✓ Confirm: answered")
    await asyncio.sleep(0.05)
    assert "[Name]" not in desk.text  # dropped, never shown


async def answered_on_slack_while_prompting(desk: Desk, by: str = "slack:U123") -> Answers:
    """Another group of the tier (`by`) answers while the console prompts."""
    other = MemoryAnswerer()
    await desk.serve(other, "slack")
    asked = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    offer = await other.next_presented(5)
    await other.answer(offer.request_id, [{"id": "deploy", "selected": ["No"]}], by=by)
    return await asyncio.wait_for(asked, 5)


async def test_answered_elsewhere(desk: Desk) -> None:
    answers = await answered_on_slack_while_prompting(desk)
    assert answers.to_json() == '{"answers":[{"id":"deploy","selected":["No"]}]}'
    await desk.until("✗ Confirm: retracted — answered in Slack by U123")
    # The abandoned prompt does not swallow the next request's input.
    nxt = desk.ask(NAME, turn="t2")
    await desk.type("Hazel", prompts=2)
    assert '"custom":"Hazel"' in (await asyncio.wait_for(nxt, 5)).to_json()


class _Deaf(ConsoleAnswerer):
    """Misses retractions, as a console would whose events stream lagged."""

    async def retract(self, retraction: Retraction) -> None:
        return None


async def test_late_answer_is_refused(make_desk: Callable[..., Awaitable[Desk]]) -> None:
    desk = await make_desk(_Deaf)
    await answered_on_slack_while_prompting(desk)
    await desk.type("1", prompts=1)
    await desk.until("✗ Confirm: already answered in Slack by U123: your answer was not recorded")
    nxt = desk.ask(NAME, turn="t2")
    await desk.type("Hazel", prompts=2)  # moved on to the next request
    await asyncio.wait_for(nxt, 5)


async def test_input_closed_passes_claims_on(desk: Desk) -> None:
    asked = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    queued = desk.ask(NAME, turn="t2")
    await desk.presented(2)
    desk.reader.feed_eof()
    await desk.until("input closed; 2 request(s) passed on")
    # No tier after this one: both fall through to NO_ANSWERER instead of hanging.
    for task in (asked, queued):
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(task, 5)
        assert err.value.code is ErrorCode.NO_ANSWERER
    with pytest.raises(AskError) as later:
        await asyncio.wait_for(desk.ask(CONFIRM, turn="t3"), 5)
    assert later.value.code is ErrorCode.NO_ANSWERER  # declined from now on


async def test_input_that_fails_passes_claims_on(desk: Desk) -> None:
    """A read that fails (EIO of a terminal that hung up, ...) is the input's end too,
    not a dead UI task holding its claims."""
    asked = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    desk.reader.set_exception(OSError(errno.EIO, "Input/output error"))
    await desk.until("input unreadable (OSError: [Errno 5] Input/output error); 1 request(s)")
    with pytest.raises(AskError) as err:
        await asyncio.wait_for(asked, 5)
    assert err.value.code is ErrorCode.NO_ANSWERER
    with pytest.raises(AskError) as later:
        await asyncio.wait_for(desk.ask(CONFIRM, turn="t2"), 5)
    assert later.value.code is ErrorCode.NO_ANSWERER


async def test_input_already_ended_claims_nothing(desk: Desk) -> None:
    desk.reader.feed_eof()  # e.g. `true | askq worker console`, or answers used up
    with pytest.raises(AskError) as err:
        await asyncio.wait_for(desk.ask(CONFIRM), 5)
    assert err.value.code is ErrorCode.NO_ANSWERER
    assert "[Confirm]" not in desk.text  # declined, never claimed and shown


def _console(reader: asyncio.StreamReader, out: io.StringIO) -> ConsoleAnswerer:
    console = Console(file=out, width=120, force_terminal=False)
    return ConsoleAnswerer(ConsoleOptions(by="console:alice"), input=reader, console=console)


async def _until(out: io.StringIO, needle: str, timeout: float = 5.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while needle not in out.getvalue():
                await asyncio.sleep(0.005)
    except TimeoutError:
        pytest.fail(f"never saw {needle!r} in:\n{out.getvalue()}")


async def test_stopping_gives_back_what_it_showed(seam: Seam) -> None:
    """Ctrl-C of a console: the request on screen and the queued one move on to the next
    tier at once, not CLAIMED until ASKQ_ORPHAN_CLAIM_AFTER."""
    out, reader, later = io.StringIO(), asyncio.StreamReader(), MemoryAnswerer()
    asks: list[asyncio.Task[Answers]] = []
    async with running(seam, later, "later", priority=10):
        async with running(seam, _console(reader, out), "console") as runtime:
            for turn in ("t1", "t2"):
                ask = seam.ask([CONFIRM], Caller(agent_id="a", turn_id=turn))
                asks.append(asyncio.create_task(ask))
            await _until(out, PROMPT)
            while len(runtime.presented) < 2:
                await asyncio.sleep(0.005)
        assert "stopping; 2 request(s) passed on" in out.getvalue()
        moved = {(await later.next_presented(2)).request_id for _ in asks}
        assert len(moved) == 2
        for request_id in moved:
            await later.answer(request_id, [{"id": "deploy", "selected": ["No"]}], by="later")
        for ask in asks:
            assert (await asyncio.wait_for(ask, 5)).answers[0].selected == ["No"]


async def _never(request_id: str) -> bool:
    await asyncio.Event().wait()  # Redis that does not answer
    return False


async def test_stopping_is_bounded_when_redis_does_not_answer(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("askq.answerers.console.RELEASE_WITHIN", 0.3, raising=False)
    out, reader = io.StringIO(), asyncio.StreamReader()
    answerer = _console(reader, out)
    async with running(seam, answerer, "console"):
        asked = asyncio.create_task(seam.ask([CONFIRM], Caller(agent_id="a", turn_id="t")))
        await _until(out, PROMPT)
        monkeypatch.setattr(answerer.group, "release", _never)
        started = asyncio.get_running_loop().time()
    assert asyncio.get_running_loop().time() - started < 2
    assert "stopping; 0 request(s) passed on, 1 could not be (Redis unreachable?)" in out.getvalue()
    asked.cancel()
    with contextlib.suppress(asyncio.CancelledError, AskError):
        await asked


async def test_release_refused_after_end_of_input_is_tried_again(
    seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker lives on after its input ended: a claim it failed to give back would
    wait on a live replica nobody sees, so it keeps trying."""
    monkeypatch.setattr("askq.answerers.console.RELEASE_RETRY", 0.05, raising=False)
    out, reader = io.StringIO(), asyncio.StreamReader()
    answerer = _console(reader, out)
    async with running(seam, answerer, "console"):
        asked = asyncio.create_task(seam.ask([CONFIRM], Caller(agent_id="a", turn_id="t")))
        await _until(out, PROMPT)
        release, failures = answerer.group.release, [1]

        async def flaky(request_id: str) -> bool:
            if failures:
                failures.pop()
                raise AskError(ErrorCode.REDIS_UNAVAILABLE, "cannot reach Redis")
            return await release(request_id)

        monkeypatch.setattr(answerer.group, "release", flaky)
        reader.feed_eof()
        with pytest.raises(AskError) as err:
            await asyncio.wait_for(asked, 5)
        assert err.value.code is ErrorCode.NO_ANSWERER
    assert "input closed; 0 request(s) passed on, 1 could not be" in out.getvalue()


# Agent text that would rewrite the screen if printed raw: on a terminal, option 1 would
# read "1. No, keep it (Recommended)" and typing 1 would send "Yes, drop it".
FORGED = "Yes, drop it\x1b[2K\x1b[1G  1. No, keep it (Recommended)"
DECEPTIVE = {
    "id": "drop",
    "header": "[bold red]Drop[/]\x07",  # markup, and a BEL
    "question": "Drop the \u202etable\u202c?\n  2. Yes, drop it\x1b]0;pwned\x07",  # bidi, title
    "options": [
        {"label": FORGED, "description": "ring\x07"},
        {"label": "No, keep it\n  3. Yes, drop it", "description": ":warning: [link]"},
    ],
}
# What rich itself writes on a terminal (styles); anything else escaping is agent text.
RICH_STYLES = re.compile(r"\x1b\[[0-9;]*m")
OPTION_LINE = re.compile(r"^ {0,3}(\d+)\. (.*)$")  # where option numbers stand


def _option_lines(text: str) -> dict[int, str]:
    found = [OPTION_LINE.match(line) for line in RICH_STYLES.sub("", text).splitlines()]
    lines = [(int(m.group(1)), m.group(2)) for m in found if m]
    assert [n for n, _ in lines] == [1, 2, 3], lines  # no forged option line
    return dict(lines)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "plain"])
async def test_agent_text_is_shown_as_data(
    make_desk: Callable[..., Awaitable[Desk]], terminal: bool
) -> None:
    desk = await make_desk(terminal=terminal)
    asked = asyncio.create_task(
        desk.seam.ask([DECEPTIVE], Caller(agent_id="agent\x1b[8m-7", turn_id="t\n1"))
    )
    desk.tasks.append(asked)
    await desk.until(PROMPT)
    offer = next(iter(desk.runtime.presented.values()))
    await desk.runtime.answerer.remind(offer)
    await desk.until("still waiting for your answer")
    shown = RICH_STYLES.sub("", desk.text)
    for raw in ("\x1b", "\x07", "\u202e", "\u202c"):
        assert raw not in shown, f"{raw!r} reached the screen:\n{shown}"
    options = _option_lines(desk.text)
    assert options[1].startswith("Yes, drop it\\x1b[2K\\x1b[1G  1. No, keep it (Recommended)")
    assert options[2].startswith("No, keep it\\n  3. Yes, drop it — :warning: [link]")
    assert options[3].startswith("Other…")
    assert "? agent agent\\x1b[8m-7 asks (turn t\\n1)" in shown
    assert "[[bold red]Drop[/]\\x07] Drop the \\u202etable\\u202c?" in shown  # not markup
    # The question's second line stands under its first, not where options stand.
    assert "\n" + " " * len("[[bold red]Drop[/]\\x07] ") + "  2. Yes, drop it\\x1b]0;pwned" in shown
    assert "⏰ [bold red]Drop[/]\\x07: still waiting" in shown


async def test_typing_the_number_sends_the_label_shown_next_to_it(desk: Desk) -> None:
    asked = desk.ask(DECEPTIVE)
    await desk.type("1", prompts=1)
    answers = await asyncio.wait_for(asked, 5)
    assert answers.answers[0].selected == [FORGED]
    assert _option_lines(desk.text)[1].startswith(visible(FORGED))


async def test_who_answered_elsewhere_is_shown_as_data(desk: Desk) -> None:
    await answered_on_slack_while_prompting(desk, by="x\x1b[2Jy")
    await desk.until("✗ Confirm: retracted — answered by x\\x1b[2Jy")
    assert "\x1b" not in desk.text


async def test_wrapped_text_cannot_pass_for_an_option(
    make_desk: Callable[..., Awaitable[Desk]],
) -> None:
    """No control characters needed: spaces that wrap a label onto the next line would
    put its rest where option numbers stand."""
    desk = await make_desk(width=40)
    padded = "Yes, drop it" + " " * 40 + "1. No, keep it (Recommended)"
    question = "Really drop it? " + "It cannot be undone. " * 2 + "2. Keep it"
    desk.ask(
        {
            **DECEPTIVE,
            "header": "Drop",
            "question": question,
            "options": [{"label": padded}, {"label": "No"}],
        }
    )
    await desk.until(PROMPT)
    options = _option_lines(desk.text)
    assert options[1].startswith("Yes, drop it") and options[2].startswith("No")


async def test_refusal_quoting_agent_text_is_shown_as_data(
    make_desk: Callable[..., Awaitable[Desk]],
) -> None:
    desk = await make_desk(_Deaf)
    other = MemoryAnswerer()
    await desk.serve(other, "slack")
    asked = desk.ask(CONFIRM)
    await desk.until(PROMPT)
    offer = await other.next_presented(5)
    await other.answer(offer.request_id, [{"id": "deploy", "selected": ["No"]}], by="x\x1b[2Jy")
    await asyncio.wait_for(asked, 5)
    await desk.type("1", prompts=1)
    await desk.until("✗ Confirm: already answered by x\\x1b[2Jy: your answer was not recorded")
    assert "\x1b" not in desk.text


async def test_default_by_is_the_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "bob")
    assert ConsoleAnswerer().by == "console:bob"
    assert ConsoleAnswerer(ConsoleOptions(by="ops")).by == "ops"
    assert ConsoleAnswerer.kind == "console"


async def test_reminder_is_shown(desk: Desk) -> None:
    desk.ask(CONFIRM)
    await desk.presented(1)
    offer = next(iter(desk.runtime.presented.values()))
    await desk.runtime.answerer.remind(offer)
    await desk.until("⏰ Confirm: still waiting for your answer")
