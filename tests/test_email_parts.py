"""The email answerer's parts without a server: reading replies, stripping quoted
history, routes and settings, the reply addresses, and what a question email holds."""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from typing import Any

import pytest
from email_standin import SECRET

from askq import AskError, AskRequest, Caller, ErrorCode, Question
from askq.answerers.email import (
    EmailConfig,
    EmailSettings,
    ReplyAddresses,
    Unreadable,
    parse,
    parse_routes,
    question_message,
    read_answers,
    reply_text,
)
from askq.answerers.email._compose import Envelope, header_text, reply_leads
from askq.answerers.email._mime import auto_reply, bounce, html_text, strip_quoted

SEED_Q = Question.model_validate(
    {
        "id": "cleanup",
        "header": "Cleanup",
        "question": "Delete the 3 stale branches?",
        "options": [
            {"label": "Yes, delete them (Recommended)"},
            {"label": "No, keep them"},
        ],
    }
)
LANGS = Question.model_validate(
    {
        "id": "langs",
        "header": "Languages",
        "question": "Which?",
        "multiSelect": True,
        "options": [{"label": "Python (Recommended)"}, {"label": "Go"}, {"label": "Rust"}],
    }
)
NAME = Question.model_validate({"id": "name", "header": "Name", "question": "Called?"})


def selected(questions: list[Question], text: str) -> list[Any]:
    return [(a["selected"], a.get("custom")) for a in read_answers(questions, text)]


# --- reading ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("1", ["Yes, delete them (Recommended)"]),
        ("2.", ["No, keep them"]),
        ("  2  \n\nThanks,", ["No, keep them"]),
        ("yes, delete them", ["Yes, delete them (Recommended)"]),
        ("YES, DELETE THEM (recommended)", ["Yes, delete them (Recommended)"]),
        ('"No, keep them"', ["No, keep them"]),
        ("2. No, keep them", ["No, keep them"]),
        ("1: 2", ["No, keep them"]),
    ],
)
def test_a_choice_by_number_or_name(text: str, labels: list[str]) -> None:
    assert selected([SEED_Q], text) == [(labels, None)]


def test_own_words_are_custom_text_whole() -> None:
    assert selected([SEED_Q], "Keep the newest one.\nDelete the rest.") == [
        ([], "Keep the newest one.\nDelete the rest.")
    ]
    assert selected([NAME], "askq") == [([], "askq")]


@pytest.mark.parametrize(
    ("questions", "text", "reason"),
    [
        ([SEED_Q], "3", "there is no option 3; choose 1 or 2"),
        ([SEED_Q], "1, 2", "takes one option only, and your reply chose 1 and 2"),
        ([SEED_Q], "   \n  ", "the reply has no answer in it"),
        ([LANGS], "1, 4", "there is no option 4; choose 1 to 3"),
        ([SEED_Q, NAME], "1: 1", 'no answer for question 2 ("Name")'),
        ([SEED_Q, NAME], "1: 1\n1: 2\n2: x", 'question 1 ("Cleanup"): answered twice'),
        ([SEED_Q, NAME], "1: 5\n2: x", 'question 1 ("Cleanup"): there is no option 5'),
    ],
)
def test_what_cannot_be_read_says_why(questions: list[Question], text: str, reason: str) -> None:
    with pytest.raises(Unreadable) as caught:
        read_answers(questions, text)
    assert reason in caught.value.reason


def test_multi_select_and_multi_question() -> None:
    assert selected([LANGS], "1, 3") == [(["Python (Recommended)", "Rust"], None)]
    assert selected([LANGS], "3 and 1 and 3") == [(["Rust", "Python (Recommended)"], None)]
    assert selected([SEED_Q, LANGS, NAME], "Name: askq\n1: no, keep them\nlangs: 2 3") == [
        (["No, keep them"], None),
        (["Go", "Rust"], None),
        ([], "askq"),
    ]


# --- stripping -------------------------------------------------------------------------

