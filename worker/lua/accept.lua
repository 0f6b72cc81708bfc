--@include request
-- A group of the current tier accepts the offer: OFFERED|CLAIMED -> CLAIMED (+group).
-- ARGV[5]: group, [6]: tier, [7]: offer entry id
local group = ARGV[5]
local r = load()
local reply = not_deciding(r, group, ARGV[6], ARGV[7])
if reply then return reply end
r.claimers[#r.claimers + 1] = group
redis.call('HSET', k.req, 'state', 'CLAIMED', 'undecided', table.concat(without(r.undecided, group), ','),
  'claimers', table.concat(r.claimers, ','))
return {'CLAIMED'}
