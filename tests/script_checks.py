"""Every script may touch only the keys it declared: a prologue, put before each
script's text in the tests, that shadows `redis` with a checking copy. A command on a
key the script was not given (KEYS) fails the script, and so the test.

The key positions of each command the scripts use are listed here; a command not
listed fails too (list it, with its key positions, when a script starts using it)."""

from __future__ import annotations

import dataclasses
import functools

from askq.redis import _lua

CHECKER = """
local __declared = {}
for _, key in ipairs(KEYS) do __declared[key] = true end
local __first_key = {DEL = 'all', EXISTS = 'all', EXPIRE = 1, GET = 1, HDEL = 1, HGET = 1,
  HGETALL = 1, HINCRBY = 1, HKEYS = 1, HMGET = 1, HSET = 1, HSETNX = 1, LPUSH = 1, LTRIM = 1,
  RPUSH = 1, SADD = 1, SCARD = 1, SET = 1, SMEMBERS = 1, SREM = 1, TIME = 'none', XACK = 1,
  XADD = 1, XGROUP = 2, ZADD = 1, ZCOUNT = 1, ZRANGE = 1, ZREM = 1, ZREMRANGEBYRANK = 1,
  ZRANGEBYSCORE = 1, ZREMRANGEBYSCORE = 1, ZREVRANGE = 1, ZSCORE = 1}
local function __check(command, ...)
  local args = {...}
  local name = string.upper(command)
  local spec = __first_key[name]
  if spec == nil then error('askq test: no key positions listed for ' .. name) end
  local keys = {}
  if spec == 'all' then keys = args elseif spec ~= 'none' then keys = {args[spec]} end
  for _, key in ipairs(keys) do
    if not __declared[key] then
      error('askq test: ' .. name .. ' of a key the script did not declare: ' .. tostring(key))
    end
  end
end
local __redis = redis
local redis = setmetatable({
  call = function(command, ...) __check(command, ...) return __redis.call(command, ...) end,
  pcall = function(command, ...) __check(command, ...) return __redis.pcall(command, ...) end,
}, {__index = __redis})
"""


@functools.cache
def checked(name: str) -> _lua.Script:
    script = _lua.load(name)
    return dataclasses.replace(script, text=CHECKER + script.text)
