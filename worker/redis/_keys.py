"""The Redis key schema, all of it.

Every key starts with `{prefix}` in braces: the braces make the prefix the Redis
Cluster hash tag, so every key of a deployment lands in one slot and every script may
touch any of them atomically (as bullmq does with `bull:{queue}:`). With
`ASKQ_SHARDS` > 1 each shard is one such keyspace with a tag of its own
(`{prefix~k}`, `_shards.py`): `{p}` below is the shard's tag.

| key                        | type   | what                                                 |
|----------------------------|--------|------------------------------------------------------|
| {p}:req:<id>               | hash   | one request: state, tier, offer, undecided/claimers |
| {p}:payload:<id>           | string | its questions, scope and caller (JSON)              |
| {p}:timeout:<id>           | string | the settlement its timeout writes (if it has one)   |
| {p}:idem:<digest>          | string | idempotency key (SHA-256) -> its request id         |
| {p}:reply:<id>             | string | its one settlement (JSON), written once, then expires |
| {p}:inbox:<process>        | list   | ids settled for callers in that process (wake-ups)  |
| {p}:pending                | zset   | unsettled request ids by creation time (status)     |
| {p}:turn:<turn>            | set    | unsettled request ids of a turn                     |
| {p}:aborted:<turn>         | string | the durable abort mark of a turn                    |
| {p}:agent:<agent>          | string | live agent -> its owner ("" for a root); TTL        |
| {p}:groups                 | hash   | answerer group -> priority (the waterfall layout)   |
| {p}:groupinfo              | hash   | answerer group -> JSON (kind, scope, deadlines)     |
| {p}:live                   | zset   | answerer group -> ms until which it is live         |
| {p}:consumers:<group>      | zset   | replica -> ms until which it is live                |
| {p}:tier:<priority>        | stream | offers to the groups of that priority               |
| {p}:events                 | stream | settlements and fall-throughs (answerers retract)   |
| {p}:audit:<id>             | list   | a request's audit trail (JSON entries); its TTL     |
| {p}:audit                  | stream | every trail entry, capped (if enabled; audit tail)  |
| {p}:recent                 | zset   | settled request ids by settlement ms (capped, TTL)  |
| {p}:trends                 | hash   | per-minute counts of the last hour (the dashboard's |
|                            |        | charts: asked, answered by group, timed out...; TTL)|
| {p}:sweepers               | hash   | sweeper replica -> JSON (last beat, ttl, host, pid) |
| {p}:beats:<group>          | hash   | replica -> ms of its last heartbeat (status)        |
| {p}:sends:failed           | stream | channel sends that gave up (capped; status)         |
| {p}:timers                 | zset   | deadlines (lua/fire.lua) by due time in ms          |
| {p}:timers:wake            | list   | pushed when a new timer is the earliest             |
| {p}:callers                | set    | caller processes that have asked                    |
| {p}:alive:<process>        | string | a caller process's heartbeat; TTL                   |
| {p}:asked:<process>        | set    | the pending asks of a caller process                |
| {p}:arq:<queue>            | zset   | arq queues: sends:<group>, sweeper (arq's own keys  |
|                            |        | go under the prefix too: {p}:arq:job:<id>, _arq.py) |
"""

from __future__ import annotations

from dataclasses import dataclass


def split_groups(value: str | None) -> list[str]:
    """The group lists of a request hash (`undecided`, `claimers`) are comma-joined
    (group names cannot hold commas)."""
    return [part for part in (value or "").split(",") if part]


