--@include request
-- Publish a new request: OFFERED at the first tier with a live group. Or, for an
-- idempotent ask whose request exists: its settlement if settled, else reattach (its
-- reply now goes to this caller's inbox).
-- ARGV[5]: payload JSON, [6]: turn id, [7]: agent id, [8]: '1' if the caller has an
-- owner, [9]: caller process id, [10]: caller heartbeat ms, [11]: timeout ms (0: none),
-- [12]: the settlement a timeout writes, [13]: fingerprint of the questions ('' when
-- the ask is not idempotent), [14]: what a caller whose ask is taken over is told
if redis.call('EXISTS', ABORTED) == 1 then return {'ABORTED'} end
if ARGV[8] == '1' and redis.call('EXISTS', OWNER) == 1 then return {'DELEGATED_CALLER'} end

local function register_caller()
  redis.call('SET', ALIVE, '1', 'PX', tonumber(ARGV[10]))
  redis.call('SADD', CALLERS, ARGV[9])
  redis.call('SADD', k.asked, request_id)
end

if redis.call('EXISTS', k.req) == 1 then
  if ARGV[13] == '' or redis.call('HGET', k.req, 'fingerprint') ~= ARGV[13] then
    return {'EXISTS'}
  end
  local r = load()
  if TERMINAL[r.state] then return {'SETTLED', redis.call('GET', k.reply) or ''} end
  if r.inbox ~= k.inbox then
    if PREV_INBOX ~= r.inbox then return {'STALE'} end  -- the caller must declare it
    -- A caller still waiting there (not one that restarted) is told, not left hanging.
    redis.call('RPUSH', PREV_INBOX, request_id .. ' ' .. ARGV[14])
    redis.call('EXPIRE', PREV_INBOX, tonumber(ARGV[2]))
    redis.call('SREM', PREV_ASKED, request_id)
    redis.call('HSET', k.req, 'inbox', k.inbox)
  end
  register_caller()
  return {'ATTACHED', r.tier or ''}
end

local now = now_ms()
local priority, members = route(GROUPS, LIVE, nil, now)
if priority == nil then return {'NO_ANSWERER', NO_ANSWERER_MESSAGE} end
if not tier_stream(priority) then return {'STALE'} end

-- The payload has its own key: kept out of the hash, the hash stays small enough for
-- Redis's compact encoding (hash-max-listpack-value), about 1 KiB less per request.
redis.call('SET', k.payload, ARGV[5])
redis.call('HSET', k.req, 'inbox', k.inbox, 'turn', ARGV[6],
  'agent', ARGV[7], 'created_ms', now, 'fingerprint', ARGV[13])
local entry = offer_to(k, request_id, priority, members, now)
local timeout = tonumber(ARGV[11])
if timeout > 0 then
  redis.call('SET', k.timeout_body, ARGV[12])
  add_timer(k, 'timeout|' .. request_id, now + timeout)
end
redis.call('SADD', k.turn, request_id)
redis.call('ZADD', k.pending, now, request_id)
register_caller()
return {'OFFERED', tostring(priority), entry}
