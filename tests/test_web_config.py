"""The web answerer's settings: every malformed or missing one is a CONFIG_ERROR naming
it, before the replica goes live."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, Backend
from web_helpers import SECRET, USERS

from askq import AskError, ErrorCode
from askq.answerers.web import WebConfig, WebSettings, hash_token, parse_access


def _config(**values: str) -> WebConfig:
    return WebConfig.from_settings(WebSettings(**{"secret": SECRET, "users": USERS, **values}))


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"secret": ""}, "ASKQ_WEB_SECRET is not set"),
        ({"secret": "short"}, "at least 16 characters"),
        ({"secret": f"{SECRET},tiny"}, "at least 16 characters"),
        ({"users": ""}, "nobody can sign in"),
        ({"users": "alice"}, "expected user=sha256:<hex>"),
        ({"users": "alice=plaintext-token"}, "never the token"),
        ({"users": "alice=sha256:" + "zz" * 32}, "not hex"),
        ({"users": '{"al ice": "x"}'}, "is not a user name"),
        ({"users": "{not json"}, "ASKQ_WEB_USERS: not valid JSON"),
        ({"proxy_header": "X-Forwarded-Email"}, "ASKQ_WEB_TRUSTED_PROXIES is not"),
        ({"proxy_header": "X-Email", "trusted_proxies": "10.0.0.300"}, "not an IP address"),
        ({"routes": "[1]"}, "ASKQ_WEB_ROUTES: expected a non-empty JSON object"),
        ({"routes": "{nope"}, "ASKQ_WEB_ROUTES: not valid JSON"),
        ({"routes": '{"tenant": "*"}'}, "a key is"),
        ({"routes": '{"*": []}'}, "nobody may answer there"),
        ({"routes": '{"*": ["bad name"]}'}, "is not a user name"),
        ({"allowlist": "[oops"}, "ASKQ_WEB_ALLOWLIST: not valid JSON"),
        ({"public_url": "askq.example.com"}, "ASKQ_WEB_PUBLIC_URL"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_it(values: dict[str, str], names: str) -> None:
    with pytest.raises(AskError) as caught:
        _config(**values)
    assert caught.value.code is ErrorCode.CONFIG_ERROR
    assert names in caught.value.message


def test_a_malformed_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASKQ_WEB_PORT", "eighty")
    with pytest.raises(AskError) as caught:
        WebSettings.from_env()
    assert caught.value.code is ErrorCode.CONFIG_ERROR and "ASKQ_WEB_PORT" in caught.value.message


def test_the_settings_read_into_a_config() -> None:
    config = _config(
        secret=f"{SECRET},older-secret-0123456789",
        proxy_header="X-Forwarded-Email",
        trusted_proxies="10.0.0.1, 192.168.0.0/16",
        public_url="https://askq.example.com/",
        routes='{"*": "*", "tenant=acme": ["alice", "bob"]}',
    )
    assert config.secrets == (SECRET, "older-secret-0123456789")
    assert config.secure_cookies and config.public_url == "https://askq.example.com"
    assert len(config.signin.trusted_proxies) == 2
    assert config.signin.user_for_token("alice-token-0123456789") == "alice"
    assert config.signin.user_for_token("alice-token-012345678") is None
    # "*" goes last wherever it is written.
    assert config.access.match({"tenant": "acme"}).allow == {"alice", "bob"}  # type: ignore[union-attr]
    assert config.access.allows("carol", {"tenant": "other"})
    assert not config.access.allows("carol", {"tenant": "acme"})


def test_without_routes_everyone_signed_in_may_answer_everything() -> None:
    access = parse_access("", "")
    assert access.allows("anyone", {"tenant": "x"})
    limited = parse_access("", "alice,bob")
    assert limited.allows("bob", {}) and not limited.allows("carol", {})


def test_the_token_helper_prints_a_token_and_its_hash() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "askq.answerers.web", "token", "dana"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    token = out.split("shown once): ")[1].split()[0]
    assert f"dana={hash_token(token)}" in out
    assert _config(users=f"dana={hash_token(token)}").signin.user_for_token(token) == "dana"


def test_askq_worker_web_without_a_secret_stops_with_config_error(backend: Backend) -> None:
    env = {k: v for k, v in backend.env().items() if not k.startswith("ASKQ_WEB_")}
    done = subprocess.run(
        [sys.executable, "-m", "askq.cli", "worker", "web"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 12, done.stderr
    assert done.stderr.startswith("CONFIG_ERROR: ASKQ_WEB_SECRET is not set")
