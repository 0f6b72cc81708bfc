-- The sweeper, for a caller process whose heartbeat it found lapsed: if the process
-- is still not live, every ask it has pending -> CANCELLED (reason 'caller gone') and
-- the process is forgotten. The check and the cancel are this one step: an ask the
-- process makes meanwhile marks it live first (ask.lua), so a live caller's fresh ask
-- is never taken for a gone caller's (LIVE: nothing is touched).
-- uses: callers alive asked pending events timers audit_log recent trends +tiers +requests
-- (+requests: for each id, in order: req, reply, inbox, turn, payload, timeout_body, idem,
-- audit)
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max process code
-- args: settlement by reason n_tiers +ids
-- replies: LIVE | REAPED cancelled | STALE
--@include common
if redis.call('EXISTS', K.alive) == 1 then return {'LIVE'} end

local PER_REQUEST = 8
local n_tiers = tonumber(A.n_tiers)
local ids, slot = {}, {}
for i = ARGV_AFTER + 1, #ARGV do
  ids[#ids + 1] = ARGV[i]
  slot[ARGV[i]] = KEYS_AFTER + n_tiers + PER_REQUEST * (#ids - 1)
end
-- The caller must have declared the keys of every request the process has asked; a
-- process that is not live asks nothing more, so a retry converges.
local members = redis.call('SMEMBERS', K.asked)
if #members ~= #ids then return {'STALE'} end
for _, id in ipairs(members) do
  if not slot[id] then return {'STALE'} end
  local s = slot[id]
  local tier, inbox, idem = unpack(redis.call('HMGET', KEYS[s + 1], 'tier', 'inbox', 'idem'))
  if tier and not tier_stream(tier) then return {'STALE'} end
  if inbox and inbox ~= KEYS[s + 3] then return {'STALE'} end
  if idem and idem ~= KEYS[s + 7] then return {'STALE'} end
end

local cancelled = 0
for _, id in ipairs(ids) do
  local s = slot[id]
  local k = {req = KEYS[s + 1], reply = KEYS[s + 2], inbox = KEYS[s + 3], turn = KEYS[s + 4],
    pending = K.pending, events = K.events, timers = K.timers, asked = K.asked,
    payload = KEYS[s + 5], timeout_body = KEYS[s + 6], idem = KEYS[s + 7],
    audit = KEYS[s + 8], audit_log = K.audit_log, recent = K.recent, trends = K.trends}
  local state = redis.call('HGET', k.req, 'state')
  if state and not TERMINAL[state] then
    settle(k, id, 'CANCELLED', A.code, A.settlement, A.by, {reason = A.reason})
    cancelled = cancelled + 1
  end
end
redis.call('DEL', K.asked)  -- (ids of requests settled or expired meanwhile)
redis.call('SREM', K.callers, A.process)
return {'REAPED', tostring(cancelled)}
