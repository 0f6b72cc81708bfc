-- A group of the current tier declines; when no group of the tier is left deciding or
-- holding a claim, the request falls through to the next tier (or fails NO_ANSWERER).
-- A claim is not declined away: its entry stays pending until the claim ends.
-- uses: req reply payload timeout_body idem inbox asked turn pending events
-- uses: groups live group_info timers wake audit audit_log recent trends +tiers
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group tier offer
-- replies: DECLINED state | CLAIMED | SETTLED state by code reason | NOT_FOUND | STALE_OFFER
-- replies: NOT_OFFERED | STALE
--@include request
local group = A.group
local r = load()
local reply = not_deciding(r, group, A.tier, A.offer)
if reply then return reply end
local state = leave_undecided(r, group, 'declined')
if not state then return {'STALE'} end
return {'DECLINED', state}
