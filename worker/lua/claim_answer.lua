--@include request
-- A group that answers without asking anyone (rules) claims and answers in one step:
-- OFFERED|CLAIMED -> ANSWERED, with accept's guards (the offer is still the group's to
-- decide) and answer's (the first valid answer wins). One round trip instead of two.
-- ARGV[5]: group, [6]: tier, [7]: offer entry id, [8]: settlement JSON, [9]: who answered
local group = ARGV[5]
local r = load()
local reply = not_deciding(r, group, ARGV[6], ARGV[7])
if reply and reply[1] ~= 'CLAIMED' then return reply end
if not current_view(r) then return {'STALE'} end
settle(k, request_id, 'ANSWERED', '', ARGV[8], ARGV[9])
return {'ANSWERED'}
