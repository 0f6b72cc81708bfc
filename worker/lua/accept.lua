--@include request
-- A group of the current tier accepts the offer: OFFERED|CLAIMED -> CLAIMED (+group).
-- ARGV[5]: group, [6]: tier, [7]: offer entry id
local group = ARGV[5]
local r = load()
if not r.state or TERMINAL[r.state] then
  ack_stale(ARGV[6], group, ARGV[7])
  return gone(r)
end
if r.tier ~= ARGV[6] or r.offer ~= ARGV[7] then
  ack_stale(ARGV[6], group, ARGV[7])
  return {'STALE_OFFER'}
end
if contains(r.claimers, group) then return {'CLAIMED'} end
if not contains(r.undecided, group) then
  ack_stale(ARGV[6], group, ARGV[7])
  return {'NOT_OFFERED'}
end
r.claimers[#r.claimers + 1] = group
redis.call('HSET', k.req, 'state', 'CLAIMED', 'undecided', table.concat(without(r.undecided, group), ','),
  'claimers', table.concat(r.claimers, ','))
return {'CLAIMED'}
