--@include request
-- A group of the current tier declines; when no group of the tier is left deciding or
-- holding a claim, the request falls through to the next tier (or fails NO_ANSWERER).
-- A claim is not declined away: its entry stays pending until the claim ends.
-- ARGV[5]: group, [6]: tier, [7]: offer entry id
local group = ARGV[5]
local r = load()
local reply = not_deciding(r, group, ARGV[6], ARGV[7])
if reply then return reply end
if not current_stream_declared(r) then return {'STALE'} end
local undecided = without(r.undecided, group)
if #undecided == 0 and #r.claimers == 0 then
  local state = move_on()
  if not state then return {'STALE'} end
  return {'DECLINED', state}
end
redis.call('XACK', tier_prefix .. r.tier, group, r.offer)
redis.call('HSET', k.req, 'undecided', table.concat(undecided, ','))
return {'DECLINED', r.state}
