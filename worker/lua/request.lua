--@include common
-- The layout of every per-request script:
-- KEYS: req, reply, inbox, turn, pending, events, groups, live, aborted, owner, tier streams...
-- ARGV: tier_prefix, settled_ttl, events_maxlen, request_id, <script's own>...

local k = {req = KEYS[1], reply = KEYS[2], inbox = KEYS[3], turn = KEYS[4],
  pending = KEYS[5], events = KEYS[6]}
local GROUPS, LIVE, ABORTED, OWNER = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local request_id = ARGV[4]

local function load()
  local f = redis.call('HMGET', k.req, 'state', 'tier', 'offer', 'undecided', 'claimers', 'by', 'code')
  return {state = f[1], tier = f[2], offer = f[3], undecided = split(f[4]),
    claimers = split(f[5]), by = f[6] or '', code = f[7] or ''}
end

-- The reply for a request that is no longer in play (or never was).
local function gone(r)
  if not r.state then return {'NOT_FOUND'} end
  return {'SETTLED', r.state, r.by, r.code}
end

-- The stream of the request's current tier must be declared before the script writes.
local function current_stream_declared(r)
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
local function move_on()
  local plan = plan_fall_through(k.req, GROUPS, LIVE)
  if not plan then return nil end
  return fall_through(k, request_id, plan)
end
