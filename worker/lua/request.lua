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
