"""The pages behind signed single-question links, `/a/<token>`, as routes any channel
can mount for its own group (the web inbox does; the email channel mounts them in its
own app):

    app = Starlette(routes=links_routes(group, SignedLinks(secrets)))

- `GET` / `HEAD` change nothing (mail scanners prefetch links): they show the request
  with the link's choice pre-selected and a confirm button, or what became of it.
- `POST` answers once, attributed to the link's recipient (`by`, default
  `"link:<recipient>"`, which pages word "answered through a link by <recipient>");
  the link's single-use id is spent with the group's `ChannelStore.once` at whichever
  replica the POST lands, so a replay anywhere is 410.
- A link of either form (`SignedLinks.resolve`: a short stored one, or a
  self-contained one). A tampered, malformed or another group's link: 403; expired or
  already used: 410. Each a page saying which in the words of the person who followed
  the link (what happened, and what they can do), changing nothing; the reason in
  developers' words goes to the log.
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

from ._forms import NOT_ACCEPTED, FormState, preselected, read_form
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
        by=by or (lambda claims: f"link:{claims.recipient}"),
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


def recipient_shown(recipient: str) -> str:
    """Who a link is for, as the page names them: `slack:U0123` is "U0123 in Slack"."""
    source, sep, who = recipient.partition(":")
    return f"{who} in Slack" if sep and source == "slack" and who else recipient


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
        token = request.path_params["token"]
        try:
            return await self.links.resolve(token, group=self.group.name, store=self.group.store)
        except LinkError as exc:
            log.info("a link refused at %s: %s", self.group.name, exc.message)
            return self._link_refused(exc)

    def _link_refused(self, exc: LinkError) -> Response:
        if exc.problem == "expired":
            at = f" on {when(exc.expired_at)}" if exc.expired_at else ""
            return self.render.problem(
                410,
                "This link has expired",
                f"It stopped working{at}. If the question is still waiting for an answer,"
                " answer it where the link came from (reply to the email, or in Slack).",
            )
        if exc.problem == "gone":
            return self._gone()
        if exc.problem == "other group":
            return self.render.problem(
                403,
                "This link does not work here",
                "It was made for another askq service than the one at this address. Open it"
                " from the message it came in; if it still fails, tell whoever runs askq.",
            )
        return self.render.problem(
            403,
            "This link does not work",
            "Part of the link is missing or was changed. Open it again from the message it"
            " came in (click it, or copy the whole address into the browser).",
        )

    def _gone(self) -> Response:
        return self.render.problem(
            410,
            "This link has expired",
            "The question it was for is closed, and askq no longer keeps it.",
        )

    async def _closed(self, claims: LinkClaims) -> tuple[AskRequest | None, Response | None]:
        """The request, or the page to show instead (used, gone, settled)."""
        used = await self.inbox.link_use(claims.jti)
        try:
            request = await self.group.request(claims.request_id)
        except AskError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return None, self._gone()
            raise
        if used is not None:
            return request, await self._already(request, used=True)
        if not await self.group.holds(request.id):
            return request, await self._already(request, used=False)
        return request, None

    async def _already(self, request: AskRequest, *, used: bool) -> Response:
        """The page of a question no longer waiting here: what became of it (who
        answered, how and when: "Answered in Slack by bob at …"), under a line that
        says why there is no form (`used`: this very link answered it)."""
        settlement = await self.group.settlement(request.id)
        final = await self.inbox.final(request.id)
        if used:
            title, text = "Already answered", "This link has been used: a link answers once."
        elif settlement is not None and settlement.state == "ANSWERED":
            title, text = "Already answered", "Nobody needs to answer this question any more."
        else:
            title = "No longer waiting for an answer"
            text = "Nobody needs to answer this question any more."
        context = final_context(request, settlement, final)
        return self.render.problem(410, title, text, final=True, **context)

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
                "recipient": recipient_shown(claims.recipient),
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
            return self.render.problem(
                403,
                "Your answer was not sent",
                "This page could not be checked: it was open too long, or the browser"
                " blocked its cookie. Open the link again and confirm once more.",
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
            return closed or self.render.problem(
                410, "Already answered", "This link was used already: it answers once."
            )
        by = self.by(claims)
        try:
            accepted = await self.group.answer(asked.id, answers, by=by)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                return await self._already(asked, used=False)
            await self.inbox.unspend_link(claims.jti)
            if exc.code is ErrorCode.INVALID_REQUEST:
                log.info("a link answer to %s refused: %s", asked.id, exc.message)
                state.error = NOT_ACCEPTED
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
                "recipient": recipient_shown(claims.recipient),
                "stream": None,
                **context,
            },
        )
