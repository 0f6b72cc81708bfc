-- Forget a caller process with no ask pending: the process itself, once it has nothing
-- left to wait on (own = '1'), or the sweeper, for a process that is gone (its
-- heartbeat expired). A process that asked again meanwhile is kept.
-- uses: callers alive asked
-- args: process own
-- replies: 1 (forgotten) | 0 (kept)
if redis.call('SCARD', K.asked) > 0 then return 0 end
if A.own ~= '1' and redis.call('EXISTS', K.alive) == 1 then return 0 end
redis.call('DEL', K.alive)
return redis.call('SREM', K.callers, A.process)
