-- line.lua: a scope's line across processes (SPEC §6: first come, first served by the calls'
-- start, whichever process holds them). Per process, the start of its oldest call waiting in
-- line for shared capacity (an account's, or a quota no tenant has to itself), and until when
-- that standing lasts unless renewed. A release hands what it frees to the process whose waiter
-- started first: admit.lua and settle.lua run this as a part, and a process told of capacity it
-- has nobody for passes it on (freed.rs).
--
-- KEYS[1]  ZSET: process → the start of its oldest waiter (ms)
-- KEYS[2]  ZSET: process → until when its standing lasts (ms)
-- ARGV[1]  now (ms, or '' for the server's clock)
-- ARGV[2]  'waits': a call of process ARGV[3] was refused shared capacity; the process's
--          oldest waiter, the call included, has waited ARGV[4] ms; the standing lasts ARGV[5]
--          ms more
--          'served': a call of process ARGV[3] was admitted; ARGV[4] how long the oldest other
--          call waiting there has waited ('' : none, and the process stands no more), ARGV[5]
--          how long the standing lasts
--          'freed': process ARGV[3] freed capacity; ARGV[4] '1' when a call waits in it,
--          ARGV[5] the scope's channels (the prefix of each process's), ARGV[6] the grace (ms).
--          Tells the process whose waiter is the oldest, on its own channel (ARGV[5] and its
--          line id; the message is its line id too), if another's that started more than the
--          grace before ARGV[3]'s own. Nobody standing, nobody is told: every process with a call
--          waiting in line stands, renewing it at least once a fallback poll
--
-- Returns 1 when another process was handed the capacity, else 0.

local now = read_now()
local line, lasts = KEYS[1], KEYS[2]
local op, me = ARGV[2], ARGV[3]

local function leave(process)
  redis.call('ZREM', line, process)
  redis.call('ZREM', lasts, process)
end

-- The process stands from `since` until `ttl` ms from now; the keys live at least as long.
local function stand(since, ttl)
  redis.call('ZADD', line, since, me)
  redis.call('ZADD', lasts, now + ttl, me)
  for _, key in ipairs({ line, lasts }) do
    if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  end
end

if op == 'waits' then
  stand(now - tonumber(ARGV[4]), tonumber(ARGV[5]))
  return 0
end
if op == 'served' then
  if ARGV[4] == '' then leave(me) else stand(now - tonumber(ARGV[4]), tonumber(ARGV[5])) end
  return 0
end

-- 'freed': standings that lapsed leave first (a process that died, or whose waiters left).
for _, process in ipairs(redis.call('ZRANGEBYSCORE', lasts, '-inf', now)) do leave(process) end
if ARGV[4] ~= '1' then leave(me) end
local first = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
if first[1] == nil or first[1] == me then return 0 end
local mine = redis.call('ZSCORE', line, me)
if mine and tonumber(mine) - tonumber(first[2]) <= tonumber(ARGV[6]) then return 0 end
redis.call('PUBLISH', ARGV[5] .. first[1], first[1])
return 1
