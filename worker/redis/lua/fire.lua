-- A timer is due. Removing it from the timers zset is what fires it, so of the sweepers
-- (and callers) racing on it exactly one fires it; a timer made moot by a transition
-- since is dropped without effect.
--   timeout   any non-terminal -> the settlement declared at ask (TIMED_OUT or default)
--   window    the group had not decided in time: as if it declined
--   escalate  the group's claim was not answered in time: as if it released; its
--             channel retracts (event ESCALATED)
--   remind    the group's channel re-notifies (event REMIND)
--   overdue   a group offered while its heartbeat was overdue (route(), common.lua)
--             has not beaten again by the end of its grace: as if it declined (one
--             live again keeps the offer, with its own decision window)
-- uses: req reply payload timeout_body idem inbox asked turn pending events
-- uses: groups live group_info timers wake audit audit_log recent trends +tiers
-- args: tier_prefix settled_ttl events_maxlen audit_maxlen recent_max request_id timer
-- replies: FIRED state | MOOT | GONE | STALE
--@include request
local member = A.timer
if not redis.call('ZSCORE', K.timers, member) then return {'GONE'} end
local kind, _, offer, group = string.match(member, '^(%a+)|([^|]*)|?([^|]*)|?([^|]*)$')
local r = load()

local function moot()
  drop_timer(K, member)
  return {'MOOT'}
end

if not r.state or TERMINAL[r.state] then return moot() end
if kind == 'timeout' then
  if not current_view(r) then return {'STALE'} end
  local body = redis.call('GET', K.timeout_body)
  local settlement = cjson.decode(body)
  local note = {defaulted = settlement.defaulted or nil}
  if settlement.state == 'CANCELLED' then note.reason = 'timed out' end
  settle(K, request_id, settlement.state, settlement.code or '', body, settlement.by or '',
    note, r)
  return {'FIRED', settlement.state}
end
if r.offer ~= offer then return moot() end
local state
if kind == 'window' then
  if not contains(r.undecided, group) then return moot() end
  state = leave_undecided(r, group, 'window_missed')
elseif kind == 'overdue' then
  if not contains(r.undecided, group) then return moot() end
  local live_until = tonumber(redis.call('ZSCORE', K.live, group))
  if live_until and live_until > now_ms() then return moot() end
  state = leave_undecided(r, group, 'overdue')
  if state then drop_timer(K, member) end
elseif kind == 'escalate' then
  if not contains(r.claimers, group) then return moot() end
  state = leave_claim(r, group, 'escalated')
  if state then
    announce(K, request_id, 'ESCALATED', '', '', 'group', group)
    count(K, 'escalated|' .. group)
  end
elseif kind == 'remind' then
  if not contains(r.claimers, group) then return moot() end
  drop_timer(K, member)
  audit(K, request_id, 'reminded', {group = group, tier = tonumber(r.tier)})
  announce(K, request_id, 'REMIND', '', '', 'group', group)
  return {'FIRED', r.state}
else
  return moot()
end
if not state then return {'STALE'} end
return {'FIRED', state}  -- leave_* dropped the timer with the group's others
