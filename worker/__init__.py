"""askq: the queue core. The public API is re-exported here."""

from ._answerer import Answerer, AnswererOptions, GroupHandle
from ._errors import AskError, ErrorCode
from ._keys import Keys
from ._models import (
    Answer,
    Answers,
    AskInput,
    AskRequest,
    Caller,
    Offer,
    Option,
    Question,
    Retraction,
    Settlement,
    parse_answers,
    parse_input,
)
from ._runtime import AnswererRuntime
from ._seam import AbortSignal, Seam, Status
from ._settings import Settings

__all__ = [
    "AbortSignal",
    "Answer",
    "Answerer",
    "AnswererOptions",
    "AnswererRuntime",
    "Answers",
    "AskError",
    "AskInput",
    "AskRequest",
    "Caller",
    "ErrorCode",
    "GroupHandle",
    "Keys",
    "Offer",
    "Option",
    "Question",
    "Retraction",
    "Seam",
    "Settings",
    "Settlement",
    "Status",
    "parse_answers",
    "parse_input",
]
