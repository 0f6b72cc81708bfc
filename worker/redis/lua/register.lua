-- Register one replica of an answerer group (at start-up), or re-register it (each
-- heartbeat): the group's priority and facts in the registry, its consumer group on
-- its tier's stream, and the replica live until now + ttl. A heartbeat that finds any
-- of them gone (Redis restarted without its data, a failover to a replica that lacked
-- them, a FLUSHDB) writes them again, so the waterfall never loses a running group.
--
-- A group has one priority and one scope: a replica that disagrees with what the
-- registry holds changes nothing and is told what the group is (CONFLICT). Its kind
-- and timings (decision window, escalation, reminder) are the last starter's.
--
-- A heartbeat gets through a full Redis (maxmemory reached, noeviction): a replica
-- whose beat was refused would look dead once its TTL ran out (its group skipped,
-- NO_ANSWERER; its claims taken over) for as long as Redis is full. A beat adds no
-- data (it moves this replica's scores and beat time on), and Redis refuses a script's
-- write for lack of memory only while the script has written nothing (it never stops
-- one half-way). So a beat whose first write is refused for memory first drops its
-- beat time (HDEL: a write that adds nothing, written again below), and the rest goes
-- through; it replies full = '1', and the replica says Redis is full (_full.py). A
-- replica starting up is refused as any other write is.
--
-- uses: groups group_info live consumers stream beats registry
-- args: group priority info identity consumer ttl_ms mode
-- replies: OK restored full | CONFLICT priority info
local GROUPS, INFO, LIVE, CONSUMERS, STREAM = K.groups, K.group_info, K.live, K.consumers, K.stream
local group, priority, info, identity = A.group, A.priority, A.info, A.identity
local consumer, ttl, mode = A.consumer, tonumber(A.ttl_ms), A.mode

local registered = redis.call('HGET', GROUPS, group)
local known = redis.call('HGET', INFO, group)
if registered and registered ~= priority then
  return {'CONFLICT', registered, known or ''}
end
if known then
  local ok, fields = pcall(cjson.decode, known)
  -- (a registration written before groups had an identity is taken over)
  if ok and type(fields) == 'table' and fields.identity and fields.identity ~= identity then
    return {'CONFLICT', registered or priority, known}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live_until = now + ttl

local full = '0'
if mode == 'beat' then
  local first = redis.pcall('ZADD', CONSUMERS, live_until, consumer)
  if type(first) == 'table' and first.err then
    if not string.find(tostring(first.err), 'OOM', 1, true) then
      return redis.error_reply(tostring(first.err))
    end
    full = '1'
    redis.call('HDEL', K.beats, consumer)
    redis.call('ZADD', CONSUMERS, live_until, consumer)
  end
end

local restored = '0'
if not registered then
  redis.call('HSET', GROUPS, group, priority)
  restored = '1'
end
if not known or mode == 'start' then
  redis.call('HSET', INFO, group, info)
  if not known then restored = '1' end
end
-- The consumer group reads only what is offered from now on ('$'): an offer made
-- while it did not exist was never its to decide.
local created = redis.pcall('XGROUP', 'CREATE', STREAM, group, '$', 'MKSTREAM')
if type(created) == 'table' and created.err then
  local err = tostring(created.err)
  if not string.find(err, 'BUSYGROUP', 1, true) then return redis.error_reply(err) end
else
  restored = '1'
end

-- The registry's marker: written once per data set, with the time it was first written
-- (a caller that saw another one knows the registry was lost, and waits a moment for
-- its groups to register again before it says nobody can answer: ask.lua).
redis.call('SET', K.registry, now .. ':' .. consumer, 'NX')
if mode ~= 'beat' then redis.call('ZADD', CONSUMERS, live_until, consumer) end
redis.call('ZADD', LIVE, 'GT', live_until, group)
-- When each replica last beat (`askq status` shows its age). At a start, forget the
-- beats of replicas the group no longer lists (taken over and dropped).
redis.call('HSET', K.beats, consumer, now)
if mode == 'start' then
  for _, name in ipairs(redis.call('HKEYS', K.beats)) do
    if not redis.call('ZSCORE', CONSUMERS, name) then redis.call('HDEL', K.beats, name) end
  end
end
if mode == 'start' then restored = '0' end
return {'OK', restored, full}
