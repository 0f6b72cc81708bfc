-- Forget an answerer group (`askq group remove`): its consumer group on its tier's
-- stream, its registry entries, its replicas' liveness. The caller gave back what it
-- held first. Refused while a replica of it is live (it would register it again).
-- uses: groups group_info live consumers stream beats
-- args: group
-- replies: REMOVED | LIVE replicas
local GROUPS, INFO, LIVE, CONSUMERS, STREAM = K.groups, K.group_info, K.live, K.consumers, K.stream
local group = A.group
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', CONSUMERS, '(' .. now, '+inf')
if live > 0 then return {'LIVE', tostring(live)} end
redis.pcall('XGROUP', 'DESTROY', STREAM, group)
redis.call('HDEL', GROUPS, group)
redis.call('HDEL', INFO, group)
redis.call('ZREM', LIVE, group)
redis.call('DEL', CONSUMERS, K.beats)
return {'REMOVED'}
