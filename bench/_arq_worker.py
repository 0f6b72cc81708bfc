"""An arq worker doing the same job as the auto answerer (answer the question with its
first option), with a JSON serializer. `python -m bench._arq_worker URL QUEUE POLL_DELAY`
(POLL_DELAY "default" leaves arq's own, 0.5 s)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from arq.connections import RedisSettings
from arq.worker import Worker, func


def dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


async def answer(ctx: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "answers": [
            {"id": q["id"], "selected": [q["options"][0]["label"]]} for q in payload["questions"]
        ]
    }


async def ready(ctx: dict[str, Any]) -> None:
    print("arq: ready", file=sys.stderr, flush=True)


async def main(url: str, queue: str, poll_delay: str) -> None:
    extra: dict[str, Any] = {} if poll_delay == "default" else {"poll_delay": float(poll_delay)}
    worker = Worker(
        functions=[func(answer, name="answer")],
        redis_settings=RedisSettings.from_dsn(url),
        queue_name=queue,
        on_startup=ready,
        handle_signals=False,
        job_serializer=dumps,
        job_deserializer=json.loads,
        keep_result=60,
        log_results=False,
        **extra,
    )
    await worker.main()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
