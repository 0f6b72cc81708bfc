--@include common
-- Shared by the per-request scripts: reading the request, and the guards and moves of
-- its transitions. A script reads the keys and arguments it declared (K, A); the ones
-- used here are req and request_id, and, to move a request on, groups, live, group_info,
-- payload (the scope selectors read the request's scope) and the
-- keys settle() writes (common.lua).

local request_id = A.request_id

local function load()
  local f = redis.call('HMGET', K.req, 'state', 'tier', 'offer', 'undecided', 'claimers',
    'by', 'code', 'inbox', 'reason', 'offered', 'timeout', 'created_ms')
  return {state = f[1], tier = f[2], offer = f[3], undecided = split(f[4]),
    claimers = split(f[5]), by = f[6] or '', code = f[7] or '', inbox = f[8],
    reason = f[9] or '', offered = f[10], claimers_raw = f[5], timeout = f[11],
    created = f[12]}
end

-- The reply for a request that is no longer in play (or never was).
local function gone(r)
  if not r.state then return {'NOT_FOUND'} end
  return {'SETTLED', r.state, r.by, r.code, r.reason}
end

-- A group's answer sent again because the reply to an earlier send was lost
-- (resent = '1'): true if that send landed, the request settled with exactly this
-- answer through this group (or, expired since, its reply, which outlasts it, is this
-- answer). For answer and claim_answer, which declare reply and the arguments resent
-- and settlement.
local function landed(r, group)
  if A.resent ~= '1' then return false end
  if r.state and (r.state ~= 'ANSWERED' or redis.call('HGET', K.req, 'group') ~= group) then
    return false
  end
  return redis.call('GET', K.reply) == A.settlement
end

-- Before writing: the stream of the request's current tier must be declared, and the
-- caller's inbox must be the one the request replies to now (an idempotent ask from a
-- restarted caller moves it). Else the script changes nothing and returns STALE.
local function current_view(r)
  if r.inbox and K.inbox and r.inbox ~= K.inbox then return false end
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
-- NO_ANSWERER. `r`: the request as load() read it; nothing wrote it since. Returns the
-- new state, or nil (changing nothing) when the next tier's stream was not declared.
-- `note`: the trail entry ({event, facts}) of the step that moved it, written once the
-- move is sure to happen, with the offer's entry (one RPUSH).
local function move_on(r, shown, note)
  local plan = plan_fall_through(K, r)
  if not plan then return nil end
  return fall_through(K, request_id, plan, shown, r, note)
end

-- The group leaves the undecided set of the current offer (`event`: it 'declined',
-- its decision window closed, 'window_missed', or it was offered while its heartbeat
-- was overdue and did not beat again in its grace, 'overdue'); the last one out with no claim held
-- moves the request on. Returns the new state, or nil (nothing changed) when the view
-- is stale.
local function leave_undecided(r, group, event)
  if not current_view(r) then return nil end
  local note = {event, {group = group, tier = tonumber(r.tier)}}
  local undecided = without(r.undecided, group)
  if #undecided == 0 and #r.claimers == 0 then return move_on(r, false, note) end
  audit(K, request_id, note[1], note[2])
  redis.call('XACK', tier_prefix .. r.tier, group, r.offer)
  redis.call('HSET', K.req, 'undecided', table.concat(undecided, ','))
  drop_decision_timers(K, request_id, r.offer, group)
  return r.state
end

-- The group gives up its claim (`event`: it 'released', or its escalation deadline
-- passed, 'escalated'); the last claim out with nobody left deciding moves the request
-- on. Returns as above.
local function leave_claim(r, group, event)
  if not current_view(r) then return nil end
  local note = {event, {group = group, tier = tonumber(r.tier)}}
  local claimers = without(r.claimers, group)
  if #claimers == 0 and #r.undecided == 0 then return move_on(r, true, note) end
  audit(K, request_id, note[1], note[2])
  redis.pcall('XACK', tier_prefix .. r.tier, group, r.offer)
  local state = (#claimers == 0) and 'OFFERED' or 'CLAIMED'
  redis.call('HSET', K.req, 'state', state, 'claimers', table.concat(claimers, ','))
  drop_offer_timers(K, request_id, r.offer, {group})
  return state
end
