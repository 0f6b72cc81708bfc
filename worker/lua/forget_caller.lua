-- Forget a caller process with no ask pending: the process itself, once it has nothing
-- left to wait on (ARGV[2] = '1'), or the sweeper, for a process that is gone (its
-- heartbeat expired). A process that asked again meanwhile is kept.
-- KEYS: callers, alive, asked   ARGV: process id, '1' if the process itself asks
if redis.call('SCARD', KEYS[3]) > 0 then return 0 end
if ARGV[2] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
return redis.call('SREM', KEYS[1], ARGV[1])
