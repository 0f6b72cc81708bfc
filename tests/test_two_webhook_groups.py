"""Two webhook groups side by side on one Redis, each with its own receiver, secret,
callback and tokens: each delivers and takes answers for its own question; a token of
one group is refused at the other's callback, recording nothing. And a replica that
dies mid-POST: another replica of its group delivers the same message (one webhook-id,
one token). Against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import SEED, YES, YES_JSON, Backend, running
from standardwebhooks import Webhook, WebhookVerificationError
from webhook_receiver import Receiver, answer, webhook_settings

from askq import Caller, RequestState, Seam
from askq.answerers.webhook import WebhookAnswerer

CALLER = Caller(agent_id="agent-7", turn_id="turn-1")


@contextlib.asynccontextmanager
async def receivers(n: int) -> AsyncIterator[list[Receiver]]:
    found = [Receiver() for _ in range(n)]
    for r in found:
        await r.start()
    try:
        yield found
    finally:
        for r in found:
            await r.stop()


@contextlib.asynccontextmanager
async def group(
    backend: Backend, receiver: Receiver, name: str, **extra: Any
) -> AsyncIterator[WebhookAnswerer]:
    async with backend.seam() as worker_seam:
        answerer = WebhookAnswerer(settings=webhook_settings(receiver, **extra))
        async with running(worker_seam, answerer, name, 0):
            yield answerer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def state_of(seam: Seam, request_id: str) -> RequestState | None:
    status = await seam.request_status(request_id)
    return status.state if status is not None else None


async def test_two_groups_each_deliver_and_answer_their_own(backend: Backend, seam: Seam) -> None:
    """Both groups hold the question and each POSTs it to its receiver, signed with its
    own secret (the other's does not verify) and with its own token and callback.
    Group A's token at B's callback is refused (401 on B's path, 404 on A's path at
    B's port) and records nothing; B's own token answers; A hears "answered elsewhere",
    B "answered here"; each group's records are under its own name."""
    async with (
        receivers(2) as (rx_a, rx_b),
        group(backend, rx_a, "hooks-a") as a,
        group(backend, rx_b, "hooks-b") as b,
    ):
        task = asyncio.create_task(seam.ask(SEED, CALLER))
        asked_a = await rx_a.wait_for("question.asked")
        asked_b = await rx_b.wait_for("question.asked")
        request_id = asked_a.data["request_id"]
        assert asked_b.data["request_id"] == request_id
        assert (asked_a.data["group"], asked_b.data["group"]) == ("hooks-a", "hooks-b")
        assert rx_a.secret != rx_b.secret
        with pytest.raises(WebhookVerificationError):
            Webhook(rx_a.secret).verify(asked_b.body, asked_b.headers)
        token_a = asked_a.data["answer"]["token"]
        token_b = asked_b.data["answer"]["token"]
        assert token_a != token_b
        assert f":{a.http_port}/webhook/hooks-a/" in asked_a.data["answer"]["url"]
        assert f":{b.http_port}/webhook/hooks-b/" in asked_b.data["answer"]["url"]

        status, body = await answer(asked_b, YES, token=token_a)
        assert (status, body["error"]) == (401, "unauthorized")
        wrong_port = asked_a.data["answer"]["url"].replace(f":{a.http_port}/", f":{b.http_port}/")
        status, body = await answer(asked_a, YES, url=wrong_port)
        assert (status, body["error"]) == (404, "not_found")
        assert await state_of(seam, request_id) is RequestState.CLAIMED
        assert await seam.settlement(request_id) is None

        status, body = await answer(asked_b, YES, by="bob")
        assert status == 200
        assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
        closed_a = await rx_a.wait_for("question.settled")
        closed_b = await rx_b.wait_for("question.settled")
        assert (closed_a.data["reason"], closed_b.data["reason"]) == (
            "answered_elsewhere",
            "answered_here",
        )
        assert (
            closed_a.data["text"] == closed_b.data["text"] == ("Answered through a webhook by bob")
        )
        status, body = await answer(asked_a, YES)  # A's token, at A, after B answered
        assert status == 409 and body["message"].startswith("Answered through a webhook by bob")
    keys = backend.keys()
    assert any(":webhook:hooks-a:q:" in k for k in keys)
    assert any(":webhook:hooks-b:q:" in k for k in keys)
    assert not any(":webhook:q:" in k for k in keys)  # nothing per kind


async def test_a_replica_killed_mid_post_leaves_the_delivery_to_another(
    backend: Backend, seam: Seam, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replica A claims the question; its POST hangs at the receiver; A dies (its task
    cancelled, and as a killed process would, it never drops its lease). Replica B of
    the same group takes the claim over, waits out the lease (2 s here) and POSTs the
    same message: one webhook-id, one body, so one token; the token answers."""
    monkeypatch.setattr("askq.answerers.webhook._state.POST_LEASE_SECONDS", 2)
    async with receivers(1) as (rx,):
        held = rx.hold_next()
        # Both replicas behind one public URL (a load balancer's, in production): B's.
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        a = WebhookAnswerer(settings=webhook_settings(rx, public_url=public))
        b = WebhookAnswerer(settings=webhook_settings(rx, public_url=public, http_port=port))
        async with backend.seam() as b_seam:
            async with backend.seam() as a_seam:
                a_run = running(a_seam, a, "hooks", consumer="a")
                await a_run.__aenter__()
                task = asyncio.create_task(seam.ask(SEED, CALLER))
                await asyncio.wait_for(held.reached.wait(), 15)  # A's POST is at the receiver

                async def keep(name: str) -> None:  # a dead process drops no lease
                    return None

                monkeypatch.setattr(a.group.store, "drop_lease", keep)
                await a_run.__aexit__(None, None, None)
            held.release.set()
            async with running(b_seam, b, "hooks", consumer="b"):
                asked = await rx.wait_for("question.asked", timeout=30)
                posts = rx.of("question.asked")
                assert {p.id for p in posts} == {asked.id}
                assert {p.body for p in posts} == {asked.body}
                assert asked.data["answer"]["url"].startswith(public + "/webhook/hooks/")
                status, _ = await answer(asked, YES)
                assert status == 200
                assert (await asyncio.wait_for(task, 10)).to_json() == YES_JSON
