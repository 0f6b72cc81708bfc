-- Forget a caller process that is gone and has no ask pending (its heartbeat expired
-- and its asked set is empty); a process that came back or asked again is kept.
-- KEYS: callers, alive, asked   ARGV: process id
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('SCARD', KEYS[3]) > 0 then return 0 end
return redis.call('SREM', KEYS[1], ARGV[1])
