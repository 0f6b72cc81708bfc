"""The one exception type of askq, and the exit status of each error code.

    AskError(code, message)            every failure askq reports, the message for the model
      NO_ANSWERER, ABORTED,            an ask's outcomes the model sees in its tool result
      DELEGATED_CALLER,                (raised by Seam.ask, returned by the tool)
      INVALID_REQUEST, TIMED_OUT
      ALREADY_SETTLED, NOT_CLAIMED     an answer refused (Seam.answer, GroupHandle.answer)
      NOT_FOUND                        a request unknown or expired
      REDIS_UNAVAILABLE                Redis out of reach, or full: its maxmemory reached, it
                                       refuses writes (translated where Redis is called:
                                       connections.redis_errors; _full.py)
      CONFIG_ERROR                     bad settings, options, or a group's registration
      REJECTED                         a human rejected an action (askq.approvals:
                                       ApprovalRejected, from @require_approval)
      INTERNAL                         a bug, or a reply askq did not expect

Lower-level errors (redis-py's, pydantic's) never reach the caller as they are: they are
turned into an AskError at the one place that calls the library.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Why an ask (or an answer, or a command) failed.

    The first five are the outcomes the model can see in its tool result; the rest
    are for channels and operators.
    """

    NO_ANSWERER = "NO_ANSWERER"
    ABORTED = "ABORTED"
    DELEGATED_CALLER = "DELEGATED_CALLER"
    INVALID_REQUEST = "INVALID_REQUEST"
    TIMED_OUT = "TIMED_OUT"
    ALREADY_SETTLED = "ALREADY_SETTLED"
    NOT_CLAIMED = "NOT_CLAIMED"
    NOT_FOUND = "NOT_FOUND"
    REDIS_UNAVAILABLE = "REDIS_UNAVAILABLE"
    CONFIG_ERROR = "CONFIG_ERROR"
    REJECTED = "REJECTED"
    INTERNAL = "INTERNAL"


# Exit status of `askq` per error code. 1 is left for crashes and 2 for usage errors
# (click's convention); the rest are stable and documented in the README.
EXIT_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: 1,
    ErrorCode.NO_ANSWERER: 3,
    ErrorCode.ABORTED: 4,
    ErrorCode.DELEGATED_CALLER: 5,
    ErrorCode.INVALID_REQUEST: 6,
    ErrorCode.TIMED_OUT: 7,
    ErrorCode.ALREADY_SETTLED: 8,
    ErrorCode.NOT_CLAIMED: 9,
    ErrorCode.NOT_FOUND: 10,
    ErrorCode.REDIS_UNAVAILABLE: 11,
    ErrorCode.CONFIG_ERROR: 12,
    ErrorCode.REJECTED: 13,
}


class AskError(Exception):
    """The root exception of askq. `code` says what happened; the message is written
    for the model (and the human behind it) to read."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"{self.code.value}: {message}")

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.code]

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}