@dataclass(frozen=True)
class Keys:
    prefix: str = "askq"
    tag: str | None = None  # a shard's hash tag (`_shards.py`); None: the prefix

    @property
    def base(self) -> str:
        return "{" + (self.tag or self.prefix) + "}"

    def request(self, request_id: str) -> str:
        return f"{self.base}:req:{request_id}"

    def reply(self, request_id: str) -> str:
        return f"{self.base}:reply:{request_id}"

    def payload(self, request_id: str) -> str:
        """The request's questions (JSON), kept out of its hash so the hash stays compact."""
        return f"{self.base}:payload:{request_id}"

    def timeout_body(self, request_id: str) -> str:
        """The settlement the request's timeout writes, if it has one."""
        return f"{self.base}:timeout:{request_id}"

    def idem(self, digest: str | None) -> str:
        """The index of an idempotency key (its SHA-256): the id of the request asked
        with it. Request ids are never reused, so nothing keyed by one (a replica's
        cache, a channel's message record) can outlive its request; the index is what
        lets an ask with the same key find the request. `{p}:idem:` (never written)
        stands in for a request without one."""
        return f"{self.base}:idem:{digest or ''}"

    def inbox(self, process_id: str) -> str:
        return f"{self.base}:inbox:{process_id}"

    @property
    def pending(self) -> str:
        return f"{self.base}:pending"

    def turn(self, turn_id: str) -> str:
        return f"{self.base}:turn:{turn_id}"

    def aborted(self, turn_id: str) -> str:
        return f"{self.base}:aborted:{turn_id}"

    def agent(self, agent_id: str) -> str:
        return f"{self.base}:agent:{agent_id}"

    @property
    def groups(self) -> str:
        return f"{self.base}:groups"

    @property
    def group_info(self) -> str:
        return f"{self.base}:groupinfo"

    @property
    def live(self) -> str:
        return f"{self.base}:live"

    @property
    def registry(self) -> str:
        """The registry's marker: '<ms>:<writer>', written once per data set, so that a
        caller can tell a registry Redis lost from one with no group (lua/ask.lua)."""
        return f"{self.base}:registry"

    def consumers(self, group: str) -> str:
        return f"{self.base}:consumers:{group}"

    @property
    def tier_prefix(self) -> str:
        return f"{self.base}:tier:"

    def tier(self, priority: int) -> str:
        return f"{self.tier_prefix}{priority}"

    @property
    def events(self) -> str:
        return f"{self.base}:events"

    def audit(self, request_id: str) -> str:
        """A request's audit trail: one JSON entry per transition, kept as long as it."""
        return f"{self.base}:audit:{request_id}"

    @property
    def audit_log(self) -> str:
        """Every trail entry of the deployment, capped (when `audit_stream_maxlen` > 0)."""
        return f"{self.base}:audit"

    @property
    def recent(self) -> str:
        """The settled requests by settlement time (ms): capped, and forgets the expired."""
        return f"{self.base}:recent"

    @property
    def trends(self) -> str:
        """Per-minute counts of the last hour (`<minute>|<what>` -> n), written by the
        scripts that ask, settle and escalate (lua/common.lua, `count`); `_trends.py`."""
        return f"{self.base}:trends"

    @property
    def sweepers(self) -> str:
        """The sweeper replicas, each with its last heartbeat."""
        return f"{self.base}:sweepers"

    def beats(self, group: str) -> str:
        """A group's replicas -> the server ms of each one's last heartbeat."""
        return f"{self.base}:beats:{group}"

    @property
    def send_failures(self) -> str:
        """Channel sends that gave up after their last try (capped)."""
        return f"{self.base}:sends:failed"

    @property
    def timers(self) -> str:
        """Zset of every pending deadline (see lua/fire.lua), scored by due time (ms)."""
        return f"{self.base}:timers"

    @property
    def wake(self) -> str:
        """Pushed when a timer becomes the earliest: wakes a sweeper waiting on it."""
        return f"{self.base}:timers:wake"

    @property
    def callers(self) -> str:
        """Set of the caller processes that have asked (and may have asks pending)."""
        return f"{self.base}:callers"

    def alive(self, process_id: str) -> str:
        """A caller process's heartbeat; it expires when the process is gone."""
        return f"{self.base}:alive:{process_id}"

    def asked(self, process_id: str) -> str:
        """The pending asks a caller process waits on."""
        return f"{self.base}:asked:{process_id}"

    def process_of(self, inbox: str) -> str:
        """The process id an inbox key belongs to."""
        return inbox.rpartition(":")[2]

    def queue(self, name: str) -> str:
        """An arq queue (sends of a group, the sweeper's jobs)."""
        return f"{self.base}:arq:{name}"

    @property
    def pattern(self) -> str:
        """Matches every key of this prefix (for cleanup and key counts)."""
        return f"{self.base}:*"