GMAIL_REPLY = (
    "2\n\nThanks,\nAlice\n-- \nAlice Example | ACME\n\n"
    "On Tue, Dec 1, 2026 at 2:00 PM askq <\naskq@askq.example> wrote:\n\n"
    "> ##- Please type your reply above this line -##\n> Cleanup\n>   1. Yes\n"
)
OUTLOOK_REPLY = (
    "1: 2\r\n2: askq\r\n\r\nBest regards,\r\nBob\r\n\r\n"
    "________________________________\r\nFrom: askq <askq@askq.example>\r\n"
    "Sent: Tuesday, December 1, 2026 2:00 PM\r\nTo: Bob\r\nSubject: [askq] Cleanup\r\n\r\n"
    "##- Please type your reply above this line -##\r\n"
)
IPHONE_REPLY = "No, keep them\n\nSent from my iPhone\n\n> On 1 Dec 2026, at 14:00, askq wrote:\n>"
BOTTOM_POSTED = (
    "On Tue, Dec 1, 2026 at 2:00 PM askq <askq@askq.example> wrote:\n"
    "> ##- Please type your reply above this line -##\n> Cleanup\n>   1. Yes\n\n2\n\n-- \nBob\n"
)
NOTHING_WRITTEN = "From: askq\nSent: Tue\n\n##- Please type your reply above this line -##\n1. Yes"
GERMAN_REPLY = "1\n\nAm Di., 1. Dez. 2026 um 14:00 Uhr schrieb askq <askq@askq.example>:\n> x\n"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (GMAIL_REPLY, "2"),
        (OUTLOOK_REPLY, "1: 2\n2: askq"),
        (IPHONE_REPLY, "No, keep them"),
        (GERMAN_REPLY, "1"),
        (BOTTOM_POSTED, "2"),
        (NOTHING_WRITTEN, ""),  # the quoted question is not an answer
        ("Keep them - we need\nthe logs.\n\n-- \nBob", "Keep them - we need\nthe logs."),
    ],
)
def test_quoted_history_and_signatures_are_stripped(text: str, kept: str) -> None:
    assert strip_quoted(text) == kept


LEAD = "Proceed with the destructive cleanup?"
LEADS = (
    LEAD,
    "Reminder: this question is still waiting for your answer.",
    "I could not read your answer:",
)
MARKED = f"{LEAD}\n##- Please type your reply above this line -##\n\n  1. Yes\n  2. No\n"


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # The question mail quoted whole, as clients do: its lead line, then the marker.
        (f"2\n\nThanks,\nAlice\n\nOn Tue, Dec 1, 2026 askq wrote:\n{_quoted(MARKED)}", "2"),
        (
            f"Keep the newest one.\nDelete the rest.\n\n{MARKED}",
            "Keep the newest one.\nDelete the rest.",
        ),
        (f"Keep it.\n\n>\n{_quoted(MARKED)}", "Keep it."),
        (f"On Tue, Dec 1, 2026 askq wrote:\n{_quoted(MARKED)}\n\n2\n\n-- \nBob", "2"),
        (
            "Neither.\n\nI could not read your answer: there is no option 7; choose 1 or 2.\n"
            "##- Please type your reply above this line -##\n\n  1. Yes\n",
            "Neither.",
        ),
        (
            "Later.\n\nReminder: this question is still waiting for your answer.\n"
            "##- Please type your reply above this line -##\n\nConfirm\n",
            "Later.",
        ),
    ],
)
def test_the_quote_starts_at_our_lead_line(text: str, kept: str) -> None:
    """A mail starts with its lead line (the preview), then the marker: a reply that
    quotes it without `>` and without a header a parser knows still reads right."""
    assert strip_quoted(text, LEADS) == kept


def test_a_persons_line_like_the_lead_is_kept_when_not_just_above_the_marker() -> None:
    text = f"{LEAD} Yes, go ahead.\nThanks\n\n{MARKED}"
    assert strip_quoted(text, LEADS) == f"{LEAD} Yes, go ahead.\nThanks"


