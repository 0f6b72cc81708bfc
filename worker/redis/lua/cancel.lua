-- The caller gave up (its signal fired, its task was cancelled), or it is gone:
-- any non-terminal state -> CANCELLED. `reason` says which ('withdrawn', 'caller gone'):
-- the trail, the hash and the answerers' event carry it.
-- uses: req reply payload timeout_body idem inbox asked turn pending events timers
-- uses: audit audit_log recent trends +tiers
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id code
-- args: settlement by reason
-- replies: CANCELLED | SETTLED state by code reason | NOT_FOUND | STALE
--@include request
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not current_view(r) then return {'STALE'} end
settle(K, request_id, 'CANCELLED', A.code, A.settlement, A.by, {reason = A.reason}, r)
return {'CANCELLED'}
