--@include request
-- A group gives back its claim (it could not show the question, or its human passed).
-- The last release of a tier with nobody left deciding: fall through to the next tier.
-- ARGV[5]: group
local group = ARGV[5]
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not contains(r.claimers, group) then return {'NOT_CLAIMED', r.state} end
local state = leave_claim(r, group)
if not state then return {'STALE'} end
return {'RELEASED', state}
