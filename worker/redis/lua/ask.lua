-- Publish a new request: OFFERED at the first tier with a live group. Or, for an ask
-- that names a request already there, its settlement if settled, else reattach (its
-- reply now goes to this caller's inbox). An ask names an existing request when it is
-- idempotent (the index of its key names the request) or when this caller sends the
-- same ask again because it never got the reply to its first send (a timeout, a lost
-- connection: the first send may have run).
-- uses: req reply payload timeout_body idem inbox asked alive prev_inbox prev_asked
-- uses: turn aborted owner agent pending groups live group_info timers wake
-- uses: callers audit audit_log trends registry +tiers
-- args: tier_prefix settled_ttl audit_maxlen request_id
-- args: payload_json turn_id agent_id
-- args: claimed_owner process caller_ttl_ms timeout_ms timeout_settlement fingerprint
-- args: taken_over mode resent gone agent_prefix registry_seen registry_wait_ms
-- `owner` and `agent` are the agent keys of the owner the caller declares and of the
-- caller; `prev_inbox` / `prev_asked` where an idempotent request replies now (the
-- caller's own when it does not know better); `idem` the index of the idempotency key
-- (`{p}:idem:`, never written, when the ask has none). `claimed_owner` is '' for none,
-- `fingerprint` '' when the ask is not idempotent, `mode` 'new' (publish request_id) or
-- 'attach' (request_id is the one the index named), `resent` '1' when an earlier send
-- of this very ask may have run, `gone` a request id the caller found expired.
-- `registry_seen`: the registry's marker (`registry`) as the caller last read it ('' if
-- never); `registry_wait_ms`: how long after a registry was lost to wait for its groups
-- to register again (about a heartbeat and a TTL).
-- replies: OFFERED tier entry | ATTACHED tier | SETTLED body | ABORTED |
-- replies: DELEGATED_CALLER owner | NO_ANSWERER message | EXISTS | STALE |
-- replies: OWNER owner | REDIRECT id | GONE | WAIT ms
-- (WAIT: no group now, but the registry this caller knew was lost a moment ago; ask
-- again in up to ms, as its groups register again, before it can be NO_ANSWERER)
-- (the last three: run it again, with the owner's agent key declared, on the request
-- the index names, or on a fresh request)
--@include request
if redis.call('EXISTS', K.aborted) == 1 then return {'ABORTED'} end

-- Who owns the caller is what the agent registry says (the owner a registered agent
-- was registered with), not what the caller claims; the claim counts only for an agent
-- that never registered. A live owner makes the caller a delegated child.
local owner = redis.call('GET', K.agent) or A.claimed_owner
if owner ~= '' then
  if K.owner ~= A.agent_prefix .. owner then return {'OWNER', owner} end
  if redis.call('EXISTS', K.owner) == 1 then return {'DELEGATED_CALLER', owner} end
end

local idempotent = A.fingerprint ~= ''
if idempotent then
  local known = redis.call('GET', K.idem)
  if known and known ~= request_id and known ~= A.gone then return {'REDIRECT', known} end
end

local function register_caller()
  redis.call('SET', K.alive, '1', 'PX', tonumber(A.caller_ttl_ms))
  redis.call('SADD', K.callers, A.process)
  redis.call('SADD', K.asked, request_id)
end

if redis.call('EXISTS', K.req) == 1 then
  local r = load()
  if idempotent then
    if redis.call('HGET', K.req, 'fingerprint') ~= A.fingerprint then return {'EXISTS'} end
  elseif A.resent ~= '1' or r.inbox ~= K.inbox then
    return {'EXISTS'}  -- request ids are never reused: not this caller's ask
  end
  if TERMINAL[r.state] then return {'SETTLED', redis.call('GET', K.reply) or ''} end
  if r.inbox ~= K.inbox then
    if K.prev_inbox ~= r.inbox then return {'STALE'} end  -- the caller must declare it
    -- A caller still waiting there (not one that restarted) is told, not left hanging.
    redis.call('RPUSH', K.prev_inbox, request_id .. ' ' .. A.taken_over)
    redis.call('EXPIRE', K.prev_inbox, settled_ttl)
    redis.call('SREM', K.prev_asked, request_id)
    redis.call('HSET', K.req, 'inbox', K.inbox)
    audit(K, request_id, 'reattached', {process = A.process})
  end
  register_caller()
  return {'ATTACHED', r.tier or ''}
end
if A.resent == '1' then
  -- A repeat of a send that may have run, and no request: if the first send created it,
  -- it settled and expired since, and its reply (which outlasts it by the repeat
  -- window, common.lua) is this ask's outcome. Request ids are never reused: a reply
  -- under this id is that request's. The request is never asked anew.
  local body = redis.call('GET', K.reply)
  if body then return {'SETTLED', body} end
end
if A.mode == 'attach' then
  -- The request the index named has expired (the index with it, or about to): its
  -- reply may outlast the hash by a moment; otherwise the caller asks anew.
  local body = redis.call('GET', K.reply)
  if body then return {'SETTLED', body} end
  return {'GONE'}
end

-- No group can take it. Is that so, or did Redis lose the registry a moment ago (a
-- restart without persistence, a failover to a replica that lacked the keys, a
-- FLUSHDB)? The registry's marker is written once per data set (register.lua, here,
-- Scripts when it first reads the tiers) with the time it was first written: a caller
-- that saw another one knows the registry it saw is gone, and its groups register
-- again within a heartbeat. Until registry_wait_ms after the loss, it waits for them
-- (WAIT) rather than tell the model nobody can answer. A caller that saw this very
-- registry (a deployment with no group) gets NO_ANSWERER at once.
local function lost_registry_wait(now)
  local marker = redis.call('GET', K.registry)
  if not marker then
    marker = now .. ':' .. request_id
    redis.call('SET', K.registry, marker)
  end
  if A.registry_seen == '' or marker == A.registry_seen then return nil end
  local left = tonumber(string.match(marker, '^%d+')) + tonumber(A.registry_wait_ms) - now
  if left > 0 then return left end
  return nil
