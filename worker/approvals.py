"""`askq.approvals`: a human decides whether an action an agent is about to take runs.

The public face of the seam's approvals (`askq.seam._approvals`, where the decorator,
`approve` and the decision live; the action itself, `ToolAction`, is the protocol's).
"""

from .seam._approvals import (
    ApprovalRejected,
    ApprovalTimeout,
    Decision,
    ToolAction,
    approval_key,
    approve,
    describe,
    require_approval,
)

__all__ = [
    "ApprovalRejected",
    "ApprovalTimeout",
    "Decision",
    "ToolAction",
    "approval_key",
    "approve",
    "describe",
    "require_approval",
]
