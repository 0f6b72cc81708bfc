"""The emails the channel writes: the question (text and HTML alternatives), and the
replies in its thread (feedback, reminders, "answered elsewhere").

The first line is what an inbox shows as the preview: the question (its lead line),
then the marker a reply is cut at, then the options, how to answer, and the links. The
HTML part says the same, and lists each option once (its label the button of its
link). A recipient who may not answer (copied for information) is told so, and gets
no reply instructions and no links.

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

# The line a reply is cut at: everything below it is the quoted question. It is the
# second line, not the first: an inbox's preview shows a message's first words, and
# those are the lead line above it (the question, or what a reply in the thread says).
REPLY_ABOVE = "##- Please type your reply above this line -##"
SUBJECT_MAX = 120
SUBJECT_PREFIX = "[askq] "
# The lead line is cut to this, so that no client re-wraps it when it quotes it (a
# reply is read knowing the quote starts at the lead line above the marker).
LEAD_MAX = 72
# The lead lines of the replies in the thread that show the question again: a reply
# is read knowing these start the quote too.
REMINDER = "Reminder: this question is still waiting for your answer."
UNREADABLE = "I could not read your answer:"
INFORMATION_ONLY = (
    "You are receiving this question for your information only: a reply from you is not"
    " recorded as an answer."
)

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


def link_choices(questions: Sequence[Question]) -> list[tuple[str, str | None]]:
    """The links a question email carries, as (question id, option label or None): a
    link per option of a lone single-select question, and one to the answer page."""
    choices: list[tuple[str, str | None]] = []
    if len(questions) == 1 and not questions[0].multi_select:
        choices = [(questions[0].id, label) for label in questions[0].labels]
    return [*choices, (questions[0].id, None)]


def _option_link(
    links: LinkMaker | None, questions: Sequence[Question], question: Question, label: str
) -> str | None:
    if links is None or len(questions) != 1 or question.multi_select:
        return None
    return links(question.id, label)


def lead_line(questions: Sequence[Question]) -> str:
    """The question email's first line, which an inbox shows as its preview: the
    question (cut to one short line), or the questions' texts."""
    return header_text(" · ".join(" ".join(q.question.split()) for q in questions), LEAD_MAX)


def _lead_says_it_all(questions: Sequence[Question]) -> bool:
    """The lead line is the whole question (one short line): not repeated below it."""
    question = questions[0].question
    return (
        len(questions) == 1 and "\n" not in question and lead_line(questions) == visible(question)
    )


def reply_leads(questions: Sequence[Question]) -> tuple[str, ...]:
    """The lead lines a message the channel sent about these questions may start with
    (the reader of a reply looks for them just above the marker)."""
    return (lead_line(questions), REMINDER, UNREADABLE)


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


def _top(
    questions: Sequence[Question], preface: Sequence[str], may_answer: bool
) -> tuple[str, list[str]]:
    """The lead line, and what follows the marker before the questions (the rest of
    the preface, or the note that this recipient may not answer)."""
    if not may_answer:
        return lead_line(questions), [INFORMATION_ONLY, ""]
    if not preface:
        return lead_line(questions), []
    first = header_text(preface[0], LEAD_MAX)
    rest = preface[1:] if first == visible(preface[0]) else preface  # cut: say it in full
    return first, [visible(line) for line in rest]


# --- text --------------------------------------------------------------------------


def question_text(
    questions: Sequence[Question], links: LinkMaker | None = None, *, lead_is_question: bool = False
) -> list[str]:
    lines: list[str] = []
    for number, question in enumerate(questions, 1):
        if not lead_is_question:
            head = visible(question.header)
            if len(questions) > 1:
                head = f"Question {number} of {len(questions)} · {head}"
            lines += [head, "", visible(question.question, multiline=True), ""]
        for i, option in enumerate(question.options, 1):
            mark = " (several may be chosen)" if question.multi_select and i == 1 else ""
            lines.append(f"  {i}. {visible(option.label)}{mark}")
            if option.description:
                lines.append(f"     {visible(option.description, multiline=True)}")
            url = _option_link(links, questions, question, option.label)
            if url:
                lines.append(f"     choose it in your browser: {url}")
        if question.options:
            lines.append("")
    return lines


def question_body(
    request: AskRequest,
    links: LinkMaker | None,
    *,
    preface: Sequence[str] = (),
    may_answer: bool = True,
) -> str:
    questions = request.questions
    lead, below = _top(questions, preface, may_answer)
    lines = [lead, REPLY_ABOVE] if may_answer else [lead]
    lines += ["", *below, ""]
    lines += question_text(
        questions, links, lead_is_question=not preface and _lead_says_it_all(questions)
    )
    if may_answer:
        lines += ["", *instructions(questions)]
        page = links(questions[0].id, None) if links else None
        if page:
            lines += [f"Or answer in your browser: {page}"]
    lines += ["", "-- ", footer(request)]
    return "\n".join(_single_blanks(lines)) + "\n"


