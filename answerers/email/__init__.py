"""The email answerer: questions by SMTP, answered by plain replies (an SMTP listener
or a raw-MIME HTTP endpoint) and by signed answer links (`askq worker email`)."""

from ._addresses import ReplyAddresses, ReturnAddress
from ._answerer import EmailAnswerer, EmailOptions
from ._compose import REPLY_ABOVE, question_message
from ._config import EmailConfig, EmailSettings
from ._http import INBOUND_PATH
from ._inbox import Received, Verdict
from ._mime import parse, reply_text
from ._reading import Unreadable, read_answers
from ._routes import Route, Routes, parse_routes

__all__ = [
    "INBOUND_PATH",
    "REPLY_ABOVE",
    "EmailAnswerer",
    "EmailConfig",
    "EmailOptions",
    "EmailSettings",
    "Received",
    "ReplyAddresses",
    "ReturnAddress",
    "Route",
    "Routes",
    "Unreadable",
    "Verdict",
    "parse",
    "parse_routes",
    "question_message",
    "read_answers",
    "reply_text",
]
