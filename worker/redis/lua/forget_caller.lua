-- A caller process forgets itself once it has nothing left to wait on: its heartbeat
-- and its registration go. A process that asked again meanwhile is kept. (A process
-- that is gone is the sweeper's: reap_caller.lua.)
-- uses: callers alive asked
-- args: process
-- replies: 1 (forgotten) | 0 (kept)
if redis.call('SCARD', K.asked) > 0 then return 0 end
redis.call('DEL', K.alive)
return redis.call('SREM', K.callers, A.process)
