"""The extension point: a channel is an `Answerer` subclass.

The runtime (`_runtime.py`) does the Redis work; an answerer only decides, shows and
takes back questions. Answers do not have to come back through `present`: a channel
whose answers arrive later, at another process (a Slack click, an email reply), calls
`GroupHandle.answer` from wherever the answer lands, because the claim belongs to the
group, not to the replica that showed the question.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from ..protocol._checks import check_by, check_request_id
from ..protocol._errors import AskError, ErrorCode
from ..protocol._models import Answers, AskRequest, Offer, Retraction, Settlement
from ..protocol._types import Sender

if TYPE_CHECKING:
    from ..observing._recent import RecentSettlement
    from ..observing._status import FullStatus
    from ..observing._trends import FleetTrends
    from ..redis._requests import Requests
    from ..seam._answering import Answering
    from ._store import ChannelStore


# An answer refused with one of these will never be accepted, whoever retries it.
FINAL_REFUSALS = frozenset({ErrorCode.ALREADY_SETTLED, ErrorCode.NOT_CLAIMED, ErrorCode.NOT_FOUND})


class RetryLater(Exception):  # noqa: N818 - it is an instruction, not an error
    """Raised by a send to be run again after `seconds` (e.g. Slack's Retry-After)."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"retry in {seconds:g} s")
        self.seconds = float(seconds)


class AnswererOptions(BaseModel):
    """An answerer's own settings (its `askq worker KIND --option value` flags)."""

    model_config = ConfigDict(extra="forbid")


class GroupHandle:
    """What an answerer may do on behalf of its group, and all it needs: its group's
    requests (`request`, `holds`, `settlement`), answering and releasing, a store of its
    own in Redis (`store`), and retried sends (`send`). A channel never sees the seam,
    the Redis client or the key schema behind it."""

    def __init__(
        self,
        name: str,
        *,
        answering: Answering,
        requests: Requests,
        store: ChannelStore,
        priority: int | None = None,
        take: Callable[[str], Offer | None] | None = None,
        restore: Callable[[Offer], None] | None = None,
        sender: Sender | None = None,
        live: Callable[[], bool] | None = None,
        fleet: Callable[[], Awaitable[FullStatus]] | None = None,
        recent: Callable[[int], Awaitable[list[RecentSettlement]]] | None = None,
        trends: Callable[[], Awaitable[FleetTrends]] | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self._answering = answering
        self._requests = requests
        self._priority = priority
        self._sender = sender
        self._take = take or (lambda request_id: None)
        self._restore = restore or (lambda offer: None)
        self._live = live or (lambda: False)
        self._fleet = fleet
        self._recent = recent
        self._trends = trends

    @property
    def live(self) -> bool:
        """Whether this replica is registered and taking offers (a readiness probe)."""
        return self._live()

    async def fleet(self) -> FullStatus:
        """What `askq status` shows: every group with its live replicas and their
        heartbeat ages, the sweepers, requests pending by state and tier (the oldest
        listed), the channel sends that gave up (a dashboard)."""
        if self._fleet is None:
            raise AskError(ErrorCode.INTERNAL, f"group {self.name} has no view of the fleet")
        return await self._fleet()

    async def recent_settlements(self, limit: int = 20) -> list[RecentSettlement]:
        """The deployment's latest settlements, newest first (every group's, not only
        this one's): who answered, through which group, how long it took. Read-only and
        bounded (at most 200 rows, a few reads each), for a dashboard."""
        if self._recent is None:
            raise AskError(ErrorCode.INTERNAL, f"group {self.name} has no view of the fleet")
        return await self._recent(limit)

    async def trends(self) -> FleetTrends:
        """The deployment's last hour, minute by minute (every group's): asked,
        answered, escalated, timed out, failed; the time from ask to answer by group
        (median, 90th percentile); each tier's share of the answers. One read per
        shard, for a dashboard's charts."""
        if self._trends is None:
            raise AskError(ErrorCode.INTERNAL, f"group {self.name} has no view of the fleet")
        return await self._trends()

    async def request(self, request_id: str) -> AskRequest:
        """The request: its questions, scope and caller. NOT_FOUND once expired."""
        return await self._requests.request(request_id)

    async def holds(self, request_id: str) -> bool:
        """Whether the request is pending with this group holding a claim on it."""
        return await self._requests.holds(request_id, self.name)

    async def settlement(self, request_id: str) -> Settlement | None:
        """How the request settled (who answered, with what), while it is kept."""
        return await self._requests.settlement(request_id)

    async def answer(self, request_id: str, answers: Any, *, by: str) -> Answers:
        """Submit an answer; raises AskError (ALREADY_SETTLED, INVALID_REQUEST, ...).

        Refused for good (ALREADY_SETTLED, NOT_CLAIMED, NOT_FOUND), the request is no
        longer this replica's; any other failure leaves it shown, to answer again."""
        check_request_id(request_id)
        check_by(by)
        # Stop showing it before the answer lands, so this replica's own answer does not
        # come back to it as "answered elsewhere".
        shown = self._take(request_id)
        try:
            return await self._answering.answer(
                request_id, self.name, answers, by=by, tier=self._priority
            )
        except BaseException as exc:
            final = isinstance(exc, AskError) and exc.code in FINAL_REFUSALS
            if shown is not None and not final:
                self._restore(shown)
            raise

    async def release(self, request_id: str) -> bool:
        """Give the claim back (the question could not be shown, or the human passed)."""
        check_request_id(request_id)
        self._take(request_id)
        return await self._answering.release(request_id, self.name)

    async def send(self, job: str, /, **kwargs: Any) -> None:
        """Run `answerer.<job>(**kwargs)` as a retried side effect (a Slack post, an
        email): durably queued, run by any live replica of the group, retried with
        backoff (or after `RetryLater.seconds`) up to `Answerer.send_tries` times, then
        handed to `Answerer.send_failed`. Returns once queued, not once run. `kwargs`
        must be JSON-serializable; the job must be safe to run twice."""
        if self._sender is None:
            raise AskError(
                ErrorCode.INTERNAL,
                f"group {self.name} has no send queue: set uses_sends = True on its Answerer",
            )
        await self._sender(job, kwargs)


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
    # A channel with side effects to retry (`GroupHandle.send`) sets `uses_sends`: each
    # replica then also runs the group's send queue. `send_tries`: tries before
    # `send_failed`.
    uses_sends: ClassVar[bool] = False
    send_tries: ClassVar[int] = 8

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

    async def answer_at_once(self, offer: Offer) -> tuple[Any, str] | None:
        """Answers decided without asking anyone (rules), with who gave them, or None to
        claim and `present` it. Called after `decide` accepted; the claim and the answer
        are then one atomic step (no claim is ever shown)."""
        return None

    async def present(self, offer: Offer) -> None:
        """Show an accepted question to humans. Return once it is shown, not answered;
        the answer comes later through `self.group.answer`."""
        raise NotImplementedError

    async def retract(self, retraction: Retraction) -> None:
        """A question this replica showed settled elsewhere, was cancelled, or was
        escalated away from the group (its escalation deadline passed)."""

    async def remind(self, offer: Offer) -> None:
        """The group's reminder delay passed with the question still unanswered:
        notify the humans again (only the replica showing it is asked)."""

    async def send_failed(self, job: str, kwargs: dict[str, Any], error: BaseException) -> None:
        """A send ran out of tries. Override to give the question back (release), so
        the waterfall falls through instead of waiting on a message nobody saw."""

    async def stop(self) -> None:
        """Called once when the worker stops."""
