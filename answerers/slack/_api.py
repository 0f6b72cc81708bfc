"""The Slack Web API client, and what a failed call means for a retried send.

Retries are deliberately ours, not slack_sdk's: the client keeps only its default
handler (one retry of a reset connection) and has no RateLimitErrorRetryHandler, so a
429 surfaces here once and becomes `RetryLater(Retry-After)`: the send queue waits
(durably, once sends are arq jobs) instead of a coroutine sleeping inside the client,
and nothing is retried twice over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from askq import AskError, ErrorCode, RetryLater

log = logging.getLogger("askq.slack")

# Slack errors worth another try; any other refusal (channel_not_found, not_in_channel,
# invalid_blocks, missing_scope, ...) will not change by retrying.
TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
AUTH_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
DEFAULT_RETRY_AFTER = 1.0


class SlackRefused(Exception):  # noqa: N818 - Slack's answer, not our failure
    """Slack refused the call for good: retrying will not help."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"{method}: {error}")
        self.error = error


def web_client(token: str | None, base_url: str, session: aiohttp.ClientSession) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        session=session,
        retry_handlers=[AsyncConnectionErrorRetryHandler()],
    )


def slack_error(exc: SlackApiError) -> str:
    """Slack's error code of a refused call, or its HTTP status."""
    data = exc.response.data
    error = data.get("error") if isinstance(data, dict) else None
    return str(error or f"HTTP {exc.response.status_code}")


def _retry_after(exc: SlackApiError) -> float:
    headers = exc.response.headers or {}
    raw = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(float(raw), 0.0) if raw is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER


async def call(method: str, request: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
    """Await a Web API call: a 429 is RetryLater, a lasting refusal SlackRefused, any
    other failure (5xx, a lost connection) is raised as is, for backoff."""
    try:
        return await request
    except SlackApiError as exc:
        if exc.response.status_code == 429:
            raise RetryLater(_retry_after(exc), f"Slack rate-limited {method}") from exc
        error = slack_error(exc)
        if exc.response.status_code >= 500 or error in TRANSIENT_ERRORS:
            raise
        raise SlackRefused(method, error) from exc


async def check_bot_token(client: AsyncWebClient) -> None:
    """Fail at start-up on a token Slack refuses; carry on if Slack cannot be reached
    (sends retry, and a worker should not need Slack up to start)."""
    try:
        await client.auth_test()
    except SlackApiError as exc:
        error = slack_error(exc)
        if error in AUTH_ERRORS:
            raise AskError(
                ErrorCode.CONFIG_ERROR, f"ASKQ_SLACK_BOT_TOKEN: Slack refused the token ({error})"
            ) from None
        log.warning("Slack auth.test failed (%s); starting anyway", error)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("cannot reach Slack at %s (%s); starting anyway", client.base_url, exc)
