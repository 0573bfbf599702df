-- gate.lua: shared part of every breaker script. It mirrors crates/gateway-core/src/breaker.rs
-- rule for rule; the contract suite holds the two to the same traces.
--
-- KEYS[1]  the gate HASH (fields named as in SPEC §3)
-- ARGV[1]  now in ms, or '' to use the Redis server clock (TIME)
-- ARGV[2..11] threshold, cooldown_ms, max_cooldown_ms, min_calls, fail_rate, bucket_ms,
--             half_open_successes, probe_ttl_ms, rate_channel (0|1), escalate (0|1)
-- ARGV[12] key TTL in ms, refreshed on every write
-- ARGV[13..] the operation's own arguments
--
-- Every script returns {verdict, state, epoch, retry_after_ms, from, to, cause, fenced}.

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local P = {
  threshold = tonumber(ARGV[2]), cooldown = tonumber(ARGV[3]), max_cooldown = tonumber(ARGV[4]),
  min_calls = tonumber(ARGV[5]), fail_rate = tonumber(ARGV[6]), bucket = tonumber(ARGV[7]),
  half_open_successes = tonumber(ARGV[8]), probe_ttl = tonumber(ARGV[9]),
  rate_channel = ARGV[10] == '1', escalate = ARGV[11] == '1', key_ttl = tonumber(ARGV[12]),
}
local key = KEYS[1]

local NUMERIC = { 'epoch', 'open_until', 'probe_until', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1',
                  'streak', 'closed_since', 'probe_ok' }
local OPTIONAL = { probe_until = true, closed_since = true }

local g = { state = 'CLOSED', epoch = 0, open_until = 0, failures = 0, win_id = 0, a0 = 0, f0 = 0,
            a1 = 0, f1 = 0, streak = 0, probe_ok = 0 }
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do
  local field, value = raw[i], raw[i + 1]
  if field == 'state' then g.state = value elseif value ~= '' then g[field] = tonumber(value) end
end
local dirty = false
local transition = nil

local function save()
  if not dirty then return end
  local args = { 'state', g.state }
  local gone = {}
  for _, field in ipairs(NUMERIC) do
    local value = g[field]
    if value == nil then
      if OPTIONAL[field] then gone[#gone + 1] = field end
    else
      args[#args + 1] = field
      args[#args + 1] = string.format('%d', value)
    end
  end
  redis.call('HSET', key, unpack(args))
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  redis.call('PEXPIRE', key, P.key_ttl)
end

local function cooldown_eff(streak)
  if not P.escalate or streak <= 1 then return math.min(P.cooldown, P.max_cooldown) end
  return math.min(P.cooldown * (2 ^ (streak - 1)), P.max_cooldown)
end

local function retry_after()
  if g.state ~= 'OPEN' then return 0 end
  return math.min(math.max(g.open_until - now, 0), P.max_cooldown)
end

local function reply(verdict, fenced)
  save()
  local from, to, cause = '', '', ''
  if transition then from, to, cause = transition[1], transition[2], transition[3] end
  return { verdict, g.state, g.epoch, retry_after(), from, to, cause, fenced and 1 or 0 }
end

local function open(escalate, cause)
  local from = g.state
  local ms
  if escalate then
    g.streak = g.streak + 1
    ms = cooldown_eff(g.streak)
  else
    ms = P.cooldown
  end
  g.state = 'OPEN'
  g.epoch = g.epoch + 1
  g.open_until = now + ms
  g.probe_until = nil
  g.closed_since = nil
  g.probe_ok = 0
  transition = { from, 'OPEN', cause }
  dirty = true
end

-- Rotates the two buckets to now's window id, then counts one attempt (and a failure).
local function count(failed)
  local id = math.floor(now / P.bucket)
  if id == g.win_id + 1 then
    g.a1, g.f1, g.a0, g.f0 = g.a0, g.f0, 0, 0
  elseif id > g.win_id then
    g.a1, g.f1, g.a0, g.f0 = 0, 0, 0, 0
  end
  if id > g.win_id then g.win_id = id end
  g.a0 = g.a0 + 1
  if failed then g.f0 = g.f0 + 1 end
  dirty = true
end

local function decay_streak()
  if g.streak > 0 and g.closed_since ~= nil and now - g.closed_since >= 2 * cooldown_eff(g.streak) then
    g.streak = 0
    dirty = true
  end
end

local function fenced(epoch)
  return tonumber(epoch) ~= g.epoch
end
