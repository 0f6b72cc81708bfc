"""The webhook channel's round trip, against a receiver on 127.0.0.1
(tests/webhook_receiver.py: verifies each POST with the standardwebhooks package) and
a real redis-server.

    python -m bench.webhook_roundtrip            # 200 questions
    python -m bench.webhook_roundtrip --quick    # 20

One `askq worker webhook` process (its callback on a loopback port). For each question,
one after the other: the ask; the signed `question.asked` POST reaching the receiver
(verified there); the receiver at once POSTs the answer to the callback with the
question's token; the agent resumes with the answer. Rows per leg: ask → POST received,
answer POSTed → callback's reply (token check, validation, the answer), answer POSTed →
agent resumes, and the whole; median and p99. Needs the dev extra (the receiver is the
tests').
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx

from . import _procs, _sequential
from ._common import ROOT, Latency, new_prefix
from ._redis_server import free_port

sys.path.insert(0, str(ROOT / "tests"))

from webhook_receiver import Received, Receiver, answer  # noqa: E402 - the tests' receiver

YES = [{"id": "cleanup", "selected": ["Yes, delete them (Recommended)"]}]


async def measure(url: str, n: int) -> list[tuple[str, Latency]]:
    """Each leg's latency over n sequential questions (`python -m bench`'s channels
    section reads them too)."""
    prefix = new_prefix("webhook")
    receiver = Receiver()
    await receiver.start()
    port = free_port()
    environ = _procs.env(
        url,
        prefix,
        webhook_url=receiver.url,
        webhook_secret=receiver.secret,
        webhook_http_port=port,
    )
    worker = _procs.Child("webhook", [*_procs.ASKQ, "worker", "webhook"], environ)
    await asyncio.to_thread(worker.wait_ready)
    times: dict[str, float] = {}
    http = httpx.AsyncClient()  # the receiver's client, kept open as a service would
    answering: set[asyncio.Task[None]] = set()

    async def respond(asked: Received) -> None:
        times["posted"] = time.perf_counter()
        status, body = await answer(asked, YES, by="bench", client=http)
        times["replied"] = time.perf_counter()
        assert status == 200, body

    def on_post(received: Received) -> None:  # the receiver answers at once
        if received.type != "question.asked":
            return
        assert received.event is not None, "the signature did not verify"
        times["received"] = time.perf_counter()
        task = asyncio.create_task(respond(received))
        answering.add(task)
        task.add_done_callback(answering.discard)

    receiver.on_receive = on_post
    to_post: list[float] = []
    to_reply: list[float] = []
    to_resume: list[float] = []
    whole: list[float] = []

    async def after(i: int, start: float, end: float) -> None:
        await asyncio.gather(*answering)  # the callback's reply, timed in respond
        if i >= 0:
            to_post.append(times["received"] - start)
            to_reply.append(times["replied"] - times["posted"])
            to_resume.append(end - times["posted"])
            whole.append(end - start)

    try:
        await _sequential.ask_each(url, prefix, n, after)
    finally:
        await asyncio.to_thread(worker.stop)
        await http.aclose()
        await receiver.stop()
        await _sequential.wipe_prefix(url, prefix)
    rows = [
        ("ask → signed POST at the receiver", Latency.of(to_post)),
        ("answer POSTed → callback replied", Latency.of(to_reply)),
        ("answer POSTed → agent resumes", Latency.of(to_resume)),
        ("webhook round trip (ask → answer)", Latency.of(whole)),
    ]
    return rows


async def run(url: str, n: int) -> None:
    _sequential.report(await measure(url, n), n, 40, "sequential questions")


def main() -> None:
    _sequential.main(__doc__, run, n=200, quick=20)


if __name__ == "__main__":
    main()
