"""The README's webhook receiver, run exactly as printed (extracted from README.md, so
it cannot rot) against a real `askq worker webhook` process: it verifies askq's
signature with the standardwebhooks package and answers through the callback; the
agent resumes with its answer. A POST not signed with the secret is refused by it."""

from __future__ import annotations

import asyncio
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from conftest import ROOT, SEED, YES_JSON, Backend, _free_port
from webhook_receiver import new_secret

from askq import Caller, Seam

README = ROOT / "README.md"
BLOCK = re.compile(r"```python\n(# receiver\.py.*?)```", re.DOTALL)


def receiver_source() -> str:
    section = README.read_text().split("## Signed webhooks", 1)[1].split("\n## ", 1)[0]
    [source] = BLOCK.findall(section)
    return source


@contextmanager
def process(argv: list[str], env: dict[str, str], ready: str | None) -> Iterator[None]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        if ready is not None:
            assert proc.stderr is not None
            found, _, _ = select.select([proc.stderr], [], [], 30)
            assert found, f"{argv} did not start within 30 s"
            line = proc.stderr.readline()
            assert line.endswith(ready), line + proc.stderr.read()
        yield
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


async def test_the_readme_receiver_answers_through_a_real_worker(
    backend: Backend, seam: Seam, tmp_path: Path
) -> None:
    source = receiver_source()
    assert 15 <= len(source.strip().splitlines()) <= 30  # the README's "20-line" receiver
    script = tmp_path / "receiver.py"
    script.write_text(source)
    secret = new_secret()
    port, callback = _free_port(), _free_port()
    env = backend.env(
        ASKQ_WEBHOOK_SECRET=secret,
        ASKQ_WEBHOOK_URL=f"http://127.0.0.1:{port}/askq",
        ASKQ_WEBHOOK_HTTP_PORT=str(callback),
        PORT=str(port),
    )
    with (
        process([sys.executable, str(script)], env, None),
        process([sys.executable, "-m", "askq", "worker", "webhook"], env, ": ready\n"),
    ):
        await asyncio.to_thread(wait_listening, port)
        async with httpx.AsyncClient() as client:
            forged = await client.post(
                f"http://127.0.0.1:{port}/askq",
                content=b'{"type":"question.asked"}',
                headers={
                    "webhook-id": "msg_x",
                    "webhook-timestamp": str(int(time.time())),
                    "webhook-signature": "v1,AAAA",
                },
            )
        assert forged.status_code == 401
        caller = Caller(agent_id="agent-7", turn_id="turn-1")
        ids: list[str] = []
        answers = await asyncio.wait_for(seam.ask(SEED, caller, on_published=ids.append), 30)
        assert answers.to_json() == YES_JSON
        settlement = await seam.settlement(ids[0])
        assert settlement is not None and settlement.by == "webhook:bot"
