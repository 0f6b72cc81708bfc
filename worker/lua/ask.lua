--@include request
-- Publish a new request: OFFERED at the first tier with a live group.
-- ARGV[5]: payload JSON, [6]: turn id, [7]: agent id, [8]: '1' if the caller has an owner
if redis.call('EXISTS', ABORTED) == 1 then return {'ABORTED'} end
if ARGV[8] == '1' and redis.call('EXISTS', OWNER) == 1 then return {'DELEGATED_CALLER'} end
if redis.call('EXISTS', k.req) == 1 then return {'EXISTS'} end

local now = now_ms()
local priority, members = route(GROUPS, LIVE, nil, now)
if priority == nil then return {'NO_ANSWERER', NO_ANSWERER_MESSAGE} end
if not tier_stream(priority) then return {'STALE'} end

redis.call('HSET', k.req, 'payload', ARGV[5], 'inbox', k.inbox, 'turn', ARGV[6],
  'agent', ARGV[7], 'created_ms', now)
local entry = offer_to(k.req, request_id, priority, members)
redis.call('SADD', k.turn, request_id)
redis.call('ZADD', k.pending, now, request_id)
return {'OFFERED', tostring(priority), entry}
