"""askq: the queue core. The public API is re-exported here."""

from .answering._answerer import FINAL_REFUSALS, Answerer, AnswererOptions, GroupHandle, RetryLater
from .answering._links import LinkClaims, LinkError, SignedLinks
from .answering._routes import RouteTable
from .answering._runtime import AnswererRuntime
from .answering._store import ChannelStore, FeedFollower
from .approvals import ApprovalRejected, Decision, approve, require_approval
from .observing._metrics import serve_metrics
from .observing._recent import RecentSettlement
from .observing._trends import FleetTrends, GroupTimes, MinuteCounts, TierShare
from .protocol._actions import ToolAction
from .protocol._attribution import answered_by
from .protocol._errors import AskError, ErrorCode
from .protocol._models import (
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
from .protocol._settings import ChannelSettings, Settings
from .protocol._text import quoted, visible
from .protocol._types import AbortSignal, OnTimeout
from .redis._keys import Keys
from .seam._seam import Seam
from .seam._sync import SyncSeam
from .seam._tool import TOOL_NAME, AskUserQuestionTool, ToolResult, input_schema, input_schema_json
from .sweeping._sweeper import Sweeper

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
