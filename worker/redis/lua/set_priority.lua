-- Move an answerer group to another priority (`askq group set-priority`): the
-- registry's priority and facts, and its consumer group from the old tier's stream to
-- the new one's, in one step, so no ask routes by half of it. Refused while a replica
-- of it is live: a running replica holds its priority (the stream it reads, what it
-- registers with every beat), so the group would be split between two tiers. The
-- caller gave back what the group held on the old tier first. Its replicas then start
-- with the new priority (one started with the old one is refused, naming the new one).
-- uses: groups group_info live consumers old_stream new_stream
-- args: group priority
-- replies: MOVED | LIVE replicas | NOT_FOUND
local group, priority = A.group, A.priority
if not redis.call('HGET', K.groups, group) then return {'NOT_FOUND'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', K.consumers, '(' .. now, '+inf')
if live > 0 then return {'LIVE', tostring(live)} end
redis.call('HSET', K.groups, group, priority)
-- The facts keep their text (a decode and encode would turn an empty scope `{}` into
-- `[]` on some Lua hosts): only the top-level priority, the first, is replaced.
local raw = redis.call('HGET', K.group_info, group)
if raw then
  local info = string.gsub(raw, '"priority": *%-?%d+', '"priority": ' .. priority, 1)
  redis.call('HSET', K.group_info, group, info)
end
redis.pcall('XGROUP', 'DESTROY', K.old_stream, group)
-- From now on ('$'), as a new group: an offer made before was never its to decide.
local created = redis.pcall('XGROUP', 'CREATE', K.new_stream, group, '$', 'MKSTREAM')
if type(created) == 'table' and created.err
  and not string.find(tostring(created.err), 'BUSYGROUP', 1, true) then
  return redis.error_reply(tostring(created.err))
end
return {'MOVED'}
