"""The webhook answerer's settings: every problem a CONFIG_ERROR naming the variable,
before the worker goes live; and a worker without a secret stops with it."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import ROOT, Backend
from standardwebhooks import Webhook
from webhook_receiver import new_secret

from askq import AskError, ErrorCode
from askq.answerers.webhook import WebhookConfig, WebhookSettings
from askq.answerers.webhook._signing import Signer

SECRET = new_secret()


def config(**values: Any) -> WebhookConfig:
    base: dict[str, Any] = {"url": "https://hooks.example/askq", "secret": SECRET}
    return WebhookConfig.from_settings(WebhookSettings(**{**base, **values}))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"secret": None}, "ASKQ_WEBHOOK_SECRET is not set"),
        ({"secret": "hunter2"}, "ASKQ_WEBHOOK_SECRET: expected whsec_"),
        ({"secret": "whsec_not base64!"}, "ASKQ_WEBHOOK_SECRET: the part after whsec_ is not"),
        (
            {"secret": "whsec_" + base64.b64encode(b"short").decode()},
            "ASKQ_WEBHOOK_SECRET: the key is 5 bytes",
        ),
        ({"url": ""}, "ASKQ_WEBHOOK_URL is not set"),
        ({"url": "ftp://x/y"}, "ASKQ_WEBHOOK_URL: 'ftp://x/y' is not an http(s) URL"),
        ({"routes": '{"*": "https://a.example"}'}, "ASKQ_WEBHOOK_URL and ASKQ_WEBHOOK_ROUTES"),
        ({"url": "", "routes": "{"}, "ASKQ_WEBHOOK_ROUTES: not valid JSON"),
        ({"url": "", "routes": '{"*": 3}'}, "ASKQ_WEBHOOK_ROUTES['*']: expected a URL"),
        ({"url": "", "routes": '{"tenant": "https://a"}'}, "ASKQ_WEBHOOK_ROUTES"),
        ({"public_url": "askq.example"}, "ASKQ_WEBHOOK_PUBLIC_URL"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_it(values: dict[str, Any], message: str) -> None:
    with pytest.raises(AskError) as caught:
        config(**values)
    assert caught.value.code is ErrorCode.CONFIG_ERROR
    assert caught.value.message.startswith(message), caught.value.message


def test_routes_match_in_order_with_the_default_last() -> None:
    routes = config(
        url="", routes='{"*": "https://ops.example", "tenant=acme": "https://acme.example"}'
    ).routes
    assert routes.match({"tenant": "acme"}) == "https://acme.example"
    assert routes.match({"tenant": "beta"}) == "https://ops.example"
    assert config(url="", routes='{"tenant=acme": "https://a.example"}').routes.match({}) is None


def test_what_askq_signs_verifies_with_the_receivers_library() -> None:
    """Signed by askq's Signer, verified by standardwebhooks with the secret as the
    receiver has it; a secret that is not the group's does not verify."""
    found = config()
    signer = Signer(found.secret, found.key)
    body = '{"type":"question.asked","data":{"q":"é \\"x\\""}}'
    headers = signer.headers("msg_1", time.time(), body)
    assert Webhook(SECRET).verify(body.encode(), headers)["data"]["q"] == 'é "x"'
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(new_secret()).verify(body.encode(), headers)
    # Tokens: one per group and request, the same for one nonce.
    assert signer.token("a", "r1", "n") == signer.token("a", "r1", "n")
    assert len({signer.token(g, r, "n") for g in "ab" for r in ("r1", "r2")}) == 4


def test_askq_worker_webhook_without_a_secret_stops_with_config_error(backend: Backend) -> None:
    env = {k: v for k, v in backend.env().items() if not k.startswith("ASKQ_WEBHOOK_")}
    done = subprocess.run(
        [sys.executable, "-m", "askq.cli", "worker", "webhook"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 12, done.stderr
    assert done.stderr.startswith("CONFIG_ERROR: ASKQ_WEBHOOK_SECRET is not set")