def _single_blanks(lines: list[str]) -> list[str]:
    """No two blank lines in a row (the parts each end with one, or none)."""
    return [x for i, x in enumerate(lines) if x or (i > 0 and lines[i - 1])]


def footer(request: AskRequest) -> str:
    return f"Asked by agent {visible(request.caller.agent_id)} through askq."


# --- HTML --------------------------------------------------------------------------

_BUTTON = (
    "display:inline-block;padding:4px 10px;border-radius:4px;"
    "background:#1a73e8;color:#ffffff;text-decoration:none;font-weight:bold"
)
_GREY = "color:#80868b;font-size:12px"


def _h(text: str, *, multiline: bool = False) -> str:
    return html.escape(visible(text, multiline=multiline), quote=True)


def _options_html(
    questions: Sequence[Question], question: Question, links: LinkMaker | None
) -> list[str]:
    """The options, once: a numbered list, each label a button when it has a link."""
    parts = ['<ol style="padding-left:24px">']
    for option in question.options:
        url = _option_link(links, questions, question, option.label)
        label = (
            f'<a href="{html.escape(url, quote=True)}" style="{_BUTTON}">{_h(option.label)}</a>'
            if url
            else f"<b>{_h(option.label)}</b>"
        )
        description = (
            f'<br><span style="color:#5f6368">{_h(option.description, multiline=True)}</span>'
            if option.description
            else ""
        )
        parts.append(f'<li style="margin:6px 0">{label}{description}</li>')
    parts.append("</ol>")
    return parts


def question_html(
    request: AskRequest,
    links: LinkMaker | None,
    *,
    preface: Sequence[str] = (),
    may_answer: bool = True,
) -> str:
    questions = request.questions
    # The lead is the text's lead line, but whole (HTML is not re-wrapped when quoted),
    # and on one line (a reply's reader knows the line just above the marker).
    one_line = len(questions) == 1 and "\n" not in questions[0].question.strip()
    lead_is_question = one_line and (not preface or not may_answer)
    if lead_is_question:
        lead = _h(questions[0].question.strip())
        below = [] if may_answer else [INFORMATION_ONLY]
    elif preface and may_answer:
        lead, below = _h(preface[0]), [visible(line) for line in preface[1:]]
    else:
        lead, below = html.escape(lead_line(questions)), [] if may_answer else [INFORMATION_ONLY]
    parts = [
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
        '<body style="font-family:sans-serif;font-size:14px;color:#202124">',
        f'<p style="font-size:16px;font-weight:bold">{lead}</p>',
    ]
    if may_answer:
        parts.append(f'<p style="{_GREY}">{html.escape(REPLY_ABOVE)}</p>')
    parts += [f"<p>{html.escape(line)}</p>" for line in below if line]
    for number, question in enumerate(questions, 1):
        if not lead_is_question:
            head = _h(question.header)
            if len(questions) > 1:
                head = f"Question {number} of {len(questions)} · {head}"
            parts.append(f'<h3 style="margin:16px 0 4px">{head}</h3>')
            parts.append(
                f'<p style="white-space:pre-wrap">{_h(question.question, multiline=True)}</p>'
            )
        if question.options:
            if question.multi_select:
                parts.append('<p style="color:#5f6368">Several may be chosen.</p>')
            parts += _options_html(questions, question, links)
    if may_answer:
        parts.append("<p>" + "<br>".join(html.escape(x) for x in instructions(questions)) + "</p>")
        page = links(questions[0].id, None) if links else None
        if page:
            parts.append(
                f'<p><a href="{html.escape(page, quote=True)}">Answer in your browser</a>'
                " (you will be asked to confirm).</p>"
            )
    parts.append(f'<p style="{_GREY}">{html.escape(footer(request))}</p>')
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
    may_answer: bool = True,
) -> EmailMessage:
    """The question email; `in_thread`: a reply in its thread that shows the question
    again under `preface` (a reminder, "I could not read your answer"). `may_answer`
    False: for a recipient copied for information, whose reply would not count: no
    reply instructions, no marker, no links, and a line that says so."""
    title = subject(request.questions)
    msg = new_message(envelope, f"Re: {title}" if in_thread else title)
    msg["X-Askq-Request"] = request.id
    links = links if may_answer else None
    msg.set_content(question_body(request, links, preface=preface, may_answer=may_answer))
    msg.add_alternative(
        question_html(request, links, preface=preface, may_answer=may_answer), subtype="html"
    )
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
