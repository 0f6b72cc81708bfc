-- Abort a turn: the durable mark first (no new ask of the turn gets in), then every
-- unsettled request of the turn -> CANCELLED(ABORTED), whether or not its caller lives.
-- uses: aborted turn pending events timers audit_log recent trends +tiers +requests
-- (+requests: for each id, in order: req, reply, inbox, asked, payload, timeout_body, idem,
-- audit)
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max abort_ttl settlement by
-- args: n_tiers +ids
-- replies: ABORTED cancelled | STALE
--@include common
local PER_REQUEST = 8
local n_tiers = tonumber(A.n_tiers)
redis.call('SET', K.aborted, '1', 'EX', tonumber(A.abort_ttl))

local ids, slot = {}, {}
for i = ARGV_AFTER + 1, #ARGV do
  ids[#ids + 1] = ARGV[i]
  slot[ARGV[i]] = KEYS_AFTER + n_tiers + PER_REQUEST * (#ids - 1)
end
-- The caller must have declared the keys of every request the turn holds now; the
-- mark above keeps the set from growing, so a retry converges.
local members = redis.call('SMEMBERS', K.turn)
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
  local k = {req = KEYS[s + 1], reply = KEYS[s + 2], inbox = KEYS[s + 3], turn = K.turn,
    pending = K.pending, events = K.events, timers = K.timers, asked = KEYS[s + 4],
    payload = KEYS[s + 5], timeout_body = KEYS[s + 6], idem = KEYS[s + 7],
    audit = KEYS[s + 8], audit_log = K.audit_log, recent = K.recent, trends = K.trends}
  local state = redis.call('HGET', k.req, 'state')
  if state and not TERMINAL[state] then
    settle(k, id, 'CANCELLED', 'ABORTED', A.settlement, A.by, {reason = 'turn aborted'})
    cancelled = cancelled + 1
  else
    redis.call('SREM', K.turn, id)
  end
end
return {'ABORTED', tostring(cancelled)}
