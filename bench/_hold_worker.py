"""An answerer group `hold` that accepts every offer and never answers by itself: the
claim is held as a human's would be, and the bench answers for the group (any process
may) or aborts the turn. Run as `python -m bench._hold_worker` with ASKQ_* set."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from askq import AnswererRuntime, Seam, Settings
from askq.answerers.memory import MemoryAnswerer


class Holder(MemoryAnswerer):
    """MemoryAnswerer without its queues of everything seen (10,000 offers held)."""

    async def decide(self, offer):  # type: ignore[no-untyped-def]
        return True

    async def present(self, offer):  # type: ignore[no-untyped-def]
        return None

    async def retract(self, retraction):  # type: ignore[no-untyped-def]
        return None


async def main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Seam(settings=Settings()) as seam:
        runtime = AnswererRuntime(seam, Holder(), group="hold", priority=0)
        task = await runtime.start()
        print("hold: ready", file=sys.stderr, flush=True)
        await stop.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


if __name__ == "__main__":
    asyncio.run(main())
