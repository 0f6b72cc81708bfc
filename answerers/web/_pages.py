"""The inbox's own pages: sign-in, the inbox, a request's answer page, the live stream,
health. Every page but sign-in and health needs a signed-in user; what a user sees and
may answer follows the access routes (`_access.py`); every POST checks the CSRF token."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from askq import (
    FINAL_REFUSALS,
    AskError,
    AskRequest,
    ErrorCode,
    FleetTrends,
    GroupHandle,
    RecentSettlement,
    scope_matches,
)

from ._access import Access
from ._charts import charts
from ._forms import NOT_ACCEPTED, FormState, read_form
from ._inbox import Inbox, InboxEntry, reason_for
from ._live import LiveHub, Message, Subscriber, sse
from ._render import Renderer, final_context
from ._signin import SignIn, csrf_ok, csrf_token, current_user
from ._throttle import SignInThrottle

log = logging.getLogger("askq.web")

SSE_PING_SECONDS = 15
RECENT_SHOWN = 20  # the dashboard's recent settlements (the deployment's latest)
# The charts' counts are read at most this often per replica, however many dashboards
# are open (a busy hour of 50 groups is ~12,000 fields per shard: a few ms to read).
TRENDS_FRESH_SECONDS = 1.0


def parse_selector(text: str) -> dict[str, str]:
    """`tenant=acme,env=prod` -> a scope selector (shell-style patterns allowed)."""
    selector: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        key, sep, pattern = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{pair!r}: a filter is key=pattern[,key=pattern...]")
        selector[key.strip()] = pattern.strip()
    return selector


class InboxPages:
    def __init__(
        self,
        group: GroupHandle,
        inbox: Inbox,
        access: Access,
        signin: SignIn,
        renderer: Renderer,
        throttle: SignInThrottle,
    ) -> None:
        self.group = group
        self.inbox = inbox
        self.access = access
        self.signin = signin
        self.render = renderer
        self.throttle = throttle
        self.hub = LiveHub(inbox, access, self.render_item, self.snapshot)
        self._trends: tuple[float, FleetTrends] | None = None

    def routes(self) -> list[Route]:
        return [
            Route("/", self.index, methods=["GET"]),
            Route("/q/{request_id}", self.question, methods=["GET"]),
            Route("/q/{request_id}", self.submit, methods=["POST"]),
            Route("/events", self.events, methods=["GET"]),
            Route("/signin", self.signin_page, methods=["GET"]),
            Route("/signin", self.signin_submit, methods=["POST"]),
            Route("/signout", self.signout, methods=["POST"]),
            Route("/fleet", self.fleet, methods=["GET"]),
            Route("/fleet/live", self.fleet_live, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/readyz", self.readyz, methods=["GET"]),
        ]

    # --- helpers -------------------------------------------------------------------------

    def user(self, request: Request) -> str | None:
        return current_user(request, self.signin)

    def to_signin(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(
            f"{self.render.root}/signin?{urlencode({'next': target})}", status_code=303
        )

    def base(self, request: Request, user: str | None) -> dict[str, Any]:
        return {"user": user, "csrf": csrf_token(request)}

    def render_item(self, entry: InboxEntry) -> str:
        return self.render.text("_item.html", {"e": entry})

    async def visible(self, user: str, selector: dict[str, str]) -> list[InboxEntry]:
        """The entries `user` may see under the filter; any the group no longer holds
        (settled while no replica was there to hear it) are taken off on the way."""
        entries = [
            e
            for e in await self.inbox.entries()
            if self.access.allows(user, e.scope) and scope_matches(selector, e.scope)
        ]
        held = await asyncio.gather(*(self.group.holds(e.id) for e in entries))
        for entry, holds in zip(entries, held, strict=True):
            if not holds:
                await self._settle_stale(entry.id)
        return [e for e, holds in zip(entries, held, strict=True) if holds]

    async def _settle_stale(self, request_id: str) -> None:
        settlement = await self.group.settlement(request_id)
        if settlement is not None:
            await self.inbox.settle(
                request_id,
                settlement.state,
                by=settlement.by,
                code=settlement.code,
                overwrite=False,
            )
        else:
            await self.inbox.settle(request_id, "OFFERED", by=None, code=None, overwrite=False)

    async def snapshot(self, sub: Subscriber) -> Message:
        if sub.only is not None:  # an answer page has no list to refresh
            return sse("snapshot", {"html": "", "count": 0})
        entries = await self.visible(sub.user, sub.selector)
        html = self.render.text("_list.html", {"entries": entries})
        return sse("snapshot", {"html": html, "count": len(entries)})

    # --- sign-in -------------------------------------------------------------------------

    async def signin_page(self, request: Request) -> Response:
        user = self.user(request)
        target = _safe_next(request.query_params.get("next", ""))
        if user is not None:
            return RedirectResponse(self.render.root + target, status_code=303)
        return self.render.page("signin.html", self._signin_context(request, target))

    def _signin_context(self, request: Request, target: str, error: str = "") -> dict[str, Any]:
        return {
            **self.base(request, None),
            "next": target,
            "error": error,
            "token_signin": bool(self.signin.users),
            "proxy_signin": bool(self.signin.proxy_header),
        }

    async def signin_submit(self, request: Request) -> Response:
        form = await request.form()
        target = _safe_next(str(form.get("next") or "/"))
        if not csrf_ok(request, form):
            return self.render.page(
                "signin.html",
                self._signin_context(request, target, "The form expired; please try again."),
                403,
            )
        wait = await self.throttle.address_over(request)
        if wait is not None:
            log.warning("sign-in attempts from %s over the limit", request.client)
            return self._too_many(wait)
        user = self.signin.user_for_token(str(form.get("token") or ""))
        if user is not None and (wait := await self.throttle.user_over(user)) is not None:
            log.warning("sign-ins as %s over the limit", user)
            return self._too_many(wait)
        if user is None:
            log.info("a sign-in with an unknown token from %s", request.client)
            return self.render.page(
                "signin.html",
                self._signin_context(request, target, "That token is not valid."),
                401,
            )
        request.session.clear()  # a fresh session (and CSRF token) for the signed-in user
        request.session["user"] = user
        return RedirectResponse(self.render.root + target, status_code=303)

    def _too_many(self, wait: int) -> Response:
        minutes = max(1, -(-wait // 60))
        page = self.render.problem(
            429,
            "Too many sign-in attempts",
            f"Too many sign-in attempts from this address or as this user, in a short"
            f" time. Try again in {minutes} minute{'s' if minutes > 1 else ''}.",
        )
        page.headers["Retry-After"] = str(wait)
        return page

    async def signout(self, request: Request) -> Response:
        form = await request.form()
        if not csrf_ok(request, form):
            return self.render.problem(403, "Not signed out", "The form expired; please try again.")
        request.session.clear()
        return RedirectResponse(self.render.root + "/signin", status_code=303)

    # --- the inbox -----------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        user = self.user(request)
        if user is None:
            return self.to_signin(request)
        scope_text = request.query_params.get("scope", "")
        try:
            selector = parse_selector(scope_text)
            error = ""
        except ValueError as exc:
            selector, error = {}, str(exc)
        entries = await self.visible(user, selector)
        query = f"?{urlencode({'scope': scope_text})}" if scope_text and not error else ""
        return self.render.page(
            "inbox.html",
            {
                **self.base(request, user),
                "entries": entries,
                "scope_text": scope_text,
                "scope_error": error,
                "stream_query": query,
            },
        )

    async def events(self, request: Request) -> Response:
        user = self.user(request)
        if user is None:
            return PlainTextResponse("sign in first", status_code=401)
        try:
            selector = parse_selector(request.query_params.get("scope", ""))
        except ValueError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        only = request.query_params.get("request") or None
        stream: AsyncIterator[Message] = self.hub.stream(user, selector, only)
        return EventSourceResponse(
            stream,
            ping=SSE_PING_SECONDS,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # --- a request -----------------------------------------------------------------------

    async def _request_for(self, request: Request, user: str) -> AskRequest | Response:
        request_id = request.path_params["request_id"]
        try:
            asked = await self.group.request(request_id)
        except AskError as exc:
            if exc.code is ErrorCode.NOT_FOUND:
                return self.render.problem(
                    404,
                    "No such question",
                    "This question does not exist or has expired.",
                    **self.base(request, user),
                )
            raise
        if not self.access.allows(user, asked.scope):
            return self.render.problem(
                403,
                "Not yours to answer",
                f"{user} may not see or answer questions of this scope.",
                **self.base(request, user),
            )
        return asked

    async def question(self, request: Request) -> Response:
        user = self.user(request)
        if user is None:
            return self.to_signin(request)
        asked = await self._request_for(request, user)
        if isinstance(asked, Response):
            return asked
        return await self._question_page(request, user, asked, FormState(), 200)

    async def _question_page(
        self,
        request: Request,
        user: str,
        asked: AskRequest,
        state: FormState,
        status: int,
        note: str = "",
    ) -> Response:
        context: dict[str, Any] = {
            **self.base(request, user),
            "request": asked,
            "stream": f"{self.render.root}/events?{urlencode({'request': asked.id})}",
            "recipient": None,
        }
        if await self.group.holds(asked.id):
            context.update(
                open=True,
                questions=asked.questions,
                state=state,
                action=f"{self.render.root}/q/{quote(asked.id)}",
                submit_label="Answer",
            )
        else:
            settlement = await self.group.settlement(asked.id)
            final = await self.inbox.final(asked.id)
            context.update(open=False, **final_context(asked, settlement, final, note))
        return self.render.page("question.html", context, status)

    async def submit(self, request: Request) -> Response:
        user = self.user(request)
        if user is None:
            return self.render.problem(
                401, "Sign in first", "Your answer was not sent: sign in, then answer again."
            )
        form = await request.form()
        if not csrf_ok(request, form):
            return self.render.problem(
                403,
                "Not sent",
                "The form could not be checked (a missing or stale form token): reload the page.",
                **self.base(request, user),
            )
        asked = await self._request_for(request, user)
        if isinstance(asked, Response):
            return asked
        if not await self.group.holds(asked.id):
            return await self._late(request, user, asked)
        state, answers = read_form(asked.questions, form)
        if answers is None:
            return await self._question_page(request, user, asked, state, 422)
        by = f"web:{user}"
        try:
            await self.group.answer(asked.id, answers, by=by)
        except AskError as exc:
            if exc.code in FINAL_REFUSALS:
                return await self._late(request, user, asked)
            if exc.code is ErrorCode.INVALID_REQUEST:
                log.info("a web answer to %s refused: %s", asked.id, exc.message)
                state.error = NOT_ACCEPTED
                return await self._question_page(request, user, asked, state, 422)
            raise
        await self.inbox.settle(asked.id, "ANSWERED", by=by, code=None, overwrite=True)
        return RedirectResponse(f"{self.render.root}/q/{quote(asked.id)}", status_code=303)

    async def _late(self, request: Request, user: str, asked: AskRequest) -> Response:
        settlement = await self.group.settlement(asked.id)
        final = await self.inbox.final(asked.id)
        context = final_context(asked, settlement, final)
        headline = context["headline"]
        if context["final_state"] == "ANSWERED":
            title = "Already answered"
            what = f"this question was already {headline[0].lower()}{headline[1:]}"
        else:
            title = "No longer waiting for an answer"
            what = "this question is no longer waiting for an answer"
        message = f"Your answer was not recorded: {what}."
        return self.render.problem(
            409, title, message, final=True, **context, **self.base(request, user)
        )

    # --- the dashboard -------------------------------------------------------------------

    async def _fleet_trends(self) -> FleetTrends:
        now = time.monotonic()
        if self._trends is None or now - self._trends[0] >= TRENDS_FRESH_SECONDS:
            self._trends = (now, await self.group.trends())
        return self._trends[1]

    async def _fleet_context(self) -> dict[str, Any]:
        status = await self.group.fleet()
        trends = await self._fleet_trends()
        pending = Counter((str(r.state), r.tier) for r in status.requests)
        return {
            "groups": status.groups,
            "replicas": sum(g.live_consumers for g in status.groups),
            "pending_total": status.pending_total,
            "pending_by_state": status.pending_by_state,
            "pending_by_tier": status.pending_by_tier,
            "pending": sorted(
                pending.items(), key=lambda kv: (kv[0][1] is None, kv[0][1], kv[0][0])
            ),
            "sweepers": status.sweepers,
            "failed_sends": status.failed_sends,
            "failed_total": status.failed_sends_total,
            "settlements": [
                {**row.model_dump(), "outcome": _outcome(row)}
                for row in await self.group.recent_settlements(RECENT_SHOWN)
            ],
            "open_streams": self.hub.open_streams,
            "group": self.group.name,
            "charts": charts(trends),
        }

    async def fleet(self, request: Request) -> Response:
        user = self.user(request)
        if user is None:
            return self.to_signin(request)
        return self.render.page(
            "fleet.html", {**self.base(request, user), **await self._fleet_context()}
        )

    async def fleet_live(self, request: Request) -> Response:
        """The dashboard's body, which the page fetches again every few seconds."""
        if self.user(request) is None:
            return PlainTextResponse("sign in first", status_code=401)
        return self.render.page("_fleet_body.html", await self._fleet_context())

    # --- health --------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(self, request: Request) -> Response:
        try:
            await self.inbox.store.fields("readyz", "x")  # Redis answers
        except AskError as exc:
            return PlainTextResponse(f"not ready: {exc.message}", status_code=503)
        if not self.group.live:
            return PlainTextResponse("not ready: the group is not registered yet", status_code=503)
        return PlainTextResponse("ready")


def _outcome(row: RecentSettlement) -> str:
    """A settlement as the inbox words it ("answered in Slack by U01", "cancelled: the
    turn was aborted"); the group it went through has a column of its own."""
    if row.state == "ANSWERED" and not row.by:
        return "answered with the ask's default"
    return reason_for(str(row.state), row.by or None, row.code or None, row.reason or None)


def _safe_next(target: str) -> str:
    """Only a path of this site (no //host, no scheme): an open redirect otherwise."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