def test_html_quotes_are_dropped() -> None:
    markup = (
        '<div dir="ltr">1<br></div><div class="gmail_quote"><div>On Tue wrote:</div>'
        "<blockquote>Cleanup 1. Yes</blockquote></div>"
    )
    assert html_text(markup).split() == ["1"]
    outlook = '<p>2</p><div id="appendonsend"></div><hr><div id="divRplyFwdMsg">From: askq</div>'
    assert html_text(outlook).split() == ["2"]
    signed = '<div>1</div><div class="gmail_signature"><div>Alice | ACME 555-0100</div></div>'
    assert html_text(signed).split() == ["1"]
    apple = '<div>No, keep them</div><blockquote type="cite">##- Please type…</blockquote>'
    assert html_text(apple).split() == ["No,", "keep", "them"]


# --- classifying inbound mail ----------------------------------------------------------


def mail(headers: str, body: str = "1") -> bytes:
    return (headers.strip() + "\r\n\r\n" + body + "\r\n").encode()


def test_automatic_replies_are_recognised() -> None:
    base = "From: a@acme.example\r\nTo: x@askq.example\r\n"
    for extra in (
        "Auto-Submitted: auto-replied",
        "X-Autoreply: yes",
        "Precedence: bulk",
        "Subject: Automatic reply: away",
        "Subject: Out of office",
    ):
        assert auto_reply(parse(mail(base + extra))) is not None, extra
    assert auto_reply(parse(mail(base + "Auto-Submitted: no\r\nSubject: Re: out"))) is None


def test_only_well_formed_message_ids_thread() -> None:
    headers = "Message-ID: <abc.1@acme.example>\r\nReferences: <x@y> junk <z@w>"
    good = parse(mail("From: a@acme.example\r\n" + headers))
    assert good.message_id == "<abc.1@acme.example>" and good.references == ("<x@y>", "<z@w>")
    bad = parse(mail("From: a@acme.example\r\nMessage-ID: <a b> Bcc: x@evil"))
    assert bad.message_id is None


def test_an_smtp_reply_is_one_line_of_ascii() -> None:
    from askq.answerers.email import Received, Verdict

    reply = Received(Verdict.REFUSED, "this reply address was not sent to é@x\r\n250 OK").smtp_reply
    assert reply == "550 5.7.1 this reply address was not sent to ?@x 250 OK"
    assert Received(Verdict.RECORDED, "Yes").smtp_reply == "250 2.0.0 recorded"


def test_a_non_standard_bounce_is_one_too() -> None:
    daemon = parse(mail("From: MAILER-DAEMON@mx.example\r\nSubject: failure"), mail_from="")
    report = bounce(daemon)
    assert report is not None and report.failed
    assert bounce(parse(mail("From: a@acme.example"), mail_from="a@acme.example")) is None


def test_reply_text_of_a_message_prefers_plain_text() -> None:
    raw = (
        b"From: a@acme.example\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/alternative; boundary="x"\r\n\r\n'
        b"--x\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n2\r\n\r\n> quoted\r\n"
        b"--x\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>1</p>\r\n--x--\r\n"
    )
    assert reply_text(parse(raw).message) == "2"


# --- addresses ---------------------------------------------------------------------------


def test_reply_addresses_bind_request_and_recipient_and_rotate() -> None:
    old = ReplyAddresses(["old-secret-0123456789"], "askq.example").for_group("email")
    both = ReplyAddresses(
        ["new-secret-0123456789", "old-secret-0123456789"], "ASKQ.example"
    ).for_group("email")
    address = old.address("answer", "a" * 32, "Alice@ACME.example")
    parsed = both.parse(address.upper().replace("ASKQ.EXAMPLE", "askq.example"))
    assert parsed is not None and parsed.request_id == "a" * 32
    assert both.verifies(parsed, "alice@acme.example")
    assert not both.verifies(parsed, "bob@acme.example")
    assert both.parse("answer+abc.def@other.example") is None
    assert both.parse("someone@askq.example") is None
    bounce_address = both.parse(both.address("bounce", "a" * 32, "alice@acme.example"))
    assert bounce_address is not None and bounce_address.kind == "bounce"
    assert bounce_address.mac != parsed.mac  # an answer address is not a bounce address


