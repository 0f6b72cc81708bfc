--@include request
-- A group holding a claim answers: CLAIMED -> ANSWERED. The answer was validated against
-- the questions before the script ran; the first valid answer wins, later ones are refused.
-- ARGV[5]: group, [6]: settlement JSON, [7]: who answered
local group = ARGV[5]
local r = load()
if not r.state or TERMINAL[r.state] then return gone(r) end
if not contains(r.claimers, group) then return {'NOT_CLAIMED', r.state} end
if not current_view(r) then return {'STALE'} end
settle(k, request_id, 'ANSWERED', '', ARGV[6], ARGV[7])
return {'ANSWERED'}
