"""The extension point: a channel is an `Answerer` subclass.

The runtime (`_runtime.py`) does the Redis work; an answerer only decides, shows and
takes back questions. Answers do not have to come back through `present`: a channel
whose answers arrive later, at another process (a Slack click, an email reply), calls
`GroupHandle.answer` from wherever the answer lands, because the claim belongs to the
group, not to the replica that showed the question.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from ._errors import AskError, ErrorCode
from ._models import Answers, Offer, Retraction

if TYPE_CHECKING:
    from ._seam import Seam


# An answer refused with one of these will never be accepted, whoever retries it.
FINAL_REFUSALS = frozenset({ErrorCode.ALREADY_SETTLED, ErrorCode.NOT_CLAIMED, ErrorCode.NOT_FOUND})


class AnswererOptions(BaseModel):
    """An answerer's own settings (its `askq worker KIND --option value` flags)."""

    model_config = ConfigDict(extra="forbid")


class GroupHandle:
    """What an answerer may do on behalf of its group."""

    def __init__(
        self,
        seam: Seam,
        group: str,
        *,
        take: Callable[[str], Offer | None] | None = None,
        restore: Callable[[Offer], None] | None = None,
    ) -> None:
        self.seam = seam
        self.name = group
        self._take = take or (lambda request_id: None)
        self._restore = restore or (lambda offer: None)

    async def answer(self, request_id: str, answers: Any, *, by: str) -> Answers:
        """Submit an answer; raises AskError (ALREADY_SETTLED, INVALID_REQUEST, ...).

        Refused for good (ALREADY_SETTLED, NOT_CLAIMED, NOT_FOUND), the request is no
        longer this replica's; any other failure leaves it shown, to answer again."""
        # Stop showing it before the answer lands, so this replica's own answer does not
        # come back to it as "answered elsewhere".
        shown = self._take(request_id)
        try:
            return await self.seam.answer(request_id, self.name, answers, by=by)
        except BaseException as exc:
            final = isinstance(exc, AskError) and exc.code in FINAL_REFUSALS
            if shown is not None and not final:
                self._restore(shown)
            raise

    async def release(self, request_id: str) -> bool:
        """Give the claim back (the question could not be shown, or the human passed)."""
        self._take(request_id)
        return await self.seam.release(request_id, self.name)


OptionsT = TypeVar("OptionsT", bound=AnswererOptions)


class Answerer(Generic[OptionsT]):
    """Base class of every channel. Override `present`; `decide` and `retract` as needed.

    `kind` names the channel (`askq worker KIND`); `Options` declares its settings and
    is the type parameter too, so `self.options` is typed:
    `class Teams(Answerer[TeamsOptions]): Options = TeamsOptions`.

    An offer recovered from a replica that died after claiming it goes straight to
    `present`, without `decide`: the group already accepted it.
    """

    kind: ClassVar[str] = ""
    Options: ClassVar[type[AnswererOptions]] = AnswererOptions

    group: GroupHandle

    def __init__(self, options: OptionsT | None = None) -> None:
        self.options: OptionsT = options if options is not None else cast(OptionsT, self.Options())

    async def start(self, group: GroupHandle) -> None:
        """Called once before the first offer."""
        self.group = group

    async def decide(self, offer: Offer) -> bool:
        """Accept (True) or decline (False) an offer that matched the group's scope.
        Decisions are automatic and fast; the human comes in at `present`."""
        return True

    async def present(self, offer: Offer) -> None:
        """Show an accepted question to humans. Return once it is shown, not answered;
        the answer comes later through `self.group.answer`."""
        raise NotImplementedError

    async def retract(self, retraction: Retraction) -> None:
        """A question this replica showed settled elsewhere or was cancelled."""

    async def stop(self) -> None:
        """Called once when the worker stops."""
