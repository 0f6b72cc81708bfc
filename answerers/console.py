"""The console channel: a person at a terminal answers the questions one at a time.

`present` only queues the request; one UI task shows the queue in arrival order, reads
the answers line by line and submits them. A request that settles elsewhere is dropped
from the queue, or, if it is on screen, its prompt is abandoned.

Standard input is a terminal, a pipe or a file of answers. An input nobody can type
into (/dev/null, as systemd and `docker run` without `-i` give; a closed one) stops
the worker at start-up with CONFIG_ERROR: a console must not claim questions nobody
can see. When the input ends or cannot be read, and when the worker stops, the console
gives back what it holds, so the waterfall moves on.

Agent text is data: every string an agent supplied is shown through `visible` (control
characters, escape sequences and bidi overrides written out as `\x1b`, `\u202e`), as
`Text`, never as rich markup; only the question may span lines, and its continuation
lines are indented under it, so no agent text can forge an option line.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import re
import stat
import sys
import threading
from collections.abc import Callable
from typing import Any

from pydantic import Field
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from askq import (
    FINAL_REFUSALS,
    MAX_CUSTOM,
    Answerer,
    AnswererOptions,
    AskError,
    ErrorCode,
    GroupHandle,
    Offer,
    Question,
    Retraction,
    ToolAction,
    answered_by,
    visible,
)

log = logging.getLogger("askq.console")

OTHER = "Other…"
# Stopping waits at most this long (seconds) for Redis to take back what the console
# holds, so a stop ends promptly with Redis unreachable; what it did not take back stays
# the replica's pending entries, which another replica or the sweeper recovers.
RELEASE_WITHIN = 2.0
# After the input ended, how often (seconds) a release Redis refused is tried again: the
# worker lives on, and nobody would ever recover a claim a live replica holds.
RELEASE_RETRY = 1.0
# The column where a question's text starts, at least: its continuation lines stand to
# the right of the option numbers (`  1.`), so none can pass for an option.
QUESTION_INDENT = 6


class ConsoleOptions(AnswererOptions):
    by: str | None = Field(
        default=None, description="Who answers, as recorded (default: console:<login>)."
    )


class _InputClosed(Exception):
    """Nobody can answer here any more: the input ended or cannot be read."""

    def __init__(self, why: str = "input closed") -> None:
        super().__init__(why)
        self.why = why


class _Invalid(Exception):
    pass


class ConsoleAnswerer(Answerer[ConsoleOptions]):
    kind = "console"
    Options = ConsoleOptions

    def __init__(
        self,
        options: ConsoleOptions | None = None,
        *,
        input: asyncio.StreamReader | None = None,
        console: Console | None = None,
    ) -> None:
        super().__init__(options)
        self._reader = input
        self.console = console if console is not None else Console()
        self._queue: dict[str, Offer] = {}  # waiting to be shown, in arrival order
        self._arrived = asyncio.Event()
        self._current: Offer | None = None
        self._prompt: asyncio.Task[list[dict[str, Any]]] | None = None
        self._withdrawn = False  # the request on screen was retracted
        self._closed = False  # input ended or stopping: nobody answers here any more
        self._unreleased: list[Offer] = []  # being given back, or Redis did not take them
        self._line_open = False  # a prompt waits on the last line of the screen
        self._ui: asyncio.Task[None] | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._blocking_stdin: tuple[int, bool] | None = None  # (fd, was it blocking)

    @property
    def by(self) -> str:
        if self.options.by:
            return self.options.by
        try:
            return f"console:{getpass.getuser()}"
        except (OSError, KeyError):  # no login name in a bare container
            return "console"

    # --- lifecycle -------------------------------------------------------------------

    async def start(self, group: GroupHandle) -> None:
        await super().start(group)
        if self._reader is None:
            self._reader = await self._stdin_reader()  # before the group is live
        self._ui = asyncio.create_task(self._ui_loop(), name="askq-console-ui")

    async def stop(self) -> None:
        """Give back what this console showed, as when its input ends: a replica that
        stops leaves nobody to answer its claims here (unlike a Slack replica's, whose
        messages any replica can take the click for)."""
        self._closed = True  # decline whatever is still offered meanwhile
        held = self._take_held()  # before the UI task's cleanup forgets what is on screen
        if self._ui is not None:
            self._ui.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ui
        await self._pass_on(held, "stopping")
        if self._transport is not None:
            self._transport.close()
        if self._blocking_stdin is not None:
            # connect_read_pipe made the terminal non-blocking; the shell shares it.
            fd, blocking = self._blocking_stdin
            with contextlib.suppress(OSError):
                os.set_blocking(fd, blocking)

    async def _stdin_reader(self) -> asyncio.StreamReader:
        """A reader of this process's standard input; CONFIG_ERROR (one line, before the
        group registers) when nobody can type answers into it."""
        problem = _stdin_problem()
        if problem is None:
            try:
                return await self._read_stdin()
            except Exception as exc:  # noqa: BLE001 - one line, never a traceback
                problem = f"standard input cannot be read ({type(exc).__name__}: {exc})"
        raise AskError(ErrorCode.CONFIG_ERROR, f"console: {problem}. {_STDIN_HELP}")

    async def _read_stdin(self) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        fd = sys.stdin.fileno()
        if _loop_can_watch(loop, fd):  # a terminal, a pipe, a socket
            with contextlib.suppress(ValueError, OSError):
                self._blocking_stdin = (fd, os.get_blocking(fd))
                self._transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
                )
                return reader
        # What the event loop cannot watch (a regular file: `< answers.txt`) is read in
        # a thread. Asking first matters: connect_read_pipe takes some such inputs and
        # then fails only in a callback, leaving a reader that never gets a line or EOF.
        threading.Thread(
            target=_pump, args=(loop, reader), name="askq-console-stdin", daemon=True
        ).start()
        return reader

    # --- the runtime's side ----------------------------------------------------------

    async def decide(self, offer: Offer) -> bool:
        return not self._closed and not self._input_exhausted()

    def _input_exhausted(self) -> bool:
        """The input ended (every line before the end read) or failed: nothing more
        will be typed, so an offer claimed now would only be given back."""
        reader = self._reader
        return reader is not None and (reader.at_eof() or reader.exception() is not None)

    async def _release(self, offer: Offer) -> bool:
        """Give one claim back; False when Redis did not take it back."""
        try:
            await self.group.release(offer.request_id)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                return True  # settled or gone meanwhile: not ours either way
            log.warning("could not release %s: %s", offer.request_id, exc)
            return False
        except Exception:  # noqa: BLE001 - the others still get released
            log.exception("could not release %s", offer.request_id)
            return False
        return True

    async def _release_all(self, offers: list[Offer]) -> list[Offer]:
        """Give back every claim of `offers` at once, waiting at most RELEASE_WITHIN;
        returns those Redis did not take back."""
        if not offers:
            return []
        tasks = {asyncio.create_task(self._release(offer)): offer for offer in offers}
        done, pending = await asyncio.wait(tasks, timeout=RELEASE_WITHIN)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [offer for task, offer in tasks.items() if task not in done or not task.result()]

    def _take_held(self) -> list[Offer]:
        """What this console holds, no longer its to show: the request on screen (unless
        retracted), the queue, and what it is still giving back."""
        current = self._current
        on_screen = [current] if current is not None and not self._withdrawn else []
        held = [*self._unreleased, *on_screen, *self._queue.values()]
        self._queue.clear()
        return list({offer.request_id: offer for offer in held}.values())

    async def _pass_on(self, held: list[Offer], why: str) -> None:
        """Give `held` back and say so. Until Redis confirms, they stay `_unreleased`,
        so a stop that interrupts this gives them back itself."""
        if not held:
            return
        log.info("console %s; releasing %d request(s)", why, len(held))
        self._unreleased = held
        self._unreleased = left = await self._release_all(held)
        message = f"{why}; {len(held) - len(left)} request(s) passed on"
        if left:
            message += f", {len(left)} could not be (Redis unreachable?)"
        self._say(Text(message, style="red" if left else "yellow"))

    async def present(self, offer: Offer) -> None:
        if self._closed:  # a claim recovered after the input closed
            await self._release(offer)
            return
        current = self._current
        if offer.request_id in self._queue or (current and current.request_id == offer.request_id):
            return  # recovered after a reconnect: already queued or on screen
        self._queue[offer.request_id] = offer
        self._arrived.set()

    async def retract(self, retraction: Retraction) -> None:
        offer = self._queue.pop(retraction.request_id, None)
        if offer is not None:
            self._say_retracted(offer, retraction)
            return
        current = self._current
        if current is None or current.request_id != retraction.request_id:
            return
        self._withdrawn = True
        self._say_retracted(current, retraction)
        if self._prompt is not None:
            self._prompt.cancel()

    async def remind(self, offer: Offer) -> None:
        self._say(Text(f"⏰ {_headers(offer)}: still waiting for your answer", style="yellow"))

    # --- the UI task -----------------------------------------------------------------

    async def _ui_loop(self) -> None:
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            request_id = next(iter(self._queue))
            self._current = self._queue.pop(request_id)
            self._withdrawn = False
            try:
                await self._serve(self._current)
            except _InputClosed as closed:
                # Nobody can answer here any more: give every claim back so the waterfall
                # moves on, and decline what comes next.
                self._closed = True
                await self._pass_on(self._take_held(), closed.why)
                while self._unreleased:
                    await asyncio.sleep(RELEASE_RETRY)
                    self._unreleased = await self._release_all(self._unreleased)
                return
            finally:
                self._current = None

    async def _serve(self, offer: Offer) -> None:
        """Ask every question of the request, submit, and re-ask if the answer is refused."""
        self._intro(offer)
        while True:
            prompt = asyncio.create_task(self._collect(offer))
            self._prompt = prompt
            try:
                await asyncio.wait({prompt})
            finally:
                self._prompt = None
                prompt.cancel()  # only does something when this task itself is cancelled
            if prompt.cancelled() or self._withdrawn:
                if not prompt.cancelled():
                    prompt.exception()  # retrieved, so asyncio does not warn about it
                return
            answers = prompt.result()  # raises _InputClosed
            try:
                await self.group.answer(offer.request_id, answers, by=self.by)
            except AskError as exc:
                refusal = await self._refusal(offer, exc)
                self._say(Text(f"✗ {_headers(offer)}: {visible(refusal)}", style="red"))
                if exc.code in FINAL_REFUSALS:  # no longer ours: say so and move on
                    return
                continue  # INVALID_REQUEST, Redis down: the person may answer again
            except Exception:
                log.exception("could not submit the answer to %s", offer.request_id)
                self._say(Text(f"✗ {_headers(offer)}: could not submit; answer again", style="red"))
                continue
            self._say(Text(f"✓ {_headers(offer)}: answered", style="green"))
            return

    async def _refusal(self, offer: Offer, exc: AskError) -> str:
        """Why the answer was refused: who answered first, as a person says it."""
        if exc.code is ErrorCode.ALREADY_SETTLED:
            try:
                settlement = await self.group.settlement(offer.request_id)
            except AskError:
                return exc.message
            if settlement is not None and settlement.state == "ANSWERED":
                return f"already {answered_by(settlement.by)}: your answer was not recorded"
        return exc.message

    async def _collect(self, offer: Offer) -> list[dict[str, Any]]:
        answers = []
        for index, question in enumerate(offer.questions):
            self._show(question, index, len(offer.questions))
            while True:
                try:
                    answer = await self._ask(question)
                except _Invalid as exc:
                    self._say(Text(f"  {exc}", style="red"))
                    continue
                answers.append({"id": question.id, **answer})
                break
        return answers

    async def _ask(self, question: Question) -> dict[str, Any]:
        if not question.options:
            return {"selected": [], "custom": await self._text("your answer > ")}
        n = len(question.options)
        other = n + 1
        if question.multi_select:
            line = await self._readline(f"choose any of 1-{other}, comma-separated > ")
        else:
            line = await self._readline(f"choose 1-{other} > ")
        picks = _parse_numbers(line, other)
        if not question.multi_select and len(picks) != 1:
            raise _Invalid(f"type one number from 1 to {other}")
        selected = [question.options[i - 1].label for i in sorted(set(picks)) if i != other]
        if other not in picks:
            return {"selected": selected}
        what = "your answer"
        if question.action is not None:
            what = "a reason to reject, or edited arguments as JSON"
        custom = await self._text(f"{OTHER[:-1]}: {what} > ")
        # A single-select custom answer replaces the choice; a multi-select one adds to it.
        return {"selected": selected if question.multi_select else [], "custom": custom}

    async def _text(self, prompt: str) -> str:
        while True:
            text = (await self._readline(prompt)).strip()
            if not text:
                self._say(Text("  type an answer (it cannot be empty)", style="red"))
            elif len(text) > MAX_CUSTOM:
                self._say(Text(f"  too long: at most {MAX_CUSTOM} characters", style="red"))
            else:
                return text

    async def _readline(self, prompt: str) -> str:
        assert self._reader is not None
        self.console.print(Text(prompt, style="bold"), end="")
        self.console.file.flush()
        self._line_open = True
        try:
            raw = await self._reader.readline()
        except Exception as exc:  # noqa: BLE001 - an input that fails is an input that ended
            raise _InputClosed(f"input unreadable ({type(exc).__name__}: {exc})") from exc
        if not raw:
            raise _InputClosed
        self._line_open = False  # the line the person typed ended it
        return raw.decode(errors="replace").rstrip("\r\n")

    # --- output ----------------------------------------------------------------------

    def _say(self, text: RenderableType) -> None:
        if self._line_open:  # the prompt was cut short (end of input, retracted, stopping)
            self._line_open = False
            self.console.print()
        self.console.print(text, highlight=False)

    def _intro(self, offer: Offer) -> None:
        agent, turn = visible(offer.caller.agent_id), visible(offer.caller.turn_id)
        self._say(Text(f"\n? agent {agent} asks (turn {turn})", style="dim"))

    def _show(self, question: Question, index: int, total: int) -> None:
        self._say(self._question(question, index, total))
        if question.options:
            self._say(_options(question))

    def _question(self, question: Question, index: int, total: int) -> Table:
        """`[Header] (1/2) Question text`, the text in a column of its own: its own
        lines and wrapped ones continue indented under it, in its style, never at the
        margin where option numbers stand."""
        chip = Text.assemble((f"[{visible(question.header)}]", "bold cyan"))
        if total > 1:
            chip.append(f" ({index + 1}/{total})")
        grid = Table.grid(padding=(0, 1))
        # A header full of escapes must not squeeze the question into a sliver. Long
        # words fold: the default ellipsis would hide the rest of the text.
        widest = max(self.console.width // 3, 12)
        grid.add_column(min_width=QUESTION_INDENT - 1, max_width=widest, overflow="fold")
        grid.add_column(overflow="fold")
        text = question.question if question.action is None else _approval(question.action)
        grid.add_row(chip, Text(visible(text, multiline=True), style="bold"))
        return grid

    def _say_retracted(self, offer: Offer, retraction: Retraction) -> None:
        reason = visible(retraction.reason)
        self._say(Text(f"✗ {_headers(offer)}: retracted — {reason}", style="yellow"))


_STDIN_HELP = (
    "Nobody can type answers here: run it in a terminal (docker: `docker run -it`),"
    " give it a pipe or a file of answers, or run another answerer (e.g. `askq worker auto`)"
)


def _stdin_problem() -> str | None:
    """Why standard input cannot be where a person types answers, or None if it can:
    a terminal, a pipe or socket, or a regular file of answers."""
    if sys.stdin is None:  # fd 0 was closed when Python started
        return "standard input is closed"
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):  # closed since; or not backed by a file descriptor
        return "standard input is closed"
    if sys.stdin.isatty() or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISREG(mode):
        return None
    if stat.S_ISCHR(mode) and _is_devnull(sys.stdin.fileno()):
        return "standard input is /dev/null"
    return "standard input is not a terminal, a pipe or a file"


def _is_devnull(fd: int) -> bool:
    try:
        return os.fstat(fd).st_rdev == os.stat(os.devnull).st_rdev
    except OSError:
        return False


def _loop_can_watch(loop: asyncio.AbstractEventLoop, fd: int) -> bool:
    """Whether the event loop can wait for `fd` to be readable (epoll refuses regular
    files and devices such as /dev/null; some loops watch nothing but sockets)."""
    try:
        loop.add_reader(fd, lambda: None)
    except (OSError, ValueError, NotImplementedError):
        return False
    loop.remove_reader(fd)
    return True


def _pump(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    """Feed standard input to `reader`, line by line, from a thread. A read that fails
    reaches the reader as its exception, so the console treats it as the input's end."""

    def feed(step: Callable[..., None], *args: Any) -> bool:
        try:
            loop.call_soon_threadsafe(step, *args)
        except RuntimeError:  # the loop closed: the worker is exiting
            return False
        return True

    try:
        for line in sys.stdin.buffer:
            if not feed(reader.feed_data, line):
                return
    except Exception as exc:  # noqa: BLE001 - EIO, EISDIR, ...: no more input either way
        feed(reader.set_exception, exc)
        return
    feed(reader.feed_eof)


