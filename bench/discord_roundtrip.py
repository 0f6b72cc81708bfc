"""The Discord channel's round trip, against the stand-in of Discord
(tests/discord_standin.py: the REST API, and interactions signed with an Ed25519 key
made for the run) and a real redis-server.

    python -m bench.discord_roundtrip            # 200 questions
    python -m bench.discord_roundtrip --quick    # 20

One `askq worker discord` process (its interactions endpoint on a loopback port). For
each question, one after the other: the ask; the message posted to the stand-in
(`POST /channels/{id}/messages`); the stand-in at once POSTs the click (a
MESSAGE_COMPONENT interaction, signed) to the worker's endpoint; the agent resumes with
the answer; the message is edited in place (`PATCH`, through the send queue). Rows:
ask → message at Discord, message → agent resumes (the signature check, the answer, the
deferred-update response), click → message edited, and the whole; median and p99.
Needs the dev extra (the stand-in is the tests').
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from . import _procs, _sequential
from ._common import ROOT, Latency, new_prefix
from ._redis_server import free_port

sys.path.insert(0, str(ROOT / "tests"))

from discord_standin import (  # noqa: E402 - the tests' stand-in, found through sys.path
    ALICE,
    APP,
    CHANNEL,
    Call,
    DiscordStandIn,
    Posted,
    click,
)


async def measure(url: str, n: int) -> list[tuple[str, Latency]]:
    """Each leg's latency over n sequential questions (`python -m bench`'s channels
    section reads them too)."""
    prefix = new_prefix("discord")
    standin = DiscordStandIn()
    await standin.start()
    port = free_port()
    environ = _procs.env(
        url,
        prefix,
        discord_application_id=APP.id,
        discord_public_key=APP.public_key,
        discord_bot_token=APP.token,
        discord_routes=json.dumps({"*": CHANNEL}),
        discord_allowlist=ALICE.id,
        discord_api_url=standin.api_url,
        discord_http_port=port,
    )
    worker = _procs.Child("discord", [*_procs.ASKQ, "worker", "discord"], environ)
    await asyncio.to_thread(worker.wait_ready)
    at: dict[str, float] = {}
    edited = asyncio.Event()
    clicks: set[asyncio.Task[object]] = set()

    def on_post(call: Call) -> None:  # Discord shows the message; Alice clicks at once
        at["posted"] = time.perf_counter()
        assert call.message_id is not None
        posted = Posted(call.channel, call.message_id, call.body)
        task = asyncio.create_task(standin.send(port, click(posted, ALICE, posted.button("Yes"))))
        clicks.add(task)
        task.add_done_callback(clicks.discard)

    def on_edit(call: Call) -> None:
        at["edited"] = time.perf_counter()
        edited.set()

    standin.on_post = on_post
    standin.on_edit = on_edit
    to_message: list[float] = []
    to_answer: list[float] = []
    to_edit: list[float] = []
    whole: list[float] = []

    async def after(i: int, start: float, end: float) -> None:
        await asyncio.wait_for(edited.wait(), 30)
        edited.clear()  # for the next question's edit
        if i >= 0:
            to_message.append(at["posted"] - start)
            to_answer.append(end - at["posted"])
            to_edit.append(at["edited"] - at["posted"])
            whole.append(end - start)

    try:
        await _sequential.ask_each(url, prefix, n, after)
    finally:
        await asyncio.to_thread(worker.stop)
        await standin.stop()
        await _sequential.wipe_prefix(url, prefix)
    rows = [
        ("ask → message posted to Discord", Latency.of(to_message)),
        ("message → click answered, agent resumes", Latency.of(to_answer)),
        ("message → edited in place", Latency.of(to_edit)),
        ("Discord round trip (ask → answer)", Latency.of(whole)),
    ]
    return rows


async def run(url: str, n: int) -> None:
    _sequential.report(await measure(url, n), n, 42, "sequential questions")


def main() -> None:
    _sequential.main(__doc__, run, n=200, quick=20)


if __name__ == "__main__":
    main()
