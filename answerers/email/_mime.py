"""An inbound message (raw MIME) -> what the channel needs to know about it: who sent
it, which of our return addresses it went to, whether a program wrote it (an
out-of-office, a bounce), and the person's reply text without the quoted question,
the quoted history or the signature.

Reply parsing has no standard, so it is layered: our own marker line (a question mail
starts with its lead line, the question an inbox previews, then "##- Please type your
reply above this line -##"; every client quotes both: the quote starts at the lead
line when it is one the channel wrote, else at the marker), then mail-parser-reply
(the "On … wrote:" / "From: … Sent: …" headers of many languages and clients, and
signatures), then any `>` line that is left. An HTML-only
reply is turned into text first, without its `<blockquote>` and the quote containers
of Gmail, Outlook, Apple Mail and Thunderbird.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses
from html.parser import HTMLParser

from mailparser_reply import EmailReplyParser

from ._compose import REPLY_ABOVE
from ._routes import normal

log = logging.getLogger("askq.email")

LANGUAGES = ["en", "de", "fr", "es", "it", "nl", "pt", "sv", "pl", "ja", "zh"]
_AUTO_SUBJECT = re.compile(
    r"^\s*(?:auto(?:matic)?[ -]?(?:reply|response|antwort)|out of (?:the )?office|"
    r"abwesenheit|absence|r[ée]ponse automatique|respuesta autom[aá]tica|vacation)",
    re.IGNORECASE,
)
_DAEMONS = ("mailer-daemon", "postmaster")
MARKER = REPLY_ABOVE.strip("#- ").casefold()  # "please type your reply above this line"
LEAD_PREFIX = 24  # a lead line is known by its first characters (a client may cut or wrap it)
_MSGID = re.compile(r"^<[!-;=?-~]{1,250}>$")  # printable ASCII, no spaces, no < or >
MAX_REFERENCES = 20


@dataclass(frozen=True)
class Inbound:
    message: EmailMessage
    sender: str | None  # the From address, normalized
    recipients: tuple[str, ...]  # envelope recipients, then To / Cc / Delivered-To
    mail_from: str | None  # the envelope sender, if known ("" for a null sender)
    message_id: str | None
    references: tuple[str, ...] = field(default=())

    @property
    def subject(self) -> str:
        return str(self.message.get("Subject", ""))


def parse(raw: bytes, *, mail_from: str | None = None, rcpt_tos: tuple[str, ...] = ()) -> Inbound:
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    senders = [a for _, a in getaddresses([str(v) for v in message.get_all("From", [])]) if a]
    heard: list[str] = [normal(a) for a in rcpt_tos]
    for name in ("To", "Cc", "Delivered-To", "X-Original-To"):
        values = [str(v) for v in message.get_all(name, [])]
        heard += [normal(a) for _, a in getaddresses(values) if a]
    # Threading ids go back out in our headers: only well-formed ones, and a few.
    references = tuple(r for r in str(message.get("References", "")).split() if _MSGID.match(r))
    message_id = str(message.get("Message-ID", "")).strip()
    return Inbound(
        message=message,
        sender=normal(senders[0]) if len(senders) == 1 else None,
        recipients=tuple(dict.fromkeys(heard)),
        mail_from=mail_from,
        message_id=message_id if _MSGID.match(message_id) else None,
        references=references[-MAX_REFERENCES:],
    )


# --- written by a program? ---------------------------------------------------------


def auto_reply(inbound: Inbound) -> str | None:
    """Why this looks like an automatic reply (RFC 3834 and the usual vendor headers,
    out-of-office subjects), or None for a person's mail."""
    message = inbound.message
    submitted = str(message.get("Auto-Submitted", "")).strip().lower()
    if submitted and submitted != "no":
        return f"Auto-Submitted: {submitted}"
    for name in ("X-Autoreply", "X-Autorespond", "X-Autoresponder", "X-AutoReply-From"):
        if message.get(name) is not None:
            return name
    precedence = str(message.get("Precedence", "")).strip().lower()
    if precedence in ("auto_reply", "bulk", "junk", "list"):
        return f"Precedence: {precedence}"
    if _AUTO_SUBJECT.match(inbound.subject):
        return "an automatic-reply subject"
    return None


@dataclass(frozen=True)
class Bounce:
    failed: bool  # a permanent failure (Action: failed), not a delay
    recipients: tuple[str, ...]  # Final-Recipient addresses, if the report names them
    diagnostic: str


def bounce(inbound: Inbound) -> Bounce | None:
    """The delivery report this message is (RFC 3464), or a non-standard bounce (a null
    envelope sender, mail from MAILER-DAEMON); None when it is neither."""
    message = inbound.message
    reports = [
        part
        for part in message.walk()
        if part.get_content_type() in ("message/delivery-status", "message/global-delivery-status")
    ]
    if reports:
        actions: list[str] = []
        finals: list[str] = []
        diagnostic = ""
        for report in reports:
            for block in _blocks(report):
                action = str(block.get("Action", "")).strip().lower()
                if action:
                    actions.append(action)
                final = str(block.get("Final-Recipient", "") or block.get("Original-Recipient", ""))
                if ";" in final:
                    finals.append(normal(final.split(";", 1)[1]))
                diagnostic = diagnostic or str(block.get("Diagnostic-Code", "")).strip()
        return Bounce("failed" in actions, tuple(finals), diagnostic or "delivery failed")
    local = (inbound.sender or "").partition("@")[0]
    if inbound.mail_from == "" or local in _DAEMONS:
        return Bounce(True, (), inbound.subject or "undeliverable")
    return None


