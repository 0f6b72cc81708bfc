"""The bot's own token, for its calls to the Bot Connector service: the OAuth 2.0
client-credentials grant of its app registration, through MSAL (Microsoft's library for
it, and the Teams SDK's), which keeps the token until shortly before it expires.

MSAL is synchronous: every call runs in a thread, so a slow authority never stops the
event loop. Its authority is the configured one as is (`instance_discovery=False`):
MSAL would otherwise ask login.microsoftonline.com about any other host first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msal
import requests

from askq import AskError, ErrorCode

log = logging.getLogger("askq.teams")

# What MSAL answers for credentials the authority refuses: no retry will help.
REFUSED_CREDENTIALS = frozenset(
    {"invalid_client", "unauthorized_client", "invalid_request", "invalid_scope"}
)
RENEW_BEFORE_SECONDS = 300  # a token this close to expiry is renewed, not used


class TokenRefused(Exception):  # noqa: N818 - the authority's verdict
    def __init__(self, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}".rstrip(": "))
        self.error = error


class BotToken:
    """`get_app_token(scope, tenant)`: the Teams SDK's token provider protocol."""

    def __init__(self, app_id: str, password: str, authority: str, scope: str) -> None:
        self.app_id = app_id
        self.authority = authority  # e.g. https://login.microsoftonline.com/<tenant>
        self.scope = scope
        self._password = password
        self._app: msal.ConfidentialClientApplication | None = None
        self._session = requests.Session()  # MSAL's connections; closed with `close`
        self._lock = asyncio.Lock()
        # The token in hand, so a call does not hop to a thread to read MSAL's cache.
        self._token: str | None = None
        self._renew_at = 0.0

    async def get_app_token(self, scope: str | None = None, tenant_id: str | None = None) -> str:
        scope = scope or self.scope
        token = self._token
        if token is not None and self._fresh(scope):
            return token
        async with self._lock:  # MSAL's cache is shared; one acquisition at a time
            token = self._token
            if token is not None and self._fresh(scope):
                return token
            asked = time.monotonic()
            result = await asyncio.to_thread(self._acquire, scope)
            token = result.get("access_token")
            if isinstance(token, str) and token:
                if scope == self.scope:
                    lifetime = float(result.get("expires_in") or 0)
                    self._token, self._renew_at = token, asked + lifetime - RENEW_BEFORE_SECONDS
                return token
        error = str(result.get("error") or "no_token")
        raise TokenRefused(error, str(result.get("error_description") or "").split("\n")[0])

    def _fresh(self, scope: str) -> bool:
        return scope == self.scope and time.monotonic() < self._renew_at

    def _acquire(self, scope: str) -> dict[str, Any]:
        if self._app is None:  # its construction reads the authority's metadata: a thread
            self._app = msal.ConfidentialClientApplication(
                self.app_id,
                client_credential=self._password,
                authority=self.authority,
                instance_discovery=False,
                http_client=self._session,
            )
        result: dict[str, Any] = self._app.acquire_token_for_client(scopes=[scope])
        return result

    async def check(self) -> None:
        """At start-up: a CONFIG_ERROR when the authority refuses the credentials; a
        warning (and carry on: sends retry) when it cannot be reached."""
        try:
            await self.get_app_token()
        except TokenRefused as exc:
            if exc.error in REFUSED_CREDENTIALS:
                raise AskError(
                    ErrorCode.CONFIG_ERROR,
                    f"ASKQ_TEAMS_APP_ID/ASKQ_TEAMS_APP_PASSWORD: {self.authority} refused the"
                    f" bot's credentials ({exc})",
                ) from None
            log.warning("the bot's token could not be had (%s); starting anyway", exc)
        except (requests.RequestException, ValueError, OSError) as exc:
            log.warning("cannot reach %s (%s); starting anyway", self.authority, exc)

    def close(self) -> None:
        self._session.close()
