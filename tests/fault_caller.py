"""A caller process for the fault-injection tests: many asks in flight at once.

    python tests/fault_caller.py -n 100 --spread 3 --key-prefix run1

Ask `i` uses the idempotency key `<key-prefix>-<i>` and starts at a random moment in
the first `--spread` seconds. An ask that fails REDIS_UNAVAILABLE (Redis went away
while it was being published) is asked again with the same key, as an agent re-running
its tool call would: it reattaches to the request if it was published, so the human is
never asked twice. Prints one JSON line per ask once it has its outcome:
`{"i", "key", "outcome", "retries", "started", "ended"}` (times: time.monotonic(),
which every process on the machine shares), and `done` on stderr at the end.
Settings come from ASKQ_* variables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

from askq import AskError, Caller, ErrorCode, Seam, Settings
from askq.cli._demo import SEED_QUESTION

GIVE_UP_AFTER = 60.0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=100)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--key-prefix", default="fault")
    args = parser.parse_args()

    async with Seam(settings=Settings()) as seam:

        async def one(i: int) -> None:
            await asyncio.sleep(random.uniform(0, args.spread))
            key = f"{args.key_prefix}-{i}"
            caller = Caller(agent_id=f"agent-{i}", turn_id=f"turn-{i}")
            started, retries = time.monotonic(), 0
            while True:
                try:
                    answers = await seam.ask(SEED_QUESTION, caller, idempotency_key=key)
                    outcome = "ANSWERED"
                except AskError as exc:
                    if (
                        exc.code == ErrorCode.REDIS_UNAVAILABLE
                        and time.monotonic() - started < GIVE_UP_AFTER
                    ):
                        retries += 1
                        await asyncio.sleep(0.2)
                        continue
                    outcome = exc.code.value
                    answers = None
                break
            line = {
                "i": i,
                "key": key,
                "outcome": outcome,
                "answers": answers.to_json() if answers is not None else None,
                "retries": retries,
                "started": started,
                "ended": time.monotonic(),
            }
            print(json.dumps(line), flush=True)

        await asyncio.gather(*(one(i) for i in range(args.n)))
    print("done", file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
