--@include request
-- The caller gave up (its signal fired, its task was cancelled), or it is gone:
-- any non-terminal state -> CANCELLED.
-- ARGV[5]: code, [6]: settlement JSON, [7]: by
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not current_view(r) then return {'STALE'} end
settle(k, request_id, 'CANCELLED', ARGV[5], ARGV[6], ARGV[7])
return {'CANCELLED'}
