-- The caller gave up (its signal fired, its task was cancelled), or it is gone:
-- any non-terminal state -> CANCELLED.
-- uses: req reply payload timeout_body idem inbox asked turn pending events timers +tiers
-- args: tier_prefix settled_ttl events_maxlen request_id code settlement by
-- replies: CANCELLED | SETTLED state by code | NOT_FOUND | STALE
--@include request
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not current_view(r) then return {'STALE'} end
settle(K, request_id, 'CANCELLED', A.code, A.settlement, A.by)
return {'CANCELLED'}