def _blocks(report: Message) -> list[Message]:
    payload = report.get_payload()
    if isinstance(payload, list):
        return [p for p in payload if isinstance(p, Message)]
    # Some parsers leave the status text unparsed: read its header blocks ourselves.
    text = payload if isinstance(payload, str) else ""
    parser = BytesParser(policy=policy.default)
    return [parser.parsebytes(chunk.encode()) for chunk in re.split(r"\n\s*\n", text) if chunk]


# --- the person's words ------------------------------------------------------------


class _HtmlText(HTMLParser):
    """Text of an HTML reply, without what clients use to quote the earlier mail."""

    SKIP = frozenset({"head", "style", "script", "title", "blockquote"})
    QUOTE_CLASSES = (  # quoted mail, and signatures the client marks as such
        "gmail_quote",
        "gmail_signature",
        "moz-cite-prefix",
        "moz-signature",
        "yahoo_quoted",
        "protonmail_quote",
        "protonmail_signature_block",
    )
    STOP_IDS = ("appendonsend", "divrplyfwdmsg", "mail-editor-reference-message-container")
    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "hr"})
    VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[bool] = []  # per open element: is it (inside) a skipped one
        self.stopped = False

    def _skipping(self) -> bool:
        return self.stopped or any(self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: (v or "").lower() for k, v in attrs}
        if found.get("id", "") in self.STOP_IDS:
            self.stopped = True
        if tag in self.BLOCKS and not self._skipping():
            self.parts.append("\n")
        if tag in self.VOID:
            return
        classes = found.get("class", "")
        skip = tag in self.SKIP or any(c in classes for c in self.QUOTE_CLASSES)
        skip = skip or (tag == "div" and found.get("type") == "cite")  # Apple Mail
        self.stack.append(skip)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if self.stack:
            self.stack.pop()
        if tag in self.BLOCKS and not self._skipping():
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping():
            self.parts.append(data)


def html_text(markup: str) -> str:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(lines)


def _content(part: EmailMessage) -> str:
    try:
        content = part.get_content()
    except (LookupError, UnicodeDecodeError, AssertionError):
        raw = part.get_payload(decode=True)
        content = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else ""
    return content if isinstance(content, str) else ""


def body_text(message: EmailMessage) -> str:
    """The reply's text: its text/plain part, else its text/html part as text."""
    part = message.get_body(preferencelist=("plain", "html"))
    if not isinstance(part, EmailMessage):
        return ""
    text = _content(part)
    return html_text(text) if part.get_content_type() == "text/html" else text


def _bare(line: str) -> str:
    """A line as written, whether quoted (`> `, `> > `) or not, for comparing."""
    return " ".join(line.lstrip("> \t").split()).casefold()


def _quote_starts(lines: list[str], marker: int, leads: Sequence[str]) -> int:
    """Where our quoted message starts: at its lead line (the last line with words
    above the marker), when that is one of `leads`; else at the marker."""
    for index in range(marker - 1, max(marker - 4, -1), -1):
        seen = _bare(lines[index])
        if not seen:
            continue  # a blank (or bare `>`) line a client put between
        for lead in leads:
            wanted = _bare(lead)[:LEAD_PREFIX]
            if wanted and seen[: len(wanted)] == wanted:
                return index
        break
    return marker


def strip_quoted(text: str, leads: Sequence[str] = ()) -> str:
    """The newest part of a reply: above our quoted message (its lead line, one of
    `leads`, then our marker), above the quoted history, without the signature or any
    line quoted with `>`. A reply written below the quote (bottom-posted) has nothing
    above it: then it is what follows the last `>` line."""
    lines = text.replace("\r\n", "\n").split("\n")
    marker = next((i for i, line in enumerate(lines) if MARKER in line.casefold()), None)
    if marker is None:
        return _newest(text)
    above = _newest("\n".join(lines[: _quote_starts(lines, marker, leads)]))
    if above:
        return above
    quoted = [i for i, line in enumerate(lines) if line.lstrip().startswith(">")]
    if quoted and quoted[-1] >= marker:
        return _newest("\n".join(lines[quoted[-1] + 1 :]))
    return ""


def _newest(text: str) -> str:
    """The first fragment with a body, per mail-parser-reply ("On … wrote:" and the
    like split fragments; signatures and disclaimers are dropped), without `>` lines."""
    try:
        parsed = EmailReplyParser(languages=LANGUAGES).read(text)
        bodies = [reply.body for reply in parsed.replies if reply.body]
        text = bodies[0] if bodies else ""
    except Exception:  # noqa: BLE001 - a heuristic that fails leaves the text as it is
        log.warning("mail-parser-reply failed on a reply; using its text unstripped")
    kept = [line for line in text.split("\n") if not line.lstrip().startswith(">")]
    return "\n".join(kept).strip()


def reply_text(message: EmailMessage, leads: Sequence[str] = ()) -> str:
    """The person's words in a reply; `leads`: the lead lines our messages about its
    question start with (`_compose.reply_leads`)."""
    return strip_quoted(body_text(message), leads)
