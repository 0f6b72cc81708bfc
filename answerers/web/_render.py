"""Pages from the package's Jinja2 templates, every one autoescaped (agent text is data,
never markup), with the headers every page carries: a strict Content-Security-Policy
(scripts, styles and everything else from this origin only; no inline script), no
Referer (a link's token must not leak to another site), no framing, no caching."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from starlette.responses import HTMLResponse

from askq import Answers, AskRequest, Settlement, answered_by

from ._inbox import Final

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
STATIC_PATH = "/static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def age(created_ms: int, now: float | None = None) -> str:
    seconds = max(0, int((now if now is not None else time.time()) - created_ms / 1000))
    if seconds < 60:
        return "just now" if seconds < 5 else f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def noun(n: int, one: str, many: str | None = None) -> str:
    """The noun that fits a count: 1 group, 2 groups (`many`: when not `one` + s)."""
    return one if n == 1 else (many or one + "s")


class Renderer:
    def __init__(self, root: str = "") -> None:
        self.root = root  # where the app is mounted ("" at the top)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.globals.update(age=age, when=when, noun=noun)

    def text(self, name: str, context: Mapping[str, Any]) -> str:
        base = {"root": self.root, "static_url": self.root + STATIC_PATH, "user": None, "csrf": ""}
        return self.env.get_template(name).render({**base, **context})

    def page(
        self, name: str, context: Mapping[str, Any], status: int = 200, **headers: str
    ) -> HTMLResponse:
        return HTMLResponse(
            self.text(name, context), status_code=status, headers={**PAGE_HEADERS, **headers}
        )

    def problem(self, status: int, title: str, message: str, **context: Any) -> HTMLResponse:
        context.setdefault("final", False)
        return self.page(
            "error.html", {"status": status, "title": title, "message": message, **context}, status
        )


def final_context(
    request: AskRequest, settlement: Settlement | None, final: Final | None, note: str = ""
) -> dict[str, Any]:
    """What `_final.html` shows: the outcome, who, when, and the answers given."""
    state = settlement.state if settlement is not None else (final.state if final else "OFFERED")
    by = (settlement.by if settlement is not None else None) or (final.by if final else None)
    if state == "ANSWERED":
        headline = _capital(answered_by(by))
        if settlement is not None and settlement.defaulted:
            headline = "Answered with the ask's default: nobody answered in time"
    elif state == "CANCELLED":
        headline = "Cancelled"
    elif state == "FAILED":
        headline = "No longer waiting for an answer"
    else:
        headline = "No longer waiting for an answer here"
    if final is not None and final.at and final.state == state:  # the record is of this outcome
        headline += f" at {when(final.at)}"
    pairs: list[tuple[Any, Any]] = []
    if settlement is not None and settlement.answers:
        answers = Answers(answers=settlement.answers)
        by_id = {a.id: a for a in answers.answers}
        pairs = [(q, by_id[q.id]) for q in request.questions if q.id in by_id]
    reason = final.reason if final is not None else ""
    if settlement is not None and settlement.message and state != "ANSWERED":
        reason = reason or settlement.message
    return {
        "final_state": str(state),
        "headline": headline,
        "note": note or (reason if state != "ANSWERED" else ""),
        "answers": pairs,
    }


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
