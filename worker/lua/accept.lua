--@include request
-- A group of the current tier accepts the offer: OFFERED|CLAIMED -> CLAIMED (+group).
-- Its decision window closes; its escalation deadline and reminder (if it has them) open.
-- ARGV[5]: group, [6]: tier, [7]: offer entry id
local group = ARGV[5]
local r = load()
local reply = not_deciding(r, group, ARGV[6], ARGV[7])
if reply then return reply end
r.claimers[#r.claimers + 1] = group
redis.call('HSET', k.req, 'state', 'CLAIMED', 'undecided', table.concat(without(r.undecided, group), ','),
  'claimers', table.concat(r.claimers, ','))
drop_timer(k, timer_of('window', request_id, r.offer, group))
local t, now = timing(k.group_info, group), now_ms()
if t.escalate > 0 then add_timer(k, timer_of('escalate', request_id, r.offer, group), now + t.escalate) end
if t.remind > 0 then add_timer(k, timer_of('remind', request_id, r.offer, group), now + t.remind) end
return {'CLAIMED'}
