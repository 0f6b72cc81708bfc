"""One answerer replica of the soak's three tiers, as its own process.

    python -m bench._soak_worker --tier 0|1|2 --consumer NAME   (ASKQ_* set)

Requests carry a scope `route`:
- tier 0, group `rules` (priority 0): accepts `route=rules` and answers at once;
  declines everything else.
- tier 1, group `humans` (priority 10, escalation after ESCALATE s): declines
  `route=skip`; accepts the rest. It holds `route=hold` (never answers: the ask's
  timeout settles it); for the others it answers after a random 0-200 ms, or, one time
  in ten, passes (releases), so the request falls through to tier 2.
- tier 2, group `fallback` (priority 20): accepts and answers everything at once.

An answer that fails for a reason that may pass (Redis unreachable) is tried again,
as a human whose click failed clicks again; one refused for good is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys

from askq import (
    FINAL_REFUSALS,
    Answerer,
    AnswererOptions,
    AnswererRuntime,
    AskError,
    Offer,
    Seam,
    Settings,
)

GROUPS = {0: ("rules", 0), 1: ("humans", 10), 2: ("fallback", 20)}
ESCALATE = 5.0
PASS_RATE = 0.1


class SoakAnswerer(Answerer[AnswererOptions]):
    kind = "soak"

    def __init__(self, tier: int) -> None:
        super().__init__()
        self.tier = tier
        self._tasks: set[asyncio.Task[None]] = set()

    async def decide(self, offer: Offer) -> bool:
        route = offer.scope.get("route", "")
        if self.tier == 0:
            return route == "rules"
        if self.tier == 1:
            return route != "skip"
        return True

    async def present(self, offer: Offer) -> None:
        route = offer.scope.get("route", "")
        if self.tier == 1:
            if route == "hold":
                return
            if random.random() < PASS_RATE:
                await self.group.release(offer.request_id)
                return
            delay = random.uniform(0, 0.2)
        else:
            delay = 0.0
        task = asyncio.create_task(self._answer(offer, delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, offer: Offer, delay: float) -> None:
        await asyncio.sleep(delay)
        answers = [{"id": q.id, "selected": q.recommended} for q in offer.questions]
        for _ in range(600):
            try:
                await self.group.answer(offer.request_id, answers, by=f"tier{self.tier}")
                return
            except AskError as exc:
                if exc.code in FINAL_REFUSALS:
                    return
            await asyncio.sleep(0.1)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tier", type=int, choices=sorted(GROUPS), required=True)
    parser.add_argument("--consumer", required=True)
    args = parser.parse_args()
    group, priority = GROUPS[args.tier]

    async with Seam(settings=Settings()) as seam:
        runtime = AnswererRuntime(
            seam,
            SoakAnswerer(args.tier),
            group=group,
            priority=priority,
            consumer=args.consumer,
            escalate_after=ESCALATE if args.tier == 1 else None,
        )
        await runtime.serve(
            on_ready=lambda: print(f"{group} {args.consumer}: ready", file=sys.stderr, flush=True),
            timeout=30,
        )


if __name__ == "__main__":
    asyncio.run(main())
