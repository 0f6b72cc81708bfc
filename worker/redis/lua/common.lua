-- Shared by every request script (included where a script says `--@include common`).
-- Such a script declares the arguments tier_prefix, settled_ttl and audit_maxlen, and
-- the keys audit (the request's trail) and audit_log (the deployment's audit stream);
-- one that may settle a request or send an event declares the key events and the
-- arguments events_maxlen and recent_max too, and one that may settle, the keys recent
-- and trends (as does one that counts an ask or an escalation: `count` below).
--
-- A script that may move a request to another tier gets the streams of every tier the
-- caller knows of (`+tiers`); one that acts on the group's own tier, that one stream. A
-- stream it needs but was not given means the caller's view of the waterfall is
-- stale: the script changes nothing and returns {'STALE'}, and the caller refreshes its
-- view and runs it again.

local TERMINAL = {ANSWERED = true, FAILED = true, CANCELLED = true}
local NO_ANSWERER_MESSAGE = 'No answerer accepted this question, so nobody can answer it now. '
  .. 'Continue with your best judgement, or report the open question in your final result.'

local tier_prefix = A.tier_prefix
local settled_ttl = tonumber(A.settled_ttl)
local events_maxlen = A.events_maxlen
local audit_maxlen = tonumber(A.audit_maxlen)  -- the audit stream's length; 0: no stream
local recent_max = tonumber(A.recent_max)
-- Entries kept in one request's trail (a transition per group and tier at most, so
-- only a very wide waterfall reaches it; the latest are kept).
local AUDIT_MAX = 200
-- A reply key lasts at least this long (s) whatever settled_ttl: a caller whose send
-- lost its reply sends it again for up to _resend.py's REPEAT_WINDOW_S (120 s), and the
-- repeat must find what its first send settled, not ask anew (ask.lua), even once the
-- request itself has expired. (_resend.py: REPLY_MIN_TTL_S, the same figure.)
local REPLY_MIN_TTL = 150

local declared = {}
for _, key in ipairs(KEYS) do
  if string.sub(key, 1, #tier_prefix) == tier_prefix then declared[key] = true end
end

local function tier_stream(priority)
  local key = tier_prefix .. priority
  if declared[key] then return key end
  return nil
end

-- A script is one instant: TIME is read once, and every deadline and trail entry of
-- the step carries the same time.
local script_now = nil
local function now_ms()
  if not script_now then
    local t = redis.call('TIME')
    script_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return script_now
end

-- The audit trail: the step that makes a transition appends what it did to the
-- request's list (`{p}:audit:<id>`, one JSON object per entry: t = server ms, e = the
-- event, and its facts), so the trail cannot disagree with the state. It expires with
-- the request (settle). With audit_maxlen > 0 the entry also goes to the capped
-- deployment stream `{p}:audit` that `askq audit tail` follows.
-- k = {audit, audit_log}. `entries`: {event, facts} pairs, in order, in one RPUSH.
local function audit_all(k, request_id, entries)
  local lines = {}
  for i, pair in ipairs(entries) do
    local entry = pair[2] or {}
    entry.t, entry.e = now_ms(), pair[1]
    lines[i] = cjson.encode(entry)
  end
  if redis.call('RPUSH', k.audit, unpack(lines)) > AUDIT_MAX then
    redis.call('LTRIM', k.audit, -AUDIT_MAX, -1)
  end
  if audit_maxlen > 0 then
    for _, line in ipairs(lines) do
      redis.call('XADD', k.audit_log, 'MAXLEN', '~', audit_maxlen, '*', 'request', request_id,
        'entry', line)
    end
  end
end

local function audit(k, request_id, event, facts)
  audit_all(k, request_id, {{event, facts}})
end

-- A string fact, or nothing (cjson has no way to leave out an empty string).
local function given(value)
  if value == nil or value == '' then return nil end
  return value
end

