"""Sign-in attempts, rate-limited per client address and per user name, counted in
Redis (the group's ChannelStore) so every replica behind the load balancer shares the
count: `ASKQ_WEB_SIGNIN_LIMIT` attempts per `ASKQ_WEB_SIGNIN_WINDOW` seconds.

Every POST to /signin counts against its address, before the token is looked at (an
address over the limit cannot test tokens). A token names no user until it matches, so
a failed attempt counts against no name: guessing cannot lock anyone out. A sign-in that
does match counts against the user's name, which bounds a leaked token replayed from
many addresses. Behind a trusted proxy the address is the client's, from
X-Forwarded-For (the right-most address that is not a trusted proxy), not the proxy's.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from starlette.requests import Request

from askq import ChannelStore

from ._signin import Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(request: Request, trusted_proxies: tuple[Network, ...]) -> str:
    """The address a sign-in attempt is counted against."""
    peer = request.client.host if request.client else ""
    hops = [peer]
    if any(a is not None and a in net for a in [_address(peer)] for net in trusted_proxies):
        forwarded = request.headers.get("x-forwarded-for", "")
        hops = [peer, *reversed([h for h in forwarded.split(",") if h.strip()])]
    for hop in hops:
        address = _address(hop)
        if address is None:
            return hop.strip()[:64] or "unknown"
        if not any(address in net for net in trusted_proxies):
            return str(address)
    return str(_address(hops[-1]) or "unknown")  # only proxies: the farthest one


@dataclass(frozen=True)
class SignInThrottle:
    store: ChannelStore
    limit: int  # attempts per window; 0: no limit
    window: int  # seconds
    trusted_proxies: tuple[Network, ...] = ()

    async def _over(self, what: str) -> int | None:
        if self.limit <= 0:
            return None
        counted, left = await self.store.count(f"signin:{what}", self.window)
        return left if counted > self.limit else None

    async def address_over(self, request: Request) -> int | None:
        """Count this attempt against its address: seconds to wait, or None."""
        return await self._over("addr:" + client_address(request, self.trusted_proxies))

    async def user_over(self, user: str) -> int | None:
        """Count a matching sign-in against the user's name: seconds to wait, or None."""
        return await self._over("user:" + user)
