--@include request
-- A group of the current tier declines; when no group of the tier is left deciding or
-- holding a claim, the request falls through to the next tier (or fails NO_ANSWERER).
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
-- A claim is not declined away (its entry must stay pending until the claim ends).
if contains(r.claimers, group) then return {'CLAIMED'} end
if not contains(r.undecided, group) then
  ack_stale(ARGV[6], group, ARGV[7])
  return {'NOT_OFFERED'}
end
if not current_stream_declared(r) then return {'STALE'} end
local undecided = without(r.undecided, group)
if #undecided == 0 and #r.claimers == 0 then
  local plan = plan_fall_through(k.req, GROUPS, LIVE)
  if not plan then return {'STALE'} end
  return {'DECLINED', fall_through(k, request_id, plan)}
end
redis.call('XACK', tier_prefix .. r.tier, group, r.offer)
redis.call('HSET', k.req, 'undecided', table.concat(undecided, ','))
return {'DECLINED', r.state}
