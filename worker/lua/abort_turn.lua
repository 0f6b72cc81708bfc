--@include common
-- Abort a turn: the durable mark first (no new ask of the turn gets in), then every
-- unsettled request of the turn -> CANCELLED(ABORTED), whether or not its caller lives.
-- KEYS: aborted, turn, pending, events, timers, tier streams..., then req, reply, inbox,
--       asked, payload, timeout body, idem per request
-- ARGV: tier_prefix, settled_ttl, events_maxlen, abort_ttl, body, by, n_tiers, ids...
local K_ABORTED, K_TURN, K_PENDING, K_EVENTS, K_TIMERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local PER_REQUEST = 7
local n_tiers = tonumber(ARGV[7])
redis.call('SET', K_ABORTED, '1', 'EX', tonumber(ARGV[4]))

local ids, slot = {}, {}
for i = 8, #ARGV do
  ids[#ids + 1] = ARGV[i]
  slot[ARGV[i]] = 5 + n_tiers + PER_REQUEST * (#ids - 1)
end
-- The caller must have declared the keys of every request the turn holds now; the
-- mark above keeps the set from growing, so a retry converges.
local members = redis.call('SMEMBERS', K_TURN)
if #members ~= #ids then return {'STALE'} end
for _, id in ipairs(members) do
  if not slot[id] then return {'STALE'} end
  local tier, inbox, idem = unpack(redis.call('HMGET', KEYS[slot[id] + 1], 'tier', 'inbox', 'idem'))
  if tier and not tier_stream(tier) then return {'STALE'} end
  if inbox and inbox ~= KEYS[slot[id] + 3] then return {'STALE'} end
  if idem and idem ~= KEYS[slot[id] + 7] then return {'STALE'} end
end

local cancelled = 0
for _, id in ipairs(ids) do
  local s = slot[id]
  local k = {req = KEYS[s + 1], reply = KEYS[s + 2], inbox = KEYS[s + 3], turn = K_TURN,
    pending = K_PENDING, events = K_EVENTS, timers = K_TIMERS, asked = KEYS[s + 4],
    payload = KEYS[s + 5], timeout_body = KEYS[s + 6], idem = KEYS[s + 7]}
  local state = redis.call('HGET', k.req, 'state')
  if state and not TERMINAL[state] then
    settle(k, id, 'CANCELLED', 'ABORTED', ARGV[5], ARGV[6])
    cancelled = cancelled + 1
  else
    redis.call('SREM', K_TURN, id)
  end
end
return {'ABORTED', tostring(cancelled)}
