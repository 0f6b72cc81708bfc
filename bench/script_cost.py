"""Where the Redis time of an ask goes: the two scripts of a round trip, replayed.

    python -m bench.script_cost [-n 3000] [--redis-url URL]

Captures the `ask.lua` and `claim_answer.lua` calls of one real round trip (an auto
group in this process), then replays each n times on fresh request ids from one
client, with `INFO commandstats` reset around each batch: the server time of the
script (EVALSHA), the part of it spent inside the commands it calls (their own
commandstats rows), and the rest, which is Lua and the cost of each `redis.call`.
Beside them, the fixed cost of a script before it does anything: an empty script
given the same keys and arguments, the same with three keys and none, and the script
itself returning as soon as its shared code (common.lua, request.lua) is defined.
Server time is CPU time of the Redis thread: the load of other processes moves it far
less than it moves wall-clock figures.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

import redis
import redis.asyncio as aioredis

from askq import AnswererRuntime, Caller, Seam, Settings
from askq.answerers.auto import AutoAnswerer
from askq.redis._keys import Keys
from askq.redis._lua import load
from askq.redis._scripts import Scripts

from ._common import QUESTION, wipe
from ._redis_server import redis_url_or_own

Call = tuple[list[str], list[str]]


async def capture(url: str) -> tuple[str, Call, Call]:
    """One real ask and its claim_answer, as sent (keys, args); the group stays live."""
    calls: dict[str, Call] = {}
    send = Scripts._send

    async def recording(self: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        calls[name] = (list(keys), [str(a) for a in args])
        return await send(self, name, keys, args)

    prefix = f"bench-sc-{uuid.uuid4().hex[:6]}"
    Scripts._send = recording  # type: ignore[method-assign]
    try:
        async with Seam(settings=Settings(redis_url=url, prefix=prefix)) as seam:
            # No rules: the policy answers every question with its recommended option.
            runtime = AnswererRuntime(seam, AutoAnswerer(), group="auto", priority=0)
            task = await runtime.start()
            caller = Caller(agent_id="bench", turn_id=uuid.uuid4().hex)
            await seam.ask(QUESTION, caller)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        Scripts._send = send  # type: ignore[method-assign]
    return prefix, calls["ask"], calls["claim_answer"]


class Replay:
    def __init__(self, client: redis.Redis, prefix: str, ask: Call, claim: Call) -> None:
        self.r, self.ask, self.claim = client, ask, claim
        self.request_id = ask[1][3]  # args: tier_prefix settled_ttl audit_maxlen request_id
        self.offer_arg = load("claim_answer").args.index("offer")
        # The group left as the capture ended: live again for the replays.
        client.zadd(Keys(prefix).live, {"auto": 2**50})

    def _on(self, call: Call, request_id: str) -> tuple[list[str], list[str]]:
        keys, args = call
        return (
            [k.replace(self.request_id, request_id) for k in keys],
            [a.replace(self.request_id, request_id) for a in args],
        )

    def measure(self, sha_ask: str, sha_claim: str, n: int) -> dict[str, dict[str, float]]:
        ids = [uuid.uuid4().hex for _ in range(n)]
        entries: list[str] = []

        def ask(i: int) -> None:
            keys, args = self._on(self.ask, ids[i])
            reply = self.r.evalsha(sha_ask, len(keys), *keys, *args)
            entries.append(reply[2] if isinstance(reply, list) and len(reply) > 2 else "0-0")

        def claim(i: int) -> None:
            keys, args = self._on(self.claim, ids[i])
            args[self.offer_arg] = entries[i]
            self.r.evalsha(sha_claim, len(keys), *keys, *args)

        return {"ask": self._stats(ask, n), "claim_answer": self._stats(claim, n)}

    def _stats(self, step: Any, n: int) -> dict[str, float]:
        self.r.config_resetstat()
        for i in range(n):
            step(i)
        stats = self.r.info("commandstats")
        script = stats.pop("cmdstat_evalsha", {"usec": 0, "calls": 0})
        inner = {
            name[len("cmdstat_") :]: row
            for name, row in stats.items()
            if name not in ("cmdstat_config|resetstat", "cmdstat_info", "cmdstat_config")
        }
        return {
            "script": script["usec"] / n,
            "inner": sum(row["usec"] for row in inner.values()) / n,
            "calls": sum(row["calls"] for row in inner.values()) / n,
        }


def early_return(name: str) -> str:
    """The script, returning as soon as its shared code is defined."""
    text = load(name).text
    marker = "local request_id = A.request_id"
    at = text.index(marker) + len(marker)
    return text[:at] + "\nif true then return {'X'} end\n" + text[at:]


async def _wipe(url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(url)
    await wipe(client, prefix)
    await client.aclose()


def run(url: str, n: int) -> None:
    prefix, ask, claim = asyncio.run(capture(url))
    client = redis.Redis.from_url(url, decode_responses=True)
    replay = Replay(client, prefix, ask, claim)
    full = replay.measure(
        client.script_load(load("ask").text), client.script_load(load("claim_answer").text), n
    )
    shared = replay.measure(
        client.script_load(early_return("ask")), client.script_load(early_return("claim_answer")), n
    )
    empty_sha = client.script_load("return {'X'}")
    empty = replay.measure(empty_sha, empty_sha, n)
    keys3 = ask[0][:3]
    client.config_resetstat()
    for _ in range(n):
        client.evalsha(empty_sha, 3, *keys3)
    bare = client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
    asyncio.run(_wipe(url, prefix))
    print(f"Server time per script call (INFO commandstats, n={n}, replayed from one client)")
    print(f"{'':38s} {'ask.lua':>12s} {'claim_answer':>13s}")

    def row(label: str, a: float, c: float, unit: str = "µs") -> None:
        print(f"  {label:36s} {a:9.1f} {unit:2s} {c:10.1f} {unit}")

    row("the script (EVALSHA)", full["ask"]["script"], full["claim_answer"]["script"])
    row("… inside the commands it calls", full["ask"]["inner"], full["claim_answer"]["inner"])
    row(
        "… Lua and redis.call's own cost",
        full["ask"]["script"] - full["ask"]["inner"],
        full["claim_answer"]["script"] - full["claim_answer"]["inner"],
    )
    row("redis.calls per script", full["ask"]["calls"], full["claim_answer"]["calls"], "")
    row(
        "returning once shared code is defined",
        shared["ask"]["script"] - shared["ask"]["inner"],
        shared["claim_answer"]["script"] - shared["claim_answer"]["inner"],
    )
    row("empty script, same keys and args", empty["ask"]["script"], empty["claim_answer"]["script"])
    row("empty script, 3 keys, no args", bare, bare)
    client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.script_cost", description=__doc__)
    parser.add_argument("-n", type=int, default=3000, help="replays of each script (default 3000)")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    args = parser.parse_args(argv)
    with redis_url_or_own(args.redis_url) as url:
        run(url, args.n)


if __name__ == "__main__":
    main()
