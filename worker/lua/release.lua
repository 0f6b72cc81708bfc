--@include request
-- A group gives back its claim (it could not show the question, or its human passed).
-- The last claim released with nobody left deciding: fall through to the next tier.
-- ARGV[5]: group
local group = ARGV[5]
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not contains(r.claimers, group) then return {'NOT_CLAIMED', r.state} end
if not current_stream_declared(r) then return {'STALE'} end
local claimers = without(r.claimers, group)
if #claimers == 0 and #r.undecided == 0 then
  local state = move_on()
  if not state then return {'STALE'} end
  return {'RELEASED', state}
end
redis.pcall('XACK', tier_prefix .. r.tier, group, r.offer)
local state = (#claimers == 0) and 'OFFERED' or 'CLAIMED'
redis.call('HSET', k.req, 'state', state, 'claimers', table.concat(claimers, ','))
return {'RELEASED', state}
