"""askq: the queue core. The public API is re-exported here."""

from ._actions import ToolAction
from ._answerer import FINAL_REFUSALS, Answerer, AnswererOptions, GroupHandle, RetryLater
from ._attribution import answered_by
from ._errors import AskError, ErrorCode
from ._keys import Keys
from ._links import LinkClaims, LinkError, SignedLinks
from ._metrics import serve_metrics
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
    RequestState,
    RequestStatus,
    Retraction,
    Settlement,
    Status,
    parse_answers,
    parse_input,
    parse_selector,
    scope_matches,
)
from ._recent import RecentSettlement
from ._routes import RouteTable
from ._runtime import AnswererRuntime
from ._seam import Seam
from ._settings import ChannelSettings, Settings
from ._store import ChannelStore, FeedFollower
from ._sweeper import Sweeper
from ._sync import SyncSeam
from ._text import quoted, visible
from ._tool import TOOL_NAME, AskUserQuestionTool, ToolResult, input_schema, input_schema_json
from ._trends import FleetTrends, GroupTimes, MinuteCounts, TierShare
from ._types import AbortSignal, OnTimeout
from .approvals import ApprovalRejected, Decision, approve, require_approval

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
    "ChannelSettings",
    "ChannelStore",
    "ErrorCode",
    "FeedFollower",
    "GroupHandle",
    "Keys",
    "LinkClaims",
    "LinkError",
    "Offer",
    "OnTimeout",
    "Option",
    "Question",
    "RequestState",
    "RequestStatus",
    "Retraction",
    "RetryLater",
    "RouteTable",
    "Seam",
    "Settings",
    "Settlement",
    "SignedLinks",
    "Status",
    "Sweeper",
    "SyncSeam",
    "TOOL_NAME",
    "ToolResult",
    "answered_by",
    "input_schema",
    "input_schema_json",
    "parse_answers",
    "parse_input",
    "parse_selector",
    "quoted",
    "scope_matches",
    "visible",
    "serve_metrics",
    "RecentSettlement",
    "FleetTrends",
    "GroupTimes",
    "MinuteCounts",
    "TierShare",
    "ApprovalRejected",
    "Decision",
    "ToolAction",
    "approve",
    "require_approval",
]
