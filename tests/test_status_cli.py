"""`askq status` (groups, replicas and their heartbeats, sweepers, pending by state and
tier, failed sends; full ids at 80 columns; --watch) and `askq group set-priority`,
through the CLI against both backends."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from typing import Any

from conftest import SEED, Backend, running
from test_audit_cli import process, until
from test_processes import ASKQ, askq

from askq import Caller, Offer
from askq.answerers.memory import MemoryAnswerer

LONG_REPLICA = "rules-replica-with-a-long-name-0123456789abcdef"


class FlakyChannel(MemoryAnswerer):
    """Shows each question through a send that always fails (its channel is down)."""

    uses_sends = True
    send_tries = 1

    async def present(self, offer: Offer) -> None:
        await super().present(offer)
        await self.group.send("post_question", request_id=offer.request_id)

    async def post_question(self, request_id: str) -> None:
        raise RuntimeError(f"channel down while posting {request_id}")


def status_json(backend: Backend) -> dict[str, Any]:
    result = askq(backend, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


async def test_status_shows_replicas_sweepers_pending_and_failed_sends(backend: Backend) -> None:
    flaky = FlakyChannel()
    with (
        process(backend, "sweeper") as sweeper,
        process(
            backend,
            *("worker", "auto", "--policy", "decline", "--group", "rules"),
            *("--consumer", LONG_REPLICA),
        ),
    ):
        async with (
            backend.seam() as seam,
            running(seam, flaky, "web", priority=10, consumer="web-1"),
        ):
            ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="agent-s", turn_id="turn-s")))
            offer = await flaky.next_presented()

            def failed() -> dict[str, Any] | None:
                found = status_json(backend)
                return found if found["failed_sends_total"] else None

            shown = await until(failed, "the failed send recorded")
            groups = {g["name"]: g for g in shown["groups"]}
            assert [(g["name"], g["priority"], g["kind"]) for g in shown["groups"]] == [
                ("rules", 0, "auto"),
                ("web", 10, "memory"),
            ]
            [rules_replica] = groups["rules"]["replicas"]
            [web_replica] = groups["web"]["replicas"]
            assert (rules_replica["name"], web_replica["name"]) == (LONG_REPLICA, "web-1")
            for replica in (rules_replica, web_replica):  # beats every third of its TTL
                assert 0 <= replica["beat_age_seconds"] <= 1.5, replica
                assert 0 < replica["lapses_in_seconds"] <= 1.5, replica
            [sweeping] = shown["sweepers"]
            assert sweeping["live"] and sweeping["name"].endswith(f":{sweeper.pid}")
            assert 0 <= sweeping["beat_age_seconds"] <= 1.5
            assert (
                shown["pending_total"],
                shown["pending_by_state"],
                shown["pending_by_tier"],
            ) == (
                1,
                {"CLAIMED": 1},
                {"10": 1},
            )
            [request] = shown["requests"]
            assert (request["id"], request["claimers"]) == (offer.request_id, ["web"])
            [send] = shown["failed_sends"]
            assert (send["job"], send["request"], send["kind"], send["tries"]) == (
                "post_question",
                offer.request_id,
                "memory",
                1,
            )
            assert send["error"] == f"RuntimeError: channel down while posting {offer.request_id}"
            assert send["queue"].endswith(":arq:sends:web")

            screen = await asyncio.to_thread(askq, backend, "status", COLUMNS="80")
            assert screen.returncode == 0, screen.stderr
            lines = screen.stdout.splitlines()
            for full in (offer.request_id, LONG_REPLICA):  # never cut, never wrapped
                assert any(full in line for line in lines), (full, screen.stdout)
            assert "failed sends: 1" in screen.stdout
            assert "pending: 1 (CLAIMED 1; tier 10: 1)" in screen.stdout

            watch = subprocess.Popen(
                [*ASKQ, "status", "--watch", "--interval", "0.2"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=backend.env(COLUMNS="120"),
            )
            await asyncio.sleep(1.5)
            watch.send_signal(signal.SIGINT)
            out, err = watch.communicate(timeout=10)
            assert watch.returncode == 0, err
            assert offer.request_id in out and "sweepers" in out
            ask.cancel()

        sweeper.send_signal(signal.SIGTERM)
        sweeper.wait(10)
    assert status_json(backend)["sweepers"] == []  # it said goodbye


async def test_set_priority_refused_while_live_then_moved(backend: Backend) -> None:
    with process(backend, "worker", "auto", "--group", "rules", "--consumer", "r1") as rules:
        refused = askq(backend, "group", "set-priority", "rules", "5")
        assert refused.returncode == 12, refused.stderr
        assert refused.stderr.startswith("CONFIG_ERROR: group rules has 1 live replica(s) (r1)")
        assert "--priority 5" in refused.stderr
        rules.send_signal(signal.SIGTERM)  # leaves cleanly: no longer live
        rules.wait(10)
    moved = askq(backend, "group", "set-priority", "rules", "5")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.startswith("group rules now has priority 5; 0 request(s)")
    listed = json.loads(askq(backend, "group", "list", "--json").stdout)
    assert [(g["name"], g["priority"]) for g in listed] == [("rules", 5)]

    old = askq(backend, "worker", "auto", "--group", "rules", "--priority", "0", timeout=30)
    assert old.returncode == 12 and "registered with priority 5" in old.stderr, old.stderr
    with process(backend, "worker", "auto", "--group", "rules", "--priority", "5"):
        answered = askq(backend, "ask", "-q", "Go?", "-o", "Yes (Recommended)", "-o", "No")
        assert answered.stdout == '{"answers":[{"id":"q1","selected":["Yes (Recommended)"]}]}\n'
    unknown = askq(backend, "group", "set-priority", "nobody", "1")
    assert unknown.returncode != 0 and unknown.stderr.startswith("NOT_FOUND: no group 'nobody'")


async def test_a_held_request_moves_on_when_its_group_moves(backend: Backend) -> None:
    """What the group held on its old tier is given back first: the ask falls through
    to the next tier instead of waiting on a group that left it."""
    mem = MemoryAnswerer()
    async with backend.seam() as seam:
        async with running(seam, MemoryAnswerer(), "later", priority=20):
            async with running(seam, mem, "desk", priority=0, consumer="d1"):
                ask = asyncio.create_task(seam.ask(SEED, Caller(agent_id="a", turn_id="t")))
                offer = await mem.next_presented()
            started = time.monotonic()
            moved = await asyncio.to_thread(askq, backend, "group", "set-priority", "desk", "30")
            assert moved.returncode == 0, moved.stderr
            assert "1 request(s) it held moved on" in moved.stdout
            row = await seam.request_status(offer.request_id)
            assert row is not None and row.tier == 20, row
            assert time.monotonic() - started < 10
            ask.cancel()
