"""The events a webhook group POSTs, version 1: their JSON, and the words a person reads.

Every body is an envelope `{"type", "version", "timestamp", "data"}` (Standard Webhooks'
recommended shape). The types:

- `question.asked`: the questions as the agent asked them (the tool's own field names),
  the request's scope, and where and how to answer: `answer.url` (POST) with
  `answer.token` (a bearer token for that one request, used once).
- `question.reminder`: the group's reminder delay passed with no answer.
- `question.settled`: it is over: `state` answered, cancelled or failed, `reason` which
  of them (below), `text` the line Slack and Teams show, `answers` when answered.
- `question.escalated`: it moved on to another answerer (escalation deadline, or every
  group of the tier gave it back); this receiver's token no longer answers.

`reason`: answered_here | answered_elsewhere | withdrawn | caller_gone | turn_aborted |
timed_out | no_answerer | escalated. The request id is the receiver's key to match
events up (a ticket per request); nothing else internal is sent, and nothing sent is
markup: agent text travels as JSON strings, escaped by the encoder, never interpreted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from askq import Answer, AskRequest, answered_by

VERSION = 1
ASKED = "question.asked"
REMINDER = "question.reminder"
SETTLED = "question.settled"
ESCALATED = "question.escalated"
SUMMARY_MAX = 300

# A retraction's cancel cause (askq's CancelReason values) -> the event's reason.
CANCEL_REASONS = {
    "withdrawn": "withdrawn",
    "caller gone": "caller_gone",
    "turn aborted": "turn_aborted",
    "timed out": "timed_out",
}


@dataclass(frozen=True)
class Outcome:
    """What became of a request, as the group recorded it (from a retraction, or from
    an answer through its own callback)."""

    state: str  # ANSWERED | CANCELLED | FAILED | OFFERED (escalated)
    code: str | None = None
    by: str | None = None
    here: bool = False  # answered through this group's callback
    why: str | None = None  # a cancellation: what happened, in askq's words
    cause: str | None = None  # a cancellation: askq's CancelReason value
    answers: tuple[Answer, ...] = ()

    def to_json(self) -> str:
        data = {
            "state": self.state,
            "code": self.code,
            "by": self.by,
            "here": self.here,
            "why": self.why,
            "cause": self.cause,
            "answers": [a.model_dump(exclude_none=True) for a in self.answers],
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        data = json.loads(text)
        return cls(
            state=data["state"],
            code=data.get("code"),
            by=data.get("by"),
            here=bool(data.get("here")),
            why=data.get("why"),
            cause=data.get("cause"),
            answers=tuple(Answer.model_validate(a) for a in data.get("answers") or ()),
        )

    @property
    def reason(self) -> str:
        if self.state == "ANSWERED":
            return "answered_here" if self.here else "answered_elsewhere"
        if self.state == "CANCELLED":
            if self.cause in CANCEL_REASONS:
                return CANCEL_REASONS[self.cause]
            return "timed_out" if self.code == "TIMED_OUT" else "withdrawn"
        if self.state == "FAILED":
            return "no_answerer"
        return "escalated"

    def text(self) -> str:
        """The line Slack's message and Teams' card show (without their emoji)."""
        if self.state == "ANSWERED":
            if not self.by:
                return "Answered elsewhere"
            return "A" + answered_by(self.by)[1:]
        if self.state == "CANCELLED":
            return f"Cancelled ({self.why})" if self.why else "Cancelled"
        if self.state == "FAILED":
            return "No longer pending"
        return "Escalated to another answerer"


def webhook_by(name: str) -> str:
    return f"webhook:{name}"


def _stamp(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def envelope(kind: str, at: float, data: dict[str, Any]) -> str:
    """The body, as sent and signed (compact JSON, UTF-8 kept as is)."""
    body = {"type": kind, "version": VERSION, "timestamp": _stamp(at), "data": data}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def summary(request: AskRequest) -> str:
    """One line for a notification or a ticket's title: header and first question."""
    first = request.questions[0]
    more = f" (+{len(request.questions) - 1} more)" if len(request.questions) > 1 else ""
    text = " ".join(f"{first.header}: {first.question}".split()) + more
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 1] + "…"


def asked(request: AskRequest, group: str, at: float, answer_url: str, token: str) -> str:
    data = {
        "request_id": request.id,
        "group": group,
        "asked_at": _stamp(request.created_ms / 1000),
        "scope": request.scope,
        "summary": summary(request),
        "questions": [
            {
                "id": q.id,
                "header": q.header,
                "question": q.question,
                "multiSelect": q.multi_select,
                "options": [{"label": o.label, "description": o.description} for o in q.options],
            }
            for q in request.questions
        ],
        "answer": {"url": answer_url, "token": token},
    }
    return envelope(ASKED, at, data)


def reminder(request: AskRequest, group: str, at: float) -> str:
    return envelope(
        REMINDER, at, {"request_id": request.id, "group": group, "summary": summary(request)}
    )


def closed(request_id: str, group: str, at: float, outcome: Outcome) -> str:
    data: dict[str, Any] = {
        "request_id": request_id,
        "group": group,
        "state": "escalated" if outcome.state == "OFFERED" else outcome.state.lower(),
        "reason": outcome.reason,
        "text": outcome.text(),
    }
    if outcome.state == "ANSWERED":
        data["answers"] = [a.model_dump(exclude_none=True) for a in outcome.answers]
    return envelope(ESCALATED if outcome.state == "OFFERED" else SETTLED, at, data)