local function split(s)
  local out = {}
  if s and s ~= '' then
    for part in string.gmatch(s, '[^,]+') do out[#out + 1] = part end
  end
  return out
end

local function contains(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

local function without(list, value)
  local out = {}
  for _, v in ipairs(list) do if v ~= value then out[#out + 1] = v end end
  return out
end

-- Whether a group's scope selector, as Lua patterns by scope key (`match` in its
-- registry entry, _registry.py), accepts the request's scope. A group without one
-- (no selector, or one Lua cannot express) may be offered anything; it decides itself.
local function selects(match, scope_of)
  if type(match) ~= 'table' or next(match) == nil then return true end
  local scope = scope_of()
  for key, pattern in pairs(match) do
    local value = scope[key]
    if type(value) ~= 'string' or not string.find(value, pattern) then return false end
  end
  return true
end

-- The request's scope, decoded once per script and only if a selector asks for it.
local function scope_reader(payload_of)
  local scope = nil
  return function()
    if scope == nil then
      local ok, request = pcall(cjson.decode, payload_of() or '{}')
      scope = (ok and type(request) == 'table' and type(request.scope) == 'table')
        and request.scope or {}
    end
    return scope
  end
end

-- How long (ms) past its liveness a group may still be live and unable to beat, when
-- its registry entry does not say (`ttl_ms`, its replicas' ASKQ_CONSUMER_TTL; an entry
-- written before it was there): the default TTL.
local DEFAULT_TTL_MS = 15000

-- Of `names` (at `priorities`), the lowest priority with a group whose scope selector
-- accepts the request and that `keep(name, info, i)` keeps: those groups of it, sorted,
-- and their registry entries (decoded) by name.
local function lowest(k, names, priorities, scope_of, keep)
  local best, members, infos = nil, {}, {}
  if #names == 0 then return best, members, infos end
  local raw = redis.call('HMGET', k.group_info, unpack(names))
  for i, name in ipairs(names) do
    local ok, info = pcall(cjson.decode, raw[i] or '{}')
    if not ok or type(info) ~= 'table' then info = {} end
    local priority = priorities[i]
    if (best == nil or priority <= best) and keep(name, info, i)
        and selects(info.match, scope_of) then
      if best == nil or priority < best then
        best, members = priority, {name}
      else
        members[#members + 1] = name
      end
      infos[name] = info
    end
  end
  table.sort(members)
  return best, members, infos
end

local function always() return true end

-- The lowest priority above `after` (any, when nil) that has a live group whose scope
-- selector accepts the request, those groups of that priority, sorted, and their
-- registry entries (decoded) by name. A group that cannot match is never offered the
-- question, and a tier with none that can is passed over without a hop.
--
-- When no group that could take it is live, the groups whose heartbeat is overdue by
-- less than their TTL: such a group may well be live and unable to beat (its process
-- or Redis stalled, every beat held while the server's clock ran on; a failover, whose
-- new master has the scores its replica had and a clock of its own). Failing
-- NO_ANSWERER would tell the model nobody can answer while one may; the request is
-- offered to them instead, each with a deadline at the end of its grace (`grace`: group
-- -> ms, the 4th value; an `overdue` timer, fire.lua), when one that has not beaten
-- again counts as declining. A group that left (stopped cleanly) is not in the live set
-- and is not waited for.
-- k = {groups, live, group_info}
local function route(k, after, now, scope_of)
  local all = redis.call('HGETALL', k.groups)
  local candidates = {}
  for i = 1, #all, 2 do
    local priority = tonumber(all[i + 1])
    if after == nil or priority > after then candidates[all[i]] = priority end
  end
  if next(candidates) == nil then return nil, {}, {} end
  -- Which of them are live: one read of the groups live after now, not a ZSCORE per
  -- group (a waterfall of six groups made six calls per ask and per hop).
  local names, priorities = {}, {}
  for _, name in ipairs(redis.call('ZRANGEBYSCORE', k.live, string.format('(%d', now), '+inf')) do
    if candidates[name] then
      names[#names + 1] = name
      priorities[#names] = candidates[name]
    end
  end
  local best, members, infos = lowest(k, names, priorities, scope_of, always)
  if best ~= nil then return best, members, infos end
  local lapsed = redis.call('ZRANGEBYSCORE', k.live, '-inf', now, 'WITHSCORES')
  local live_until = {}
  names, priorities = {}, {}
  for i = 1, #lapsed, 2 do
    if candidates[lapsed[i]] then
      names[#names + 1] = lapsed[i]
      priorities[#names] = candidates[lapsed[i]]
      live_until[#names] = tonumber(lapsed[i + 1])
    end
  end
  local grace = {}
  best, members, infos = lowest(k, names, priorities, scope_of, function(name, info, i)
    local ends = live_until[i] + (tonumber(info.ttl_ms) or DEFAULT_TTL_MS)
    if ends <= now then return false end
    grace[name] = ends
    return true
  end)
  return best, members, infos, best ~= nil and grace or nil
end

-- Timers: members of the timers zset, scored by due time (ms):
--   timeout|<id>   window|<id>|<offer>|<group>   escalate|...   remind|...
-- A timer is named by its request, the offer and the group, so a transition drops
-- the ones it makes moot by name (no list kept in the request). A new earliest timer
-- due within the horizon below wakes the sweepers.
local function timer_of(kind, request_id, offer, group)
  return kind .. '|' .. request_id .. '|' .. offer .. '|' .. group
end

-- A sweeper looks at the timers at least every WAKE_HORIZON_MS (_sweeper.py,
-- MAX_SLEEP_S): only a timer due sooner than that may need to wake it. (A decision
-- window of the default 30 s thus costs its offer one ZADD, not five commands.)
local WAKE_HORIZON_MS = 10000

local function add_timer(k, member, due)
  redis.call('ZADD', k.timers, due, member)
  if due - now_ms() > WAKE_HORIZON_MS then return end
  if redis.call('ZRANGE', k.timers, 0, 0)[1] == member then
    redis.call('LPUSH', k.wake, due)
    redis.call('LTRIM', k.wake, 0, 0)
    redis.call('EXPIRE', k.wake, settled_ttl)  -- a token nobody took must not linger
  end
end

local function drop_timer(k, member)
  redis.call('ZREM', k.timers, member)
end

-- A group decided (or counts as having decided) `offer`: its decision window goes.
-- (The `overdue` timer of a group offered while its heartbeat was overdue is left to
-- fire: it is rare, and fire.lua finds it moot once the group decided or the offer
-- ended; dropping it here would cost every transition one more member to remove.)
local function drop_decision_timers(k, request_id, offer, group)
  redis.call('ZREM', k.timers, timer_of('window', request_id, offer, group))
end

-- Drop the decision windows, escalations and reminders of `offer` for `groups` (and
-- the timers named in `also`, in the same command).
local function drop_offer_timers(k, request_id, offer, groups, also)
  local members = also or {}
  if not offer then groups = {} end
  for _, group in ipairs(groups) do
    for _, kind in ipairs({'window', 'escalate', 'remind'}) do
      members[#members + 1] = timer_of(kind, request_id, offer, group)
    end
  end
  if #members > 0 then redis.call('ZREM', k.timers, unpack(members)) end
end

-- A group's own deadlines (ms; 0 = none), as it registered them (`info`: its entry,
-- when route() read it already).
local function timing(group_info, group, info)
  if not info then
    local raw = redis.call('HGET', group_info, group)
    info = raw and cjson.decode(raw) or {}
  end
  return {window = tonumber(info.decision_window_ms) or 0,
    escalate = tonumber(info.escalate_ms) or 0, remind = tonumber(info.remind_ms) or 0}
end

-- The request's current offer is over (settled, or moved on to another tier):
-- acknowledge it for every group it went to, so that no replica recovers an offer that
-- is decided, and drop its deadlines. pcall: a group deleted by hand must not abort a
-- script half-way. `also`: more timers to drop with the offer's (settle: the timeout).
-- `r`: the request as the script read it (load(), unchanged since), else it is read.
-- Returns the groups holding a claim on it (comma-joined; '' or nil for none).
local function end_offer(k, request_id, also, r)
  local tier, offer, offered, claimers
  if r then
    tier, offer, offered, claimers = r.tier, r.offer, r.offered, r.claimers_raw
  else
    tier, offer, offered, claimers = unpack(redis.call('HMGET', k.req, 'tier', 'offer',
      'offered', 'claimers'))
  end
  if tier and offer then
    local groups = split(offered)
    -- The stream is declared: each caller checked current_view (or the tier) first.
    local stream = tier_stream(tier)
    if stream then
      for _, group in ipairs(groups) do redis.pcall('XACK', stream, group, offer) end
    end
    drop_offer_timers(k, request_id, offer, groups, also)
  elseif also then
    drop_offer_timers(k, request_id, nil, {}, also)
  end
  return claimers
end

-- Put the request on the stream of tier `priority`, offered to `members`, each with its
-- decision window. The entry carries the payload, so a worker decides on a fresh offer
-- without reading the hash. Any earlier offer was ended first (end_offer). `known`:
-- the inbox and payload when the caller has them at hand (ask), else they are read;
-- `known.info`: the members' registry entries, as route() read them; `known.grace`:
-- route()'s grace deadlines of members whose heartbeat is overdue (each gets an
-- `overdue` timer); `known.fields`: more fields of the hash to write with the offer's,
-- and `known.first`: a trail entry ({event, facts}) to write before the offer's (ask:
-- one HSET and one RPUSH, not two).
local function offer_to(k, request_id, priority, members, now, known)
  known = known or {}
  local inbox = known.inbox or redis.call('HGET', k.req, 'inbox')
  -- (in the hash for a request asked before the payload had its own key)
  local payload = known.payload or redis.call('GET', k.payload)
    or redis.call('HGET', k.req, 'payload')
  local entry = redis.call('XADD', tier_prefix .. priority, '*', 'request', request_id,
    'payload', payload, 'inbox', inbox)
  local list = table.concat(members, ',')
  redis.call('HSET', k.req, 'state', 'OFFERED', 'tier', priority, 'offer', entry,
    'offered', list, 'undecided', list, 'claimers', '', unpack(known.fields or {}))
  local offered = {'offered', {tier = tonumber(priority), groups = list,
    overdue = known.grace and true or nil}}
  audit_all(k, request_id, known.first and {known.first, offered} or {offered})
  for _, group in ipairs(members) do
    local window = timing(k.group_info, group, (known.info or {})[group]).window
    if window > 0 then add_timer(k, timer_of('window', request_id, entry, group), now + window) end
    if known.grace then
      add_timer(k, timer_of('overdue', request_id, entry, group), known.grace[group])
    end
  end
  return entry
end

-- Tell the answerers (their replicas read the events stream; they retract, remind).
-- The stream is capped, and expires once nothing has happened for settled_ttl.
local function announce(k, request_id, state, code, by, field, value)
  if field then
    redis.call('XADD', k.events, 'MAXLEN', '~', events_maxlen, '*', 'request', request_id,
      'state', state, 'code', code, 'by', by, field, value)
  else
    redis.call('XADD', k.events, 'MAXLEN', '~', events_maxlen, '*', 'request', request_id,
      'state', state, 'code', code, 'by', by)
  end
  redis.call('EXPIRE', k.events, settled_ttl)
end

-- What the trail calls a settlement.
local function settled_event(state, code, defaulted)
  if state == 'ANSWERED' then return defaulted and 'defaulted' or 'answered' end
  if state == 'CANCELLED' then return code == 'TIMED_OUT' and 'timed_out' or 'cancelled' end
  return 'failed'
end

-- The fleet's trends (the web dashboard's charts, _trends.py): counts by minute of the
-- last hour in one hash per shard, `{p}:trends`, field `<minute>|<what>` (minute: the
-- server's ms // 60000), written in the step they count, so they cannot drift from it:
--   asked                          a new request (ask.lua), or an ask no group could take
--   answered|<tier>|<b>|<group>    answered through the group at that tier; b = the time
--                                  from the ask, floor(4 * log2(ms)) (buckets 19 % wide)
--   defaulted  timed_out  cancelled  failed     the other settlements (settle)
--   escalated|<group>              a claim not answered in time (fire.lua)
-- One HINCRBY a count. Only a field new this minute (its count came back 1) reads the
-- minute last cleaned (`minute`): the first one of a new minute deletes the minutes
-- older than the hour kept and renews the TTL (one HKEYS a minute, not a call per ask).
local TRENDS_MINUTES = 61  -- the hour shown and the minute in progress
local function count(k, what)
  local minute = math.floor(now_ms() / 60000)
  if redis.call('HINCRBY', k.trends, minute .. '|' .. what, 1) > 1 then return end
  local cleaned = tonumber(redis.call('HGET', k.trends, 'minute'))
  if cleaned and cleaned >= minute then return end
  local old = {}
  for _, field in ipairs(redis.call('HKEYS', k.trends)) do
    local m = tonumber(string.match(field, '^(%d+)|'))
    if m and m <= minute - TRENDS_MINUTES then old[#old + 1] = field end
  end
  for i = 1, #old, 1000 do
    redis.call('HDEL', k.trends, unpack(old, i, math.min(i + 999, #old)))
  end
  redis.call('HSET', k.trends, 'minute', minute)
  redis.call('EXPIRE', k.trends, (TRENDS_MINUTES + 1) * 60)
end

-- What a settlement counts as (above): an answer through a group by its tier, the
-- group and how long it took since the ask; the others by the trail's event.
-- `r`: the request as load() read it (tier, created), else they are read.
local function count_settled(k, state, code, note, r)
  if state ~= 'ANSWERED' or not note.group then
    count(k, settled_event(state, code, note.defaulted))
    return
  end
  local tier, created
  if r then
    tier, created = r.tier, r.created
  else
    tier, created = unpack(redis.call('HMGET', k.req, 'tier', 'created_ms'))
  end
  local took = math.max(now_ms() - (tonumber(created) or now_ms()), 1)
  local bucket = math.floor(4 * math.log(took) / math.log(2))
  count(k, 'answered|' .. (tier or '') .. '|' .. bucket .. '|' .. note.group)
end

-- The one settlement: reply written, caller woken, indexes and timers released,
-- answerers told, the trail's last entry written and the trail and the request kept
-- for settled_ttl (the reply at least REPLY_MIN_TTL; the group it settled through in
-- the hash's `group`) (and listed among the recent ones, a capped index that forgets
-- what expired), and counted in the fleet's trends. k = {req, reply, inbox, turn,
-- pending, events, timers, asked, payload, timeout_body, idem, audit, audit_log,
-- recent, trends}. `note`: the trail entry's facts (group: the group it settled
-- through; reason: why it was cancelled; defaulted).
-- `r`: the request as load() read it, when nothing changed it since (saves a read).
local function settle(k, request_id, state, code, body, by, note, r)
  note = note or {}
  local claimers = end_offer(k, request_id, {'timeout|' .. request_id}, r)
  redis.call('SREM', k.asked, request_id)
  local now = now_ms()
  redis.call('HSET', k.req, 'state', state, 'code', code, 'by', by,
    'settled_ms', now, 'undecided', '', 'claimers', '', 'reason', note.reason or '',
    'group', note.group or '')
  redis.call('EXPIRE', k.req, settled_ttl)
  redis.call('EXPIRE', k.payload, settled_ttl)  -- a late answer is still validated
  -- The idempotency index lasts as long as the request: the same key asked again
  -- finds its settlement until both expire together, then asks anew. (An ask without
  -- a key declares the index's bare prefix, `{p}:idem:`, never written.)
  if string.sub(k.idem, -1) ~= ':' then redis.call('EXPIRE', k.idem, settled_ttl) end
  -- The timeout body exists only for an ask with a timeout: a request known (`r`) to
  -- have none ('0', ask.lua) skips the DEL; unknown, or asked before the field, deletes.
  if not r or r.timeout ~= '0' then redis.call('DEL', k.timeout_body) end
  redis.call('SET', k.reply, body, 'EX', math.max(settled_ttl, REPLY_MIN_TTL))
  redis.call('RPUSH', k.inbox, request_id .. ' ' .. body)
  redis.call('EXPIRE', k.inbox, settled_ttl)
  redis.call('SREM', k.turn, request_id)
  redis.call('ZREM', k.pending, request_id)
  audit(k, request_id, settled_event(state, code, note.defaulted),
    {code = given(code), by = given(by), group = note.group, reason = note.reason})
  redis.call('EXPIRE', k.audit, settled_ttl)
  redis.call('ZADD', k.recent, now, request_id)
  -- The index is trimmed (what expired, then beyond recent_max) by about 1 settlement
  -- in 16, two commands the others save: the one whose id starts with '0' (a random
  -- digit in an id askq makes; the last four name the shard, _shards.py). Between
  -- trims it holds a few ids more than recent_max and some whose request expired: its
  -- readers take the latest recent_max at most and skip a request that is gone
  -- (_recent.py, _audit.py). The EXPIRE stays every time: the index must not expire
  -- while it holds fresh entries.
  if string.byte(request_id, 1) == 48 then
    redis.call('ZREMRANGEBYSCORE', k.recent, '-inf', now - settled_ttl * 1000)
    redis.call('ZREMRANGEBYRANK', k.recent, 0, -(recent_max + 1))
  end
  redis.call('EXPIRE', k.recent, settled_ttl)
  count_settled(k, state, code, note, r)
  -- Only a replica of a group that claims the request shows it (_shown.py), so only a
  -- claim needs the event to retract; a request settled with no claim held (an auto
  -- answer, a timeout or cancel while offered, declines all the way down) wakes nobody.
  -- What settled is counted from the trail, not from this stream.
  if not claimers or claimers == '' then return end
  if note.reason then
    announce(k, request_id, state, code, by, 'reason', note.reason)
  else
    announce(k, request_id, state, code, by)
  end
end

-- A group is done with an entry of its tier that is no longer its to decide (settled,
-- moved on, or offered before the group was live): acknowledge it in the same step.
local function ack_stale(tier, group, entry)
  local stream = tier_stream(tier)
  if stream then redis.pcall('XACK', stream, group, entry) end
end

local function no_answerer_body()
  return cjson.encode({state = 'FAILED', code = 'NO_ANSWERER', message = NO_ANSWERER_MESSAGE})
end

-- Everyone at the current tier declined or released: offer to the next tier, or fail.
-- Checks before writing; returns nil when a needed stream was not declared.
-- k = {req, groups, live, group_info, payload}; `r`: the request as load() read it.
local function plan_fall_through(k, r)
  local tier = tonumber(r.tier)
  local now = now_ms()
  local scope_of = scope_reader(function()
    return redis.call('GET', k.payload) or redis.call('HGET', k.req, 'payload')
  end)
  local priority, members, infos, grace = route(k, tier, now, scope_of)
  if priority ~= nil and not tier_stream(priority) then return nil end
  return {priority = priority, members = members, infos = infos, grace = grace, now = now}
end

-- `shown`: a group of the tier held a claim (it may show the question), so its
-- replicas are told the request moved on; after declines only, nobody showed it and
-- no replica is woken for nothing.
-- `r`: the request as load() read it, unchanged since (no read of it again).
-- `note`: the trail entry ({event, facts}) of the step that moved it, written first
-- (with the next offer's entry, in one RPUSH).
local function fall_through(k, request_id, plan, shown, r, note)
  if plan.priority == nil then
    audit(k, request_id, note[1], note[2])
    settle(k, request_id, 'FAILED', 'NO_ANSWERER', no_answerer_body(), '', nil, r)
    return 'FAILED'
  end
  end_offer(k, request_id, nil, r)
  offer_to(k, request_id, plan.priority, plan.members, plan.now,
    {info = plan.infos, grace = plan.grace, inbox = r.inbox, first = note})
  if shown then
    announce(k, request_id, 'OFFERED', '', '', 'tier', plan.priority)
  end
  return 'OFFERED'
end
