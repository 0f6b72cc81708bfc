"""The web channel: a live inbox, answer pages, signed single-question links and a
fleet dashboard, served by every replica of a `web` group (`askq worker web`).

`links_routes(group, links)` are the signed-link pages as routes any channel can mount
for its own group (the email channel does)."""

from ._access import Access, AccessRoute, parse_access
from ._answerer import WebAnswerer, WebOptions
from ._config import WebConfig, WebSettings
from ._linkpages import LINK_CSRF_COOKIE, links_routes
from ._render import Renderer
from ._signin import hash_token, new_token

__all__ = [
    "LINK_CSRF_COOKIE",
    "Access",
    "AccessRoute",
    "Renderer",
    "WebAnswerer",
    "WebConfig",
    "WebOptions",
    "WebSettings",
    "hash_token",
    "links_routes",
    "new_token",
    "parse_access",
]
