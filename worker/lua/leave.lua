-- A replica stops: it is no longer live; its group stays live while another replica
-- of it beats (until that one's heartbeat runs out), else it leaves the waterfall now.
-- KEYS: consumers of the group, live   ARGV: group, consumer
local CONSUMERS, LIVE = KEYS[1], KEYS[2]
redis.call('ZREM', CONSUMERS, ARGV[2])
local latest = redis.call('ZREVRANGE', CONSUMERS, 0, 0, 'WITHSCORES')
if latest[1] then
  redis.call('ZADD', LIVE, latest[2], ARGV[1])
else
  redis.call('ZREM', LIVE, ARGV[1])
end
return 1
