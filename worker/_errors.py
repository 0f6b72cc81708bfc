"""The one exception type of askq, and the exit status of each error code."""

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
}


ABORTED_MESSAGE = (
    "The user aborted this turn, so the question was withdrawn. Stop here and wait for"
    " the user's next message."
)
TIMED_OUT_MESSAGE = (
    "Nobody answered this question in time. Continue with your best judgement, or report"
    " the open question in your final result."
)


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
