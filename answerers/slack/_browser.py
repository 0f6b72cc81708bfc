"""The "Open in browser" button of a question message: a link into the web inbox.

Where a message goes decides what the link may be. A signed single-question link
(`askq.SignedLinks`) is a bearer credential: whoever holds it answers as its recipient.
A DM route's message is seen by one person, the one the route lets answer, so it
carries a link signed for that Slack user and this request, expiring. A channel's
message is seen by everyone in the channel (guests, later members, whoever it is
forwarded to, the workspace's search and exports), most of whom the route's allowlist
does not let answer: it links to the request's page (`/q/<id>`), where the web inbox's
own sign-in and allowlists decide who may answer, and as whom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from askq import AskError, ErrorCode, SignedLinks

from ._routes import USER_ID

if TYPE_CHECKING:
    from ._routes import Route

MIN_SECRET = 16  # as the web inbox requires of ASKQ_WEB_SECRET


@dataclass(frozen=True)
class BrowserLinks:
    web_url: str  # no trailing slash
    web_group: str
    ttl: float
    links: SignedLinks | None  # None: every message links to the request's page

    def url(self, request_id: str, route: Route) -> str:
        """The button's URL for a message posted along `route`."""
        if self.links is not None and USER_ID.match(route.channel) and route.allows(route.channel):
            token = self.links.mint(
                request_id, self.web_group, f"slack:{route.channel}", ttl=self.ttl
            )
            return f"{self.web_url}/a/{token}"
        return f"{self.web_url}/q/{quote(request_id, safe='')}"


def browser_links(web_url: str, secret: str, web_group: str, ttl: float) -> BrowserLinks | None:
    """From ASKQ_SLACK_WEB_URL, ASKQ_SLACK_LINK_SECRET, ASKQ_SLACK_WEB_GROUP and
    ASKQ_SLACK_LINK_TTL (`SlackSettings`); None without a web URL."""
    web_url = web_url.strip().rstrip("/")
    secret = secret.strip()
    if not web_url:
        if secret:
            raise AskError(
                ErrorCode.CONFIG_ERROR,
                "ASKQ_SLACK_LINK_SECRET is set but ASKQ_SLACK_WEB_URL is not: the signed"
                " links need the web inbox's public URL",
            )
        return None
    if not web_url.startswith(("https://", "http://")) or any(c in web_url for c in "?#\"'<> "):
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"ASKQ_SLACK_WEB_URL: {web_url!r} is not an http(s) URL of the web inbox",
        )
    if secret and len(secret) < MIN_SECRET:
        raise AskError(
            ErrorCode.CONFIG_ERROR,
            f"ASKQ_SLACK_LINK_SECRET: needs at least {MIN_SECRET} characters"
            " (it must be one of the web inbox's ASKQ_WEB_SECRET secrets)",
        )
    if not web_group.strip():
        raise AskError(ErrorCode.CONFIG_ERROR, "ASKQ_SLACK_WEB_GROUP is empty")
    return BrowserLinks(
        web_url=web_url,
        web_group=web_group.strip(),
        ttl=ttl,
        links=SignedLinks([secret]) if secret else None,
    )
