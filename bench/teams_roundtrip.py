"""The Teams channel's round trip, against the stand-in of Microsoft's side
(tests/teams_standin.py: the token authority, the Bot Framework's keys, the Bot
Connector API) and a real redis-server.

    python -m bench.teams_roundtrip            # 200 questions
    python -m bench.teams_roundtrip --quick    # 20

One `askq worker teams` process (its own bot token, its messaging endpoint on a
loopback port). For each question, one after the other: the ask; the card posted to
the stand-in's Bot Connector (`POST .../activities`); the stand-in at once POSTs the
click (an `adaptiveCard/action` invoke signed with its key) to the worker's endpoint;
the agent resumes with the answer. Rows: ask → card at Teams, card → agent resumes
(the click's authentication, the answer, the invoke response), and the whole; median
and p99. Needs the dev extra (the stand-in is the tests').
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from . import _procs, _sequential
from ._common import ROOT, Latency, new_prefix
from ._redis_server import free_port

sys.path.insert(0, str(ROOT / "tests"))

from teams_standin import (  # noqa: E402 - the tests' stand-in, found through sys.path
    ALICE,
    APP_ID,
    APP_PASSWORD,
    TENANT,
    Call,
    Posted,
    TeamsStandIn,
    card_of,
    click,
)


async def measure(url: str, n: int) -> list[tuple[str, Latency]]:
    """Each leg's latency over n sequential questions (`python -m bench`'s channels
    section reads them too)."""
    prefix = new_prefix("teams")
    with tempfile.TemporaryDirectory() as tmp:
        standin = TeamsStandIn(Path(tmp))
        await standin.start()
        port = free_port()
        environ = _procs.env(
            url,
            prefix,
            teams_app_id=APP_ID,
            teams_app_password=APP_PASSWORD,
            teams_tenant_id=TENANT,
            teams_routes=json.dumps({"*": "19:bench@thread.tacv2"}),
            teams_allowlist=ALICE.object_id,
            teams_service_url=standin.service_url,
            teams_login_url=standin.login_url,
            teams_openid_url=standin.openid_url,
            teams_http_port=port,
        )
        environ["REQUESTS_CA_BUNDLE"] = str(standin.ca_file)  # MSAL trusts the stand-in
        worker = _procs.Child("teams", [*_procs.ASKQ, "worker", "teams"], environ)
        await asyncio.to_thread(worker.wait_ready)
        posted_at: dict[str, float] = {}
        clicks: set[asyncio.Task[object]] = set()

        def on_card(call: Call) -> None:  # Teams shows the card; Alice clicks at once
            posted_at["t"] = time.perf_counter()
            assert call.activity_id is not None
            posted = Posted(call.conversation, call.activity_id, card_of(call.body))
            invoke = click(standin, posted, ALICE, posted.button("Yes"))
            task = asyncio.create_task(standin.send(port, invoke))
            clicks.add(task)
            task.add_done_callback(clicks.discard)

        standin.on_create = on_card
        to_card: list[float] = []
        to_answer: list[float] = []
        whole: list[float] = []

        async def after(i: int, start: float, end: float) -> None:
            if i >= 0:
                to_card.append(posted_at["t"] - start)
                to_answer.append(end - posted_at["t"])
                whole.append(end - start)

        try:
            await _sequential.ask_each(url, prefix, n, after)
        finally:
            await asyncio.to_thread(worker.stop)
            await standin.stop()
            await _sequential.wipe_prefix(url, prefix)
    rows = [
        ("ask → card posted to Teams", Latency.of(to_card)),
        ("card → click answered, agent resumes", Latency.of(to_answer)),
        ("Teams round trip (ask → answer)", Latency.of(whole)),
    ]
    return rows


async def run(url: str, n: int) -> None:
    _sequential.report(await measure(url, n), n, 40, "sequential questions")


def main() -> None:
    _sequential.main(__doc__, run, n=200, quick=20)


if __name__ == "__main__":
    main()
