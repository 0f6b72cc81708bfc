--@include common
-- The layout of every per-request script:
-- KEYS: req, reply, inbox, turn, pending, events, groups, live, aborted, owner,
--       group_info, timers, wake, asked, callers, alive, prev_asked, prev_inbox,
--       payload, timeout body, idem, agent, tier streams...
-- ARGV: tier_prefix, settled_ttl, events_maxlen, request_id, <script's own>...
-- `asked` is the set of pending asks of the caller process whose inbox is `inbox`;
-- `alive` that process's heartbeat key; `idem` the request's idempotency index
-- (`{p}:idem:`, never written, when it has none); `owner` and `agent` are the agent
-- keys of the caller's owner and of the caller (ask.lua; placeholders elsewhere).

local k = {req = KEYS[1], reply = KEYS[2], inbox = KEYS[3], turn = KEYS[4],
  pending = KEYS[5], events = KEYS[6], group_info = KEYS[11], timers = KEYS[12],
  wake = KEYS[13], asked = KEYS[14], payload = KEYS[19], timeout_body = KEYS[20],
  idem = KEYS[21]}
local GROUPS, LIVE, ABORTED, OWNER = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local CALLERS, ALIVE, PREV_ASKED, PREV_INBOX = KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local AGENT = KEYS[22]
local request_id = ARGV[4]

local function load()
  local f = redis.call('HMGET', k.req, 'state', 'tier', 'offer', 'undecided', 'claimers',
    'by', 'code', 'inbox')
  return {state = f[1], tier = f[2], offer = f[3], undecided = split(f[4]),
    claimers = split(f[5]), by = f[6] or '', code = f[7] or '', inbox = f[8]}
end

-- The reply for a request that is no longer in play (or never was).
local function gone(r)
  if not r.state then return {'NOT_FOUND'} end
  return {'SETTLED', r.state, r.by, r.code}
end

-- Before writing: the stream of the request's current tier must be declared, and the
-- caller's inbox must be the one the request replies to now (an idempotent ask from a
-- restarted caller moves it). Else the script changes nothing and returns STALE.
local function current_view(r)
  if r.inbox and r.inbox ~= k.inbox then return false end
  return (not r.tier) or tier_stream(r.tier) ~= nil
end

-- Before a group decides on offer entry `entry` of tier `tier`: the reply when the
-- entry is no longer the group's to decide (acknowledged in the same step), else nil.
local function not_deciding(r, group, tier, entry)
  local reply = nil
  if not r.state or TERMINAL[r.state] then
    reply = gone(r)
  elseif r.tier ~= tier or r.offer ~= entry then
    reply = {'STALE_OFFER'}
  elseif contains(r.claimers, group) then
    return {'CLAIMED'}  -- already the group's claim; its entry stays pending
  elseif not contains(r.undecided, group) then
    reply = {'NOT_OFFERED'}
  end
  if reply then ack_stale(tier, group, entry) end
  return reply
end

-- Nobody of the tier is left deciding or claiming: offer to the next tier, or fail
-- NO_ANSWERER. Returns the new state, or nil (changing nothing) when the next tier's
-- stream was not declared.
local function move_on(shown)
  local plan = plan_fall_through(k.req, GROUPS, LIVE)
  if not plan then return nil end
  return fall_through(k, request_id, plan, shown)
end

-- The group leaves the undecided set of the current offer (it declined, or its
-- decision window closed); the last one out with no claim held moves the request on.
-- Returns the new state, or nil (nothing changed) when the view is stale.
local function leave_undecided(r, group)
  if not current_view(r) then return nil end
  local undecided = without(r.undecided, group)
  if #undecided == 0 and #r.claimers == 0 then return move_on(false) end
  redis.call('XACK', tier_prefix .. r.tier, group, r.offer)
  redis.call('HSET', k.req, 'undecided', table.concat(undecided, ','))
  drop_timer(k, timer_of('window', request_id, r.offer, group))
  return r.state
end

-- The group gives up its claim (it released, or its escalation deadline passed); the
-- last claim out with nobody left deciding moves the request on. Returns as above.
local function leave_claim(r, group)
  if not current_view(r) then return nil end
  local claimers = without(r.claimers, group)
  if #claimers == 0 and #r.undecided == 0 then return move_on(true) end
  redis.pcall('XACK', tier_prefix .. r.tier, group, r.offer)
  local state = (#claimers == 0) and 'OFFERED' or 'CLAIMED'
  redis.call('HSET', k.req, 'state', state, 'claimers', table.concat(claimers, ','))
  drop_offer_timers(k, request_id, r.offer, {group})
  return state
end