def _options(question: Question) -> Table:
    """`  1. label — description` lines, numbers in a column of their own, so a long
    label wraps under its own text rather than at the margin where numbers stand."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")  # not cut with an ellipsis: all of a label is seen
    for number, option in enumerate(question.options, start=1):
        line = Text(visible(option.label))
        if option.description:
            line.append(f" — {visible(option.description)}", style="dim")
        grid.add_row(Text(f"  {number}."), line)
    grid.add_row(Text(f"  {len(question.options) + 1}."), Text(OTHER, style="italic"))
    return grid


def _approval(action: ToolAction) -> str:
    """An approval as one block: the tool, the agent's reason and all of the arguments
    (the question's own text, written for every channel, may cut them short)."""
    lines = [f"Run {action.tool}?"]
    if action.reason:
        lines.append(f"Reason: {visible(action.reason)}")  # one line: it forges none
    lines += ["Arguments:", json.dumps(action.arguments, indent=2, ensure_ascii=False)]
    lines.append(f"({OTHER} a reason to reject, or the edited arguments as one JSON object)")
    return "\n".join(lines)


def _headers(offer: Offer) -> str:
    return ", ".join(dict.fromkeys(visible(q.header) for q in offer.questions))


def _parse_numbers(line: str, other: int) -> list[int]:
    """`1,3` / `1 3` / `o` into option numbers; raise _Invalid naming the bad token."""
    picks = []
    for token in filter(None, re.split(r"[,\s]+", line.strip())):
        if token.lower() in {"o", "other"}:
            picks.append(other)
        elif token.isdigit() and 1 <= int(token) <= other:
            picks.append(int(token))
        else:
            raise _Invalid(f"{token!r} is not a choice: type numbers from 1 to {other}")
    return picks
