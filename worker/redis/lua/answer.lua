-- A group holding a claim answers: CLAIMED -> ANSWERED. The answer was validated against
-- the questions before the script ran; the first valid answer wins, later ones are refused.
-- A group claims at its own tier, so the script needs only that tier's stream.
-- uses: req reply payload timeout_body idem inbox asked turn pending events timers tier
-- uses: audit audit_log recent trends
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group
-- args: settlement by resent
-- replies: ANSWERED | NOT_CLAIMED state | SETTLED state by code reason | NOT_FOUND | STALE
-- (`resent` '1': an earlier send of this answer may have landed; if it did, ANSWERED)
--@include request
local group = A.group
local r = load()
if landed(r, group) then return {'ANSWERED'} end
if not r.state or TERMINAL[r.state] then return gone(r) end
if not contains(r.claimers, group) then return {'NOT_CLAIMED', r.state} end
if not current_view(r) then return {'STALE'} end
settle(K, request_id, 'ANSWERED', '', A.settlement, A.by, {group = group}, r)
return {'ANSWERED'}