end

local now = now_ms()
local priority, members, infos, grace = route(K, nil, now,
  scope_reader(function() return A.payload_json end))
if priority == nil then
  local wait = lost_registry_wait(now)
  if wait then return {'WAIT', tostring(wait)} end
  count(K, 'asked')  -- (the fleet's trends: asked, and nobody could take it)
  count(K, 'failed')
  return {'NO_ANSWERER', NO_ANSWERER_MESSAGE}
end
if not tier_stream(priority) then return {'STALE'} end

-- The payload has its own key: kept out of the hash, the hash stays small enough for
-- Redis's compact encoding (hash-max-listpack-value), about 1 KiB less per request.
redis.call('SET', K.payload, A.payload_json)
local timeout = tonumber(A.timeout_ms)
-- The hash's own fields go in with the offer's (one HSET). `timeout`: whether the ask
-- has a timeout body to delete at settlement ('0': none, settle skips the DEL; a
-- request asked before this field has no field, and settle deletes as before).
local fields = {'inbox', K.inbox, 'turn', A.turn_id, 'agent', A.agent_id, 'created_ms', now,
  'fingerprint', A.fingerprint, 'timeout', timeout > 0 and '1' or '0'}
if idempotent then  -- (abort_turn reads which index to expire from the hash)
  redis.call('SET', K.idem, request_id)
  fields[#fields + 1], fields[#fields + 2] = 'idem', K.idem
end
-- (the agent and turn are in the payload: the trail of a pending request stays small)
local asked = {'asked', {owner = given(owner), timeout_ms = timeout > 0 and timeout or nil,
  idempotent = idempotent or nil}}
local entry = offer_to(K, request_id, priority, members, now,
  {inbox = K.inbox, payload = A.payload_json, info = infos, grace = grace, fields = fields,
    first = asked})
if timeout > 0 then
  redis.call('SET', K.timeout_body, A.timeout_settlement)
  add_timer(K, 'timeout|' .. request_id, now + timeout)
end
redis.call('SADD', K.turn, request_id)
redis.call('ZADD', K.pending, now, request_id)
register_caller()
count(K, 'asked')
return {'OFFERED', tostring(priority), entry}
