"""The public surface, pinned (as httpx's tests/test_exported_members.py does): what
`askq` exports is a decision, so a change to it shows up here."""

from __future__ import annotations

import askq
import askq.answerers.slack

EXPORTED = [
    "FINAL_REFUSALS",
    "MAX_CUSTOM",
    "RECOMMENDED_SUFFIX",
    "TOOL_NAME",
    "AbortSignal",
    "ApprovalRejected",
    "Answer",
    "Answerer",
    "AnswererOptions",
    "AnswererRuntime",
    "Answers",
    "AskError",
    "AskInput",
    "AskRequest",
    "AskUserQuestionTool",
    "Caller",
    "ChannelSettings",
    "ChannelStore",
    "Decision",
    "ErrorCode",
    "FeedFollower",
    "FleetTrends",
    "GroupHandle",
    "GroupTimes",
    "Keys",
    "LinkClaims",
    "LinkError",
    "MinuteCounts",
    "Offer",
    "OnTimeout",
    "Option",
    "Question",
    "RecentSettlement",
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
    "TierShare",
    "ToolAction",
    "ToolResult",
    "answered_by",
    "approve",
    "input_schema",
    "input_schema_json",
    "parse_answers",
    "parse_input",
    "parse_selector",
    "quoted",
    "require_approval",
    "scope_matches",
    "serve_metrics",
    "visible",
]


def test_all_is_the_public_surface() -> None:
    assert sorted(askq.__all__) == sorted(EXPORTED)
    assert len(set(askq.__all__)) == len(askq.__all__)


def test_every_exported_member_is_defined_in_askq() -> None:
    for name in askq.__all__:
        member = getattr(askq, name)
        module = getattr(member, "__module__", None)
        if module is not None and module != "typing":  # OnTimeout is a Literal alias
            assert module.startswith("askq."), (name, module)


def test_a_channel_needs_only_the_public_surface() -> None:
    """The channels shipped with askq import from `askq` alone, never its internals."""
    from pathlib import Path

    root = Path(askq.answerers.slack.__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        assert "askq._" not in text and "from askq._" not in text, path
        assert ".seam" not in text, f"{path}: reaches through to the seam"
