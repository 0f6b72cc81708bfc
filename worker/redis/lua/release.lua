-- A group gives back its claim (it could not show the question, or its human passed).
-- The last release of a tier with nobody left deciding: fall through to the next tier.
-- uses: req reply payload timeout_body idem inbox asked turn pending events
-- uses: groups live group_info timers wake audit audit_log recent trends +tiers
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group
-- replies: RELEASED state | NOT_CLAIMED state | SETTLED state by code reason | NOT_FOUND | STALE
--@include request
local group = A.group
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not contains(r.claimers, group) then return {'NOT_CLAIMED', r.state} end
local state = leave_claim(r, group, 'released')
if not state then return {'STALE'} end
return {'RELEASED', state}