def test_a_reply_address_is_bound_to_the_group_that_minted_it() -> None:
    """Two email groups with the same secret and reply domain: an address one minted
    does not verify at the other (its reply must not answer for the other group)."""
    addresses = ReplyAddresses(["one-secret-0123456789"], "askq.example")
    first, mgr = addresses.for_group("email-first"), addresses.for_group("email-mgr")
    mail = first.address("answer", "a" * 32, "alice@acme.example")
    parsed = first.parse(mail)
    assert parsed is not None
    assert first.verifies(parsed, "alice@acme.example")
    assert not mgr.verifies(parsed, "alice@acme.example")
    assert mgr.address("answer", "a" * 32, "alice@acme.example") != mail


def test_a_reply_address_minted_before_the_group_was_bound_still_verifies() -> None:
    """An address an older version mailed (its MAC without the group) still counts, so
    a reply to a question mailed before an upgrade is not refused."""
    import base64
    import hashlib
    import hmac

    secret, recipient, request_id = "one-secret-0123456789", "alice@acme.example", "b" * 32
    key = hmac.new(secret.encode(), b"askq email reply address v1", hashlib.sha256).digest()
    message = f"answer\n{request_id}\n{recipient}".encode()
    mac = base64.b32encode(hmac.new(key, message, hashlib.sha256).digest()[:10]).decode().lower()
    addresses = ReplyAddresses([secret], "askq.example").for_group("email")
    parsed = addresses.parse(f"answer+{request_id}.{mac}@askq.example")
    assert parsed is not None
    assert addresses.verifies(parsed, recipient)
    assert not addresses.verifies(parsed, "bob@acme.example")


# --- routes and settings -----------------------------------------------------------------


def test_routes_match_in_order_with_the_default_last() -> None:
    routes = parse_routes(
        '{"*": "ops@example.com", "tenant=acme": {"to": ["A@acme.example"],'
        ' "allow": ["@acme.example", "boss@example.com"]}}'
    )
    acme = routes.match({"tenant": "acme"})
    assert acme is not None and acme.to == ("a@acme.example",)
    assert acme.allows("Carol@ACME.example") and acme.allows("boss@example.com")
    assert not acme.allows("ops@example.com")
    other = routes.match({"tenant": "beta"})
    assert other is not None and other.to == ("ops@example.com",)
    assert other.allows("ops@example.com") and not other.allows("eve@example.com")
    assert parse_routes('{"tenant=acme": "a@acme.example"}').match({}) is None


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ("", "ASKQ_EMAIL_ROUTES is not set"),
        ("{", "not valid JSON"),
        ('{"*": "not an address"}', "is not an email address"),
        ('{"*": {"to": "a@b.example", "cc": 1}}', "unknown field(s) cc"),
        ('{"*": {"to": "a@b.example", "allow": ["*"]}}', "anyone may not answer"),
        ('{"tenant": "a@b.example"}', "key=pattern"),
        ('{"*": "a@b.example\\r\\nBcc: x@y.example"}', "is not an email address"),
    ],
)
def test_bad_routes_are_config_errors(routes: str, message: str) -> None:
    with pytest.raises(AskError) as caught:
        parse_routes(routes)
    assert caught.value.code is ErrorCode.CONFIG_ERROR and message in caught.value.message


