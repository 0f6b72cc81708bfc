"""Inbound activities authenticated as the Bot Framework prescribes ("Authenticate
requests from the Bot Connector service to your bot"): every POST to the messaging
endpoint carries `Authorization: Bearer <JWT>`, which must

1. be an RS256 (or whatever the OpenID metadata's `id_token_signing_alg_values_supported`
   lists) JWT signed by a key of the `jwks_uri` the OpenID metadata names;
2. have that key endorsed for the activity's channel (`msteams`);
3. carry the issuer `https://api.botframework.com` (the cloud's) and the bot's app id as
   audience, and be within its validity (five minutes of clock skew either way);
4. carry a `serviceurl` claim equal to the activity's `serviceUrl` (else a forged
   activity could send the bot's own token to a host of its choosing).

Why not the Teams SDK's validator: it reads the keys through PyJWT's `PyJWKClient`,
whose fetch is synchronous `urllib` inside an `async` method: each time its five-minute
cache runs out, the worker's event loop (heartbeats, claims, every click) stops for a
round trip to Microsoft, up to 30 s when that is slow. It also skips the endorsement
check and derives the keys' URL instead of reading the metadata. Here both documents
are fetched with httpx (asynchronously, one fetch at a time), the keys kept for a day
and fetched again at once when a token names a key not seen yet (rotation), at most
once a minute.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

log = logging.getLogger("askq.teams")

CLOCK_SKEW_SECONDS = 300  # the Bot Framework's "industry-standard" skew
KEYS_TTL_SECONDS = 24 * 3600
REFETCH_GAP_SECONDS = 60  # an unknown key id fetches again at most this often
CHANNEL_ID = "msteams"


class Unauthenticated(Exception):  # noqa: N818 - a verdict on a request, not our failure
    """The request does not carry a token the Bot Connector service made for this bot."""


@dataclass(frozen=True)
class SigningKey:
    key: Any  # the public key, as PyJWT verifies with it
    endorsements: frozenset[str]


class OpenIdKeys:
    """The signing keys named by the OpenID metadata at `metadata_url`."""

    def __init__(
        self,
        metadata_url: str,
        http: httpx.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metadata_url = metadata_url
        self._http = http
        self._clock = clock
        self._keys: dict[str, SigningKey] = {}
        self._algorithms: tuple[str, ...] = ("RS256",)
        self._fetched_at: float | None = None  # the keys held were fetched then
        self._tried_at: float | None = None  # the last fetch was tried then
        self._lock = asyncio.Lock()

    @property
    def algorithms(self) -> tuple[str, ...]:
        return self._algorithms

    async def key(self, kid: str) -> SigningKey:
        """The key `kid`, fetching the documents when they are old or do not have it
        (at most once a minute: a flood of made-up key ids cannot make us hammer them)."""
        if not self._usable(kid):
            async with self._lock:  # one fetch at a time; who waited finds it done
                if not self._usable(kid) and not self._tried_recently():
                    await self._fetch()
        if kid not in self._keys:
            raise Unauthenticated(f"signed with an unknown key ({kid!r})")
        return self._keys[kid]

    def _usable(self, kid: str) -> bool:
        fresh = self._fetched_at is not None and (
            self._clock() - self._fetched_at < KEYS_TTL_SECONDS
        )
        return fresh and kid in self._keys

    def _tried_recently(self) -> bool:
        return self._tried_at is not None and self._clock() - self._tried_at < REFETCH_GAP_SECONDS

    async def _fetch(self) -> None:
        self._tried_at = self._clock()
        try:
            metadata = await self._json(self.metadata_url)
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise ValueError("the OpenID metadata names no jwks_uri")
            algorithms = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
            keys = await self._json(jwks_uri)
        except (httpx.HTTPError, ValueError) as exc:
            if self._keys:  # keep the keys we have: an outage at Microsoft is no reason
                log.warning("could not refresh the Bot Framework signing keys: %s", exc)
                return
            raise Unauthenticated(f"cannot read the Bot Framework signing keys: {exc}") from exc
        found: dict[str, SigningKey] = {}
        for jwk in keys.get("keys") or []:
            if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str):
                continue
            try:
                public = jwt.PyJWK.from_dict(jwk).key
            except jwt.PyJWTError as exc:
                log.info("skipping signing key %r: %s", jwk.get("kid"), exc)
                continue
            endorsements = jwk.get("endorsements") or []
            found[jwk["kid"]] = SigningKey(public, frozenset(str(e) for e in endorsements))
        self._keys = found
        self._algorithms = tuple(str(a) for a in algorithms if isinstance(a, str)) or ("RS256",)
        self._fetched_at = self._clock()

    async def _json(self, url: str) -> dict[str, Any]:
        response = await self._http.get(url)
        response.raise_for_status()
        data = json.loads(response.content)
        if not isinstance(data, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return data


class BotTokens:
    """Checks the bearer token of an inbound activity; `check` raises Unauthenticated."""

    def __init__(self, keys: OpenIdKeys, *, app_id: str, issuer: str) -> None:
        self.keys = keys
        self.app_id = app_id.lower()
        self.issuer = issuer

    async def check(self, authorization: str | None, activity: dict[str, Any]) -> dict[str, Any]:
        """The token's claims, once it is the Bot Connector's for this bot and activity."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme != "Bearer" or not token.strip():
            raise Unauthenticated("no Bearer token in Authorization")
        token = token.strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"not a JWT ({exc})") from None
        kid, alg = header.get("kid"), header.get("alg")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("the token names no signing key (kid)")
        if alg not in self.keys.algorithms:
            raise Unauthenticated(f"signing algorithm {alg!r} is not one the metadata allows")
        signing = await self.keys.key(kid)
        channel = activity.get("channelId")
        if channel not in signing.endorsements:
            raise Unauthenticated(f"the signing key is not endorsed for channel {channel!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                signing.key,
                algorithms=[alg],
                issuer=self.issuer,
                leeway=CLOCK_SKEW_SECONDS,
                # The audience is compared below, without regard to case.
                options={"require": ["exp", "iss", "aud"], "verify_aud": False},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid token ({exc})") from None
        audience = claims.get("aud")
        if not isinstance(audience, str) or audience.lower() != self.app_id:
            raise Unauthenticated(f"the token is for another audience ({audience!r})")
        claimed = claims.get("serviceurl") or claims.get("serviceUrl")
        service_url = activity.get("serviceUrl")
        if not isinstance(claimed, str) or not isinstance(service_url, str):
            raise Unauthenticated("the token or the activity has no service URL")
        if claimed.rstrip("/").lower() != service_url.rstrip("/").lower():
            raise Unauthenticated("the activity's serviceUrl is not the one the token names")
        return claims
