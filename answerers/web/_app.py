"""The web app of one replica: the inbox pages, the signed-link pages, static files,
signed session cookies. Everything it knows lives in Redis (through the group's handle
and store), so any replica serves any page and takes any answer."""

from __future__ import annotations

import hashlib
import hmac
import logging

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from askq import Answers, AskError, ErrorCode, GroupHandle, SignedLinks

from ._config import WebConfig
from ._inbox import Inbox
from ._linkpages import links_routes
from ._pages import InboxPages
from ._render import STATIC_DIR, STATIC_PATH, Renderer
from ._throttle import SignInThrottle

log = logging.getLogger("askq.web")

SESSION_COOKIE = "askq_session"


def session_key(secret: str, group: str) -> str:
    """The cookie-signing key of `group`, derived from the first secret for this use and
    this group alone: a session signed in at one web group is nobody at another, even
    with the same secret (its users, allowlists and questions are its own)."""
    context = b"askq web session v2\n" + group.encode()
    return hmac.new(secret.encode(), context, hashlib.sha256).hexdigest()


def session_cookie(group: str) -> str:
    """The session cookie's name: one per group, so two groups served on one host name
    (a browser keeps cookies per host, whatever the port) do not sign each other out."""
    return f"{SESSION_COOKIE}_{group}"


def build_app(group: GroupHandle, config: WebConfig, inbox: Inbox) -> tuple[Starlette, InboxPages]:
    renderer = Renderer()
    throttle = SignInThrottle(
        inbox.store, config.signin_limit, config.signin_window, config.signin.trusted_proxies
    )
    pages = InboxPages(group, inbox, config.access, config.signin, renderer, throttle)

    async def link_answered(request_id: str, answers: Answers, by: str) -> None:
        await inbox.settle(request_id, "ANSWERED", by=by, code=None, overwrite=True)

    routes = [
        *pages.routes(),
        *links_routes(
            group,
            SignedLinks(config.secrets),
            renderer=renderer,
            on_answered=link_answered,
            secure_cookies=config.secure_cookies,
        ),
        Mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="static"),
    ]

    async def unavailable(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AskError)
        if exc.code is ErrorCode.REDIS_UNAVAILABLE:
            log.warning("a page failed: %s", exc)
            return renderer.problem(503, "Try again shortly", "The question store is out of reach.")
        log.error("a page failed: %s", exc)
        return renderer.problem(
            500,
            "Something went wrong",
            "askq could not show this page. Try again in a moment; if it keeps happening, tell"
            f" whoever runs askq (error {exc.code.value}).",
        )

    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                SessionMiddleware,
                secret_key=session_key(config.secrets[0], group.name),
                session_cookie=session_cookie(group.name),
                max_age=config.session_seconds,
                same_site="lax",
                https_only=config.secure_cookies,
            )
        ],
        exception_handlers={AskError: unavailable},
    )
    return app, pages