def settings(**values: Any) -> EmailSettings:
    base: dict[str, Any] = {
        "routes": '{"*": "a@b.example"}',
        "from_address": "askq@askq.example",
        "secret": SECRET,
    }
    return EmailSettings(**{**base, **values})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"from_address": ""}, "ASKQ_EMAIL_FROM_ADDRESS"),
        ({"secret": None}, "ASKQ_EMAIL_SECRET"),
        ({"secret": "short"}, "at least 16 characters"),
        ({"link_base_url": "ftp://x"}, "ASKQ_EMAIL_LINK_BASE_URL"),
        ({"tls_cert": "/nonexistent.pem"}, "needs both"),
        ({"inbound_secret": "short"}, "ASKQ_EMAIL_INBOUND_SECRET"),
    ],
)
def test_bad_settings_are_config_errors(values: dict[str, Any], message: str) -> None:
    with pytest.raises(AskError) as caught:
        EmailConfig.from_settings(settings(**values))
    assert caught.value.code is ErrorCode.CONFIG_ERROR and message in caught.value.message


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASKQ_EMAIL_FROM_ADDRESS", "askq@askq.example")
    monkeypatch.setenv("ASKQ_EMAIL_LISTEN_PORT", "not a port")
    with pytest.raises(AskError) as caught:
        EmailSettings.from_env()
    assert "ASKQ_EMAIL_LISTEN_PORT" in caught.value.message
    monkeypatch.setenv("ASKQ_EMAIL_LISTEN_PORT", "2526")
    assert EmailSettings.from_env().listen_port == 2526


# --- the question email ------------------------------------------------------------------


def test_header_text_is_one_line() -> None:
    assert header_text("a\r\nBcc: x@y\u2028z", 100) == "a\\r\\nBcc: x@y\\u2028z"
    assert header_text("x" * 500, 10) == "x" * 9 + "…"


def test_a_question_email_survives_the_wire_and_hides_nothing() -> None:
    question = Question.model_validate(
        {
            "id": "q",
            "header": "Héllo\nBcc: evil@evil.example",
            "question": "Line one\nLine two & <i>three</i>",
            "options": [{"label": "Ja"}, {"label": "Nein", "description": "<b>nope</b>"}],
        }
    )
    request = AskRequest(
        id="f" * 32,
        questions=[question],
        caller=Caller(agent_id="agent\x1b[2J", turn_id="t"),
        created_ms=0,
    )
    envelope = Envelope(
        "askq@askq.example", "askq", "a@b.example", "answer+x.y@askq.example", "<m@askq.example>"
    )
    raw = question_message(request, envelope, None).as_bytes(policy=policy.SMTP)
    parsed = BytesParser(policy=policy.default).parsebytes(raw)
    assert parsed.get_all("Bcc") is None
    assert str(parsed["Subject"]).startswith("[askq] Héllo\\nBcc: evil@evil.example: Line one")
    assert str(parsed["Auto-Submitted"]) == "auto-generated"
    text = parsed.get_body(preferencelist=("plain",))
    html = parsed.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    assert "Line one\r\nLine two & <i>three</i>" in text.get_content()
    assert "agent\\x1b[2J" in text.get_content() and "\x1b" not in text.get_content()
    assert "&lt;i&gt;three&lt;/i&gt;" in html.get_content() and "<i>" not in html.get_content()
    assert "&lt;b&gt;nope&lt;/b&gt;" in html.get_content()


def test_a_long_question_leads_with_its_start_and_is_shown_whole_below() -> None:
    long = "Roll the release back to build 4127 " + "and drain the canary pool first " * 4 + "?"
    question = Question.model_validate(
        {"id": "q", "header": "Rollback", "question": long, "options": [{"label": "Yes"}]}
    )
    request = AskRequest(
        id="f" * 32, questions=[question], caller=Caller(agent_id="a", turn_id="t"), created_ms=0
    )
    envelope = Envelope("askq@askq.example", "askq", "a@b.example", "r@askq.example", "<m@x>")
    message = question_message(request, envelope, None)
    text = message.get_body(preferencelist=("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(preferencelist=("html",)).get_content()  # type: ignore[union-attr]
    lead, marker = text.splitlines()[:2]
    assert len(lead) <= 72 and lead.endswith("…") and long.startswith(lead[:-1])
    assert marker == "##- Please type your reply above this line -##"
    assert long in text  # whole, below the marker
    shown = [line for line in html_text(html).splitlines() if line.strip()]
    assert shown[0] == long  # the HTML leads with it whole
    quoted = "\n".join(f"> {line}" for line in text.splitlines())
    for below in (quoted, text):  # quoted with `>`, or not at all
        reply = f"Yes, after the canary drains.\n\n{below}"
        assert strip_quoted(reply, reply_leads([question])) == "Yes, after the canary drains."
