-- line.lua: a scope's line across processes (SPEC §6: first come, first served by the calls'
-- start, whichever process holds them). Per process, the start of its oldest waiter that an
-- account or a quota refused, and until when that standing lasts unless a refusal renews it. A
-- release hands what it frees to the process whose waiter is the oldest: admit.lua and
-- settle.lua run it as a part.
--
-- KEYS[1]  ZSET: process → the start of its oldest refused waiter (ms)
-- KEYS[2]  ZSET: process → until when its standing lasts (ms)
-- ARGV[1]  now (ms, or '' for the server's clock)
-- ARGV[2]  'waits': a waiter of process ARGV[3] that has waited ARGV[4] ms was refused; its
--          process stands in line from its start (or earlier) for ARGV[5] ms more
--          'served': a waiter of process ARGV[3] was admitted; its process stands in line no
--          more (its next refused waiter renews it)
--          'freed': process ARGV[3] freed capacity; ARGV[4] '1' when a call waits in it,
--          ARGV[5] the scope's channel, ARGV[6] the grace (ms). Publishes the line id of the
--          process whose waiter is the oldest, if another's that started more than the grace
--          before ARGV[3]'s own. Nobody standing in line, nobody is told: every waiter for
--          capacity was refused once and renews its standing at least once a fallback poll
--
-- Returns 1 when another process was handed the capacity, else 0.

local now = read_now()
local line, lasts = KEYS[1], KEYS[2]
local op, me = ARGV[2], ARGV[3]

local function leave(process)
  redis.call('ZREM', line, process)
  redis.call('ZREM', lasts, process)
end

if op == 'waits' then
  local ttl = tonumber(ARGV[5])
  redis.call('ZADD', line, 'LT', now - tonumber(ARGV[4]), me)
  redis.call('ZADD', lasts, now + ttl, me)
  redis.call('PEXPIRE', line, ttl)
  redis.call('PEXPIRE', lasts, ttl)
  return 0
end
if op == 'served' then
  leave(me)
  return 0
end

-- 'freed': standings that lapsed leave first (a process that died, or whose waiters left).
for _, process in ipairs(redis.call('ZRANGEBYSCORE', lasts, '-inf', now)) do leave(process) end
if ARGV[4] ~= '1' then leave(me) end
local first = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
if first[1] == nil then return 0 end
local mine = redis.call('ZSCORE', line, me)
if first[1] == me or (mine and tonumber(mine) - tonumber(first[2]) <= tonumber(ARGV[6])) then return 0 end
redis.call('PUBLISH', ARGV[5], first[1])
return 1
