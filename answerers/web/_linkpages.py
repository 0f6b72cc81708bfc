"""The pages behind signed single-question links, `/a/<token>`, as routes any channel
can mount for its own group (the web inbox does; the email channel mounts them in its
own app):

    app = Starlette(routes=links_routes(group, SignedLinks(secrets)))

- `GET` / `HEAD` change nothing (mail scanners prefetch links): they show the request
  with the link's choice pre-selected and a confirm button, or what became of it.
- `POST` answers once, attributed to the link's recipient (`by`, default
  `"<group>:<recipient>"`); the link's single-use id is spent with the group's
  `ChannelStore.once` at whichever replica the POST lands, so a replay anywhere is 410.
- A tampered, malformed or another group's token: 403; expired or already used: 410.
  Each a page saying which, changing nothing.
- CSRF: the GET sets a random cookie (HttpOnly, SameSite=Strict, scoped to the link
  path) and puts the same value in the form; the POST must carry both.

The pages use the web channel's templates and static files (`static=True` mounts those
under `/static` too, for an app that has no inbox of its own).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from askq import (
    FINAL_REFUSALS,
    Answers,
    AskError,
    AskRequest,
    ErrorCode,
    GroupHandle,
    LinkClaims,
    LinkError,
    SignedLinks,
)

from ._forms import FormState, preselected, read_form
from ._inbox import Inbox
from ._render import STATIC_DIR, STATIC_PATH, Renderer, final_context, when

log = logging.getLogger("askq.web")

LINK_CSRF_COOKIE = "askq_link_csrf"
# A spent link's record outlives the token by this much, so a replay just after expiry
# still reads "already answered" rather than "expired" (either refuses).
SPENT_GRACE_SECONDS = 3600

OnAnswered = Callable[[str, Answers, str], Awaitable[None]]


def links_routes(
    group: GroupHandle,
    links: SignedLinks,
    *,
    renderer: Renderer | None = None,
    path: str = "/a",
    by: Callable[[LinkClaims], str] | None = None,
    on_answered: OnAnswered | None = None,
    secure_cookies: bool = False,
    static: bool = False,
) -> list[BaseRoute]:
    """The GET/HEAD/POST routes of `<path>/<token>` for `group`. `on_answered(request id,
    answers, by)` runs after a link answered (the web inbox takes the question off)."""
    pages = LinkPages(
        group,
        links,
        renderer or Renderer(),
        path=path,
        by=by or (lambda claims: f"{claims.group}:{claims.recipient}"),
        on_answered=on_answered,
        secure_cookies=secure_cookies,
    )
    routes: list[BaseRoute] = [
        Route(path + "/{token}", pages.show, methods=["GET", "HEAD"]),
        Route(path + "/{token}", pages.answer, methods=["POST"]),
    ]
    if static:
        routes.append(Mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="static"))
    return routes


class LinkPages:
    def __init__(
        self,
        group: GroupHandle,
        links: SignedLinks,
        renderer: Renderer,
        *,
        path: str,
        by: Callable[[LinkClaims], str],
        on_answered: OnAnswered | None,
        secure_cookies: bool,
    ) -> None:
        self.group = group
        self.links = links
        self.render = renderer
        self.path = path
        self.by = by
        self.on_answered = on_answered
        self.secure_cookies = secure_cookies
        self.inbox = Inbox(group.store, group.name)

    # --- what a link may do ------------------------------------------------------------

    async def _claims(self, request: Request) -> LinkClaims | Response:
        try:
            return self.links.check(request.path_params["token"], group=self.group.name)
        except LinkError as exc:
            return self._refused(exc.status, exc.message)

    def _refused(self, status: int, message: str, **context: Any) -> Response:
        title = "This link cannot be used" if status == 410 else "This link is not valid"
        return self.render.problem(status, title, message, **context)

    async def _closed(self, claims: LinkClaims) -> tuple[AskRequest | None, Response | None]:
        """The request, or the page to show instead (used, gone, settled)."""
        used = await self.inbox.link_use(claims.jti)
        try:
            request = await self.group.request(claims.request_id)
        except AskError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return None, self._refused(410, "The question no longer exists (it expired).")
            raise
        if used is not None:
            by, at = used
            return request, await self._already(request, f"already answered by {by} at {when(at)}")
        if not await self.group.holds(request.id):
            return request, await self._already(request, "")
        return request, None

    async def _already(self, request: AskRequest, message: str) -> Response:
        settlement = await self.group.settlement(request.id)
        final = await self.inbox.final(request.id)
        if not message:
            if settlement is not None and settlement.state == "ANSWERED":
                at = f" at {when(final.at)}" if final is not None else ""
                message = f"already answered by {settlement.by or 'someone'}{at}"
            elif final is not None:
                message = f"no longer waiting for an answer: {final.reason}"
            else:
                message = "no longer waiting for an answer here"
        context = final_context(request, settlement, final)
        return self._refused(410, f"This question was {message}.", final=True, **context)

    # --- the routes ----------------------------------------------------------------------

    async def show(self, request: Request) -> Response:
        claims = await self._claims(request)
        if isinstance(claims, Response):
            return claims
        asked, closed = await self._closed(claims)
        if closed is not None:
            return closed
        assert asked is not None
        state = preselected(asked.questions, claims.question_id, claims.option)
        return self._form(request, claims, asked, state, 200)

    def _form(
        self, request: Request, claims: LinkClaims, asked: AskRequest, state: FormState, status: int
    ) -> Response:
        csrf = request.cookies.get(LINK_CSRF_COOKIE) or secrets.token_urlsafe(24)
        response = self.render.page(
            "question.html",
            {
                "request": asked,
                "questions": asked.questions,
                "state": state,
                "open": True,
                "action": f"{self.path}/{request.path_params['token']}",
                "csrf": csrf,
                "submit_label": "Confirm",
                "recipient": claims.recipient,
                "stream": None,
            },
            status,
        )
        response.set_cookie(
            LINK_CSRF_COOKIE,
            csrf,
            max_age=max(60, claims.expires_at - int(time.time())),
            path=self.path + "/",
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies,
        )
        return response

    async def answer(self, request: Request) -> Response:
        claims = await self._claims(request)
        if isinstance(claims, Response):
            return claims
        form = await request.form()
        cookie = request.cookies.get(LINK_CSRF_COOKIE, "")
        given = str(form.get("csrf") or "")
        if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):
            return self._refused(
                403,
                "The form could not be checked (a missing or stale form token):"
                " open the link again.",
            )
        asked, closed = await self._closed(claims)
        if closed is not None:
            return closed
        assert asked is not None
        state, answers = read_form(asked.questions, form)
        if answers is None:
            return self._form(request, claims, asked, state, 422)
        ttl = max(1, claims.expires_at - int(time.time())) + SPENT_GRACE_SECONDS
        if not await self.inbox.spend_link(claims.jti, ttl):
            _, closed = await self._closed(claims)
            return closed or self._refused(410, "This link was already used.")
        by = self.by(claims)
        try:
            accepted = await self.group.answer(asked.id, answers, by=by)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                return await self._already(asked, "")
            await self.inbox.unspend_link(claims.jti)
            if exc.code is ErrorCode.INVALID_REQUEST:
                state.error = exc.message
                return self._form(request, claims, asked, state, 422)
            raise
        await self.inbox.record_link_use(claims.jti, by)
        if self.on_answered is not None:
            try:
                await self.on_answered(asked.id, accepted, by)
            except Exception:  # noqa: BLE001 - the answer stands; the inbox catches up
                log.exception("after the link answer to %s", asked.id)
        settlement = await self.group.settlement(asked.id)
        final = await self.inbox.final(asked.id)
        context = final_context(
            asked, settlement, final, note="Thank you: your answer was recorded."
        )
        return self.render.page(
            "question.html",
            {
                "request": asked,
                "open": False,
                "recipient": claims.recipient,
                "stream": None,
                **context,
            },
        )
