-- A group of the current tier accepts the offer: OFFERED|CLAIMED -> CLAIMED (+group).
-- Its decision window closes; its escalation deadline and reminder (if it has them) open.
-- uses: req timers wake group_info tier audit audit_log
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id group
-- args: tier offer
-- replies: CLAIMED | SETTLED state by code reason | NOT_FOUND | STALE_OFFER | NOT_OFFERED
--@include request
local group = A.group
local r = load()
local reply = not_deciding(r, group, A.tier, A.offer)
if reply then return reply end
r.claimers[#r.claimers + 1] = group
redis.call('HSET', K.req, 'state', 'CLAIMED', 'undecided', table.concat(without(r.undecided, group), ','),
  'claimers', table.concat(r.claimers, ','))
drop_decision_timers(K, request_id, r.offer, group)
audit(K, request_id, 'accepted', {group = group, tier = tonumber(r.tier)})
local t, now = timing(K.group_info, group), now_ms()
if t.escalate > 0 then add_timer(K, timer_of('escalate', request_id, r.offer, group), now + t.escalate) end
if t.remind > 0 then add_timer(K, timer_of('remind', request_id, r.offer, group), now + t.remind) end
return {'CLAIMED'}
