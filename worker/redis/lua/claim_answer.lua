-- A group that answers without asking anyone (rules) claims and answers in one step:
-- OFFERED|CLAIMED -> ANSWERED, with accept's guards (the offer is still the group's to
-- decide) and answer's (the first valid answer wins). One round trip instead of two.
-- uses: req reply payload timeout_body idem inbox asked turn pending events timers tier
-- uses: audit audit_log recent trends
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group
-- args: tier offer settlement by resent
-- replies: ANSWERED | SETTLED state by code reason | NOT_FOUND | STALE_OFFER | NOT_OFFERED | STALE
-- (`resent` '1': an earlier send of this answer may have landed; if it did, ANSWERED)
--@include request
local group = A.group
local r = load()
if landed(r, group) then return {'ANSWERED'} end
local reply = not_deciding(r, group, A.tier, A.offer)
if reply and reply[1] ~= 'CLAIMED' then return reply end
if not current_view(r) then return {'STALE'} end
settle(K, request_id, 'ANSWERED', '', A.settlement, A.by, {group = group}, r)
return {'ANSWERED'}
