--@include request
-- Publish a new request: OFFERED at the first tier with a live group. Or, for an ask
-- that names a request already there, its settlement if settled, else reattach (its
-- reply now goes to this caller's inbox). An ask names an existing request when it is
-- idempotent (the index of its key names the request) or when this caller sends the
-- same ask again because it never got the reply to its first send (a timeout, a lost
-- connection: the first send may have run).
-- ARGV[5]: payload JSON, [6]: turn id, [7]: agent id, [8]: the owner the caller claims
-- ('' for none), [9]: caller process id, [10]: caller heartbeat ms, [11]: timeout ms
-- (0: none), [12]: the settlement a timeout writes, [13]: fingerprint of the questions
-- ('' when the ask is not idempotent), [14]: what a caller whose ask is taken over is
-- told, [15]: 'new' (publish request_id) or 'attach' (request_id is the one the index
-- named), [16]: '1' when an earlier send of this very ask may have run, [17]: a
-- request id the caller found gone (the index may still name it), [18]: the prefix of
-- agent keys
-- Returns: OFFERED tier entry | ATTACHED tier | SETTLED body | ABORTED |
--   DELEGATED_CALLER owner | NO_ANSWERER message | EXISTS | STALE, or, for the caller
--   to run it again with other keys: OWNER owner (declare the owner's agent key),
--   REDIRECT id (the index names request id), GONE (the request it named expired)
if redis.call('EXISTS', ABORTED) == 1 then return {'ABORTED'} end

-- Who owns the caller is what the agent registry says (the owner a registered agent
-- was registered with), not what the caller claims; the claim counts only for an agent
-- that never registered. A live owner makes the caller a delegated child.
local owner = redis.call('GET', AGENT) or ARGV[8]
if owner ~= '' then
  if OWNER ~= ARGV[18] .. owner then return {'OWNER', owner} end
  if redis.call('EXISTS', OWNER) == 1 then return {'DELEGATED_CALLER', owner} end
end

local idempotent = ARGV[13] ~= ''
if idempotent then
  local known = redis.call('GET', k.idem)
  if known and known ~= request_id and known ~= ARGV[17] then return {'REDIRECT', known} end
end

local function register_caller()
  redis.call('SET', ALIVE, '1', 'PX', tonumber(ARGV[10]))
  redis.call('SADD', CALLERS, ARGV[9])
  redis.call('SADD', k.asked, request_id)
end

if redis.call('EXISTS', k.req) == 1 then
  local r = load()
  if idempotent then
    if redis.call('HGET', k.req, 'fingerprint') ~= ARGV[13] then return {'EXISTS'} end
  elseif ARGV[16] ~= '1' or r.inbox ~= k.inbox then
    return {'EXISTS'}  -- request ids are never reused: not this caller's ask
  end
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
if ARGV[15] == 'attach' then
  -- The request the index named has expired (the index with it, or about to): its
  -- reply may outlast the hash by a moment; otherwise the caller asks anew.
  local body = redis.call('GET', k.reply)
  if body then return {'SETTLED', body} end
  return {'GONE'}
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
if idempotent then  -- (abort_turn reads which index to expire from the hash)
  redis.call('SET', k.idem, request_id)
  redis.call('HSET', k.req, 'idem', k.idem)
end
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
