"""An answerer replica as its own process, for the fault-injection tests.

    python tests/fault_worker.py --group G --consumer C --mode answer|hold|failsend
        [--priority N] [--delay S] [--escalate-after S] [--remind-after S]

Modes: `answer` accepts every offer and answers it (its recommended options) `--delay`
seconds after it is presented; `hold` accepts and never answers (a human who has not
answered yet); `failsend` presents through a retried send that raises every time, and
gives the question back when the send runs out of tries.

It writes one line per thing it does to stderr, which the tests read:
`ready`, `presented <id>`, `answered <id>`, `refused <id> <code>`, `retry <id> <code>`,
`retracted <id> <state> <code> <by>`, `sendfail <id>`, `gaveup <id>`.
Settings (Redis URL, prefix, TTLs) come from ASKQ_* variables.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from askq import (
    FINAL_REFUSALS,
    Answerer,
    AnswererOptions,
    AnswererRuntime,
    AskError,
    Offer,
    Retraction,
    Seam,
    Settings,
)


def say(*parts: object) -> None:
    # One write per line: print() writes each part on its own, and with an unbuffered
    # stderr (PYTHONUNBUFFERED) the test could read "presented" before its id.
    sys.stderr.write(" ".join(map(str, parts)) + "\n")
    sys.stderr.flush()


class FaultAnswerer(Answerer[AnswererOptions]):
    kind = "fault"
    send_tries = 2

    def __init__(self, mode: str, delay: float) -> None:
        super().__init__()
        self.mode = mode
        self.delay = delay
        self.uses_sends = mode == "failsend"  # type: ignore[misc]
        self._tasks: set[asyncio.Task[None]] = set()

    async def present(self, offer: Offer) -> None:
        say("presented", offer.request_id)
        if self.mode == "answer":
            task = asyncio.create_task(self._answer_later(offer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif self.mode == "failsend":
            await self.group.send("post", request_id=offer.request_id)

    async def _answer_later(self, offer: Offer) -> None:
        await asyncio.sleep(self.delay)
        answers = [{"id": q.id, "selected": q.recommended} for q in offer.questions]
        while True:  # as a human whose click failed clicks again
            try:
                await self.group.answer(offer.request_id, answers, by=f"fault:{self.group.name}")
            except AskError as exc:
                if exc.code in FINAL_REFUSALS:
                    say("refused", offer.request_id, exc.code.value)
                    return
                say("retry", offer.request_id, exc.code.value)
                await asyncio.sleep(0.2)
                continue
            say("answered", offer.request_id)
            return

    async def post(self, request_id: str) -> None:
        say("sendfail", request_id)
        raise ConnectionError("the channel is down")

    async def send_failed(self, job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        say("gaveup", kwargs["request_id"])
        await self.group.release(kwargs["request_id"])

    async def retract(self, retraction: Retraction) -> None:
        say(
            "retracted",
            retraction.request_id,
            retraction.state,
            retraction.code or "-",
            (retraction.by or "-").replace(" ", "_"),
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--mode", choices=["answer", "hold", "failsend"], default="answer")
    parser.add_argument("--priority", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--escalate-after", type=float, default=None)
    parser.add_argument("--remind-after", type=float, default=None)
    parser.add_argument("--decision-window", type=float, default=None)
    args = parser.parse_args()

    async with Seam(settings=Settings()) as seam:
        runtime = AnswererRuntime(
            seam,
            FaultAnswerer(args.mode, args.delay),
            group=args.group,
            priority=args.priority,
            consumer=args.consumer,
            escalate_after=args.escalate_after,
            remind_after=args.remind_after,
            decision_window=args.decision_window,
        )
        await runtime.serve(on_ready=lambda: say("ready"), timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
