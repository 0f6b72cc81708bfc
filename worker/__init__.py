"""askq: the queue core. The public API is re-exported here."""

from ._answerer import FINAL_REFUSALS, Answerer, AnswererOptions, GroupHandle, RetryLater
from ._errors import AskError, ErrorCode
from ._keys import Keys
from ._models import (
    MAX_CUSTOM,
    RECOMMENDED_SUFFIX,
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
    scope_matches,
)
from ._runtime import AnswererRuntime
from ._seam import AbortSignal, Seam, Status
from ._settings import Settings
from ._sweeper import Sweeper
from ._sync import SyncSeam
from ._text import quoted, visible
from ._tool import TOOL_NAME, AskUserQuestionTool, ToolResult, input_schema, input_schema_json

__all__ = [
    "FINAL_REFUSALS",
    "MAX_CUSTOM",
    "RECOMMENDED_SUFFIX",
    "AbortSignal",
    "Answer",
    "Answerer",
    "AskUserQuestionTool",
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
    "RetryLater",
    "Seam",
    "Settings",
    "Settlement",
    "Status",
    "Sweeper",
    "SyncSeam",
    "TOOL_NAME",
    "ToolResult",
    "input_schema",
    "input_schema_json",
    "parse_answers",
    "parse_input",
    "quoted",
    "scope_matches",
    "visible",
]
