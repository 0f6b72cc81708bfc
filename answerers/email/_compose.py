"""The emails the channel writes: the question (text and HTML alternatives), and the
replies in its thread (feedback, reminders, "answered elsewhere").

Agent text is data everywhere: in the text part it passes through `askq.visible`
(control and invisible characters written out), in the HTML part it is escaped after
that, and in a header (the subject) it is `visible` on one line and cut, so a header
or question with CR/LF cannot add a header. The HTML loads nothing remote: no images,
no stylesheets, inline styles only; links are the signed answer links, if configured.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate

from askq import AskRequest, Question, visible

# The line a reply is cut at: everything below it is the quoted question.
REPLY_ABOVE = "##- Please type your reply above this line -##"
SUBJECT_MAX = 120
SUBJECT_PREFIX = "[askq] "

# (question id, option label or None) -> the URL of a signed answer link, or None.
LinkMaker = Callable[[str, str | None], str | None]


def header_text(text: str, limit: int) -> str:
    """Agent text fit for a header: one line (CR, LF and other controls written out
    as escapes), collapsed spaces, at most `limit` characters."""
    one_line = " ".join(visible(text).split())
    cut = one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
    assert "\r" not in cut and "\n" not in cut
    return cut


def subject(questions: Sequence[Question]) -> str:
    if len(questions) == 1:
        first = questions[0]
        text = f"{first.header}: {first.question}"
    else:
        text = ", ".join(q.header for q in questions) + f" ({len(questions)} questions)"
    return SUBJECT_PREFIX + header_text(text, SUBJECT_MAX - len(SUBJECT_PREFIX))


def message_id(request_id: str, recipient: str, domain: str, group: str) -> str:
    """The question email's Message-ID: one per request, recipient and group, the same
    on every try, so a resent copy is the same message to the receiving side (and the
    next group's mail about the same request, to the same person, is another one)."""
    tag = hashlib.sha256(f"{group}\n{recipient}".encode()).hexdigest()[:12]
    return f"<askq.{request_id}.{tag}@{domain}>"


def option_numbers(question: Question) -> str:
    n = len(question.options)
    return "1" if n == 1 else ("1 or 2" if n == 2 else f"1 to {n}")


def instructions(questions: Sequence[Question]) -> list[str]:
    """How to answer by reply, a line each."""
    if len(questions) > 1:
        return [
            "Reply with one line per question: its number, a colon, and your answer",
            "(an option's number or name, several numbers for a multiple choice, or your"
            " own words), e.g.",
            *(
                f"  {i}: {'1' if q.options else 'your own words'}"
                for i, q in enumerate(questions, 1)
            ),
        ]
    question = questions[0]
    if not question.options:
        return ["Reply with your answer."]
    if question.multi_select:
        return [
            f"Reply with the numbers of your choices ({option_numbers(question)}),"
            " e.g. 1, 3 — or with your own words."
        ]
    return [f"Reply with {option_numbers(question)} (or the option's name), or your own words."]


# --- text --------------------------------------------------------------------------


def question_text(questions: Sequence[Question], links: LinkMaker | None = None) -> list[str]:
    lines: list[str] = []
    for number, question in enumerate(questions, 1):
        head = visible(question.header)
        if len(questions) > 1:
            head = f"Question {number} of {len(questions)} · {head}"
        lines += [head, "", visible(question.question, multiline=True), ""]
        for i, option in enumerate(question.options, 1):
            mark = " (several may be chosen)" if question.multi_select and i == 1 else ""
            lines.append(f"  {i}. {visible(option.label)}{mark}")
            if option.description:
                lines.append(f"     {visible(option.description, multiline=True)}")
            url = links(question.id, option.label) if links and len(questions) == 1 else None
            if url and not question.multi_select:
                lines.append(f"     answer this in your browser: {url}")
        if question.options:
            lines.append("")
    return lines


def question_body(
    request: AskRequest, links: LinkMaker | None, *, preface: Sequence[str] = ()
) -> str:
    lines = [REPLY_ABOVE, "", *preface]
    lines += question_text(request.questions, links)
    lines += instructions(request.questions)
    page = links(request.questions[0].id, None) if links else None
    if page:
        lines += ["", f"Or answer in your browser: {page}"]
    lines += ["", "-- ", footer(request)]
    return "\n".join(lines) + "\n"


def footer(request: AskRequest) -> str:
    caller = request.caller
    return (
        f"Asked by agent {visible(caller.agent_id)} (turn {visible(caller.turn_id)})"
        f" through askq · request {request.id}"
    )


# --- HTML --------------------------------------------------------------------------

_BUTTON = (
    "display:inline-block;margin:2px 6px 2px 0;padding:6px 12px;border-radius:4px;"
    "background:#1a73e8;color:#ffffff;text-decoration:none;font-weight:bold"
)


def _h(text: str, *, multiline: bool = False) -> str:
    return html.escape(visible(text, multiline=multiline), quote=True)


def question_html(
    request: AskRequest, links: LinkMaker | None, *, preface: Sequence[str] = ()
) -> str:
    questions = request.questions
    parts = [
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
        '<body style="font-family:sans-serif;font-size:14px;color:#202124">',
        f'<p style="color:#80868b;font-size:12px">{html.escape(REPLY_ABOVE)}</p>',
    ]
    parts += [f"<p>{_h(line)}</p>" for line in preface if line]
    for number, question in enumerate(questions, 1):
        head = _h(question.header)
        if len(questions) > 1:
            head = f"Question {number} of {len(questions)} · {head}"
        parts.append(f'<h3 style="margin:16px 0 4px">{head}</h3>')
        parts.append(f'<p style="white-space:pre-wrap">{_h(question.question, multiline=True)}</p>')
        if question.options:
            parts.append("<ol>")
            for option in question.options:
                description = (
                    f'<br><span style="color:#5f6368">{_h(option.description, multiline=True)}'
                    "</span>"
                    if option.description
                    else ""
                )
                parts.append(f"<li><b>{_h(option.label)}</b>{description}</li>")
            parts.append("</ol>")
            if links and len(questions) == 1 and not question.multi_select:
                buttons = [
                    f'<a href="{html.escape(url, quote=True)}" style="{_BUTTON}">'
                    f"{_h(option.label)}</a>"
                    for option in question.options
                    if (url := links(question.id, option.label))
                ]
                if buttons:
                    parts.append("<p>" + "".join(buttons) + "</p>")
    parts.append("<p>" + "<br>".join(html.escape(x) for x in instructions(questions)) + "</p>")
    page = links(questions[0].id, None) if links else None
    if page:
        parts.append(
            f'<p><a href="{html.escape(page, quote=True)}">Answer in your browser</a>'
            " (you will be asked to confirm).</p>"
        )
    parts.append(f'<p style="color:#80868b;font-size:12px">{html.escape(footer(request))}</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# --- messages ----------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """Who a message is from and to, and how it threads."""

    from_address: str
    from_name: str
    to: str
    reply_to: str
    message_id: str
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()


def new_message(envelope: Envelope, subject_text: str) -> EmailMessage:
    msg = EmailMessage()
    local, _, domain = envelope.from_address.partition("@")
    msg["From"] = Address(display_name=envelope.from_name, username=local, domain=domain)
    msg["To"] = envelope.to
    msg["Reply-To"] = envelope.reply_to
    msg["Subject"] = subject_text
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = envelope.message_id
    if envelope.in_reply_to:
        msg["In-Reply-To"] = envelope.in_reply_to
        msg["References"] = " ".join((*envelope.references, envelope.in_reply_to))
    # Written by a program: RFC 3834 responders (out-of-office) must not answer it,
    # and Exchange is asked not to either.
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Auto-Response-Suppress"] = "All"
    return msg


def question_message(
    request: AskRequest,
    envelope: Envelope,
    links: LinkMaker | None,
    *,
    preface: Sequence[str] = (),
    in_thread: bool = False,
) -> EmailMessage:
    """The question email; `in_thread`: a reply in its thread that shows the question
    again under `preface` (a reminder, "I could not read your answer")."""
    title = subject(request.questions)
    msg = new_message(envelope, f"Re: {title}" if in_thread else title)
    msg["X-Askq-Request"] = request.id
    msg.set_content(question_body(request, links, preface=preface))
    msg.add_alternative(question_html(request, links, preface=preface), subtype="html")
    return msg


def note_message(envelope: Envelope, subject_text: str, lines: Sequence[str]) -> EmailMessage:
    """A short reply in the question's thread (feedback, "answered elsewhere"): text,
    with an HTML alternative of the same lines."""
    msg = new_message(envelope, subject_text)
    msg.set_content("\n".join(lines) + "\n")
    body = "".join(f"<p>{html.escape(line)}</p>" if line else "" for line in lines)
    msg.add_alternative(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}</body></html>\n',
        subtype="html",
    )
    return msg
