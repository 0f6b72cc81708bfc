-- A replica stops: it is no longer live; its group stays live while another replica
-- of it beats (until that one's heartbeat runs out), else it leaves the waterfall now.
-- uses: consumers live beats
-- args: group consumer
-- replies: 1
local CONSUMERS, LIVE = K.consumers, K.live
redis.call('ZREM', CONSUMERS, A.consumer)
redis.call('HDEL', K.beats, A.consumer)
local latest = redis.call('ZREVRANGE', CONSUMERS, 0, 0, 'WITHSCORES')
if latest[1] then
  redis.call('ZADD', LIVE, latest[2], A.group)
else
  redis.call('ZREM', LIVE, A.group)
end
return 1
