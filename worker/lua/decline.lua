--@include request
-- A group of the current tier declines; when no group of the tier is left deciding or
-- holding a claim, the request falls through to the next tier (or fails NO_ANSWERER).
-- A claim is not declined away: its entry stays pending until the claim ends.
-- ARGV[5]: group, [6]: tier, [7]: offer entry id
local group = ARGV[5]
local r = load()
local reply = not_deciding(r, group, ARGV[6], ARGV[7])
if reply then return reply end
local state = leave_undecided(r, group)
if not state then return {'STALE'} end
return {'DECLINED', state}
