-- gate.lua: shared part of every breaker script. It mirrors crates/gateway-core/src/breaker.rs
-- rule for rule; the contract suite holds the two to the same traces.
--
-- KEYS[1]  the gate HASH (fields named as in SPEC §3)
-- ARGV[1]  now in ms, or '' to use the Redis server clock (TIME, read only when needed)
-- ARGV[2]  the gate parameters in one string (one argument crosses into Lua far cheaper than
--          fourteen): 'threshold cooldown_ms max_cooldown_ms min_calls fail_rate bucket_ms
--          half_open_successes probe_ttl_ms rate_channel(0|1) escalate(0|1) key_ttl_ms
--          slow_rate(- when off) sla_floor_ms sla_cap_ms(0 when off)'
-- ARGV[3..] the operation's own arguments
--
-- Every script returns one string, 'verdict state epoch retry_after_ms from to cause fenced',
-- with '-' for an empty item.
--
-- Speed: every value crossing between Redis and Lua costs a fraction of a microsecond, so an
-- operation reads only the fields its common path needs (one HMGET, more only on rare paths),
-- writes only the fields it changed (one HSET) and answers with a single string.

local key = KEYS[1]
local now = nil
local function clock()
  if now == nil then now = read_now() end
  return now
end

local threshold, cooldown, max_cooldown, min_calls, fail_rate, bucket, half_open_successes, probe_ttl,
  rate_flag, escalate_flag, key_ttl, slow_rate, sla_floor, sla_cap = string.match(ARGV[2],
    '^(%d+) (%d+) (%d+) (%d+) (%S+) (%d+) (%d+) (%d+) ([01]) ([01]) (%d+) (%S+) (%d+) (%d+)$')
if sla_cap == nil then return redis.error_reply('malformed gate parameters: ' .. ARGV[2]) end
slow_rate, sla_floor, sla_cap = tonumber(slow_rate), tonumber(sla_floor), tonumber(sla_cap)
threshold, cooldown, max_cooldown = tonumber(threshold), tonumber(cooldown), tonumber(max_cooldown)
min_calls, fail_rate, bucket = tonumber(min_calls), tonumber(fail_rate), tonumber(bucket)
half_open_successes, probe_ttl = tonumber(half_open_successes), tonumber(probe_ttl)
local rate_channel, escalate = rate_flag == '1', escalate_flag == '1'

-- The gate: only the loaded fields are meaningful. Absent numeric fields read as 0, absent
-- optional ones (probe_until, closed_since) as nil, an absent state as CLOSED.
local g = {}
local OPTIONAL = { probe_until = true, closed_since = true }
local function load(...)
  local names = { ... }
  local values = redis.call('HMGET', key, ...)
  for i, name in ipairs(names) do
    local v = values[i]
    if name == 'state' then
      g.state = v or 'CLOSED'
    elseif OPTIONAL[name] then
      g[name] = tonumber(v)
    else
      g[name] = tonumber(v) or 0
    end
  end
end

-- Changed fields, written by reply() in one HSET (and one HDEL for cleared optional fields).
local changed, cleared = {}, {}
local function set(name, value)
  g[name] = value
  if value == nil then
    cleared[#cleared + 1] = name
  else
    changed[#changed + 1] = name
    changed[#changed + 1] = value
  end
end

local transition = nil

local function cooldown_eff(streak)
  if not escalate or streak <= 1 then return math.min(cooldown, max_cooldown) end
  return math.min(cooldown * (2 ^ (streak - 1)), max_cooldown)
end

local function reply(verdict, fenced)
  if #changed > 0 then redis.call('HSET', key, unpack(changed)) end
  if #cleared > 0 then redis.call('HDEL', key, unpack(cleared)) end
  -- The TTL is refreshed by every write except counting within the current bucket (the fast
  -- paths and the lone attempt count): that bucket's first write, a rotation or a state change,
  -- refreshed it, and the TTL is hours longer than a bucket, so an active gate never expires.
  if #changed > 0 or #cleared > 0 then redis.call('PEXPIRE', key, key_ttl) end
  local wait = 0
  if g.state == 'OPEN' then
    if g.open_until == nil then load('open_until') end
    wait = math.min(math.max(g.open_until - clock(), 0), max_cooldown)
  end
  local from, to, cause = '-', '-', '-'
  if transition then from, to, cause = transition[1], transition[2], transition[3] end
  return string.format('%s %s %d %d %s %s %s %d', verdict, g.state, g.epoch, wait, from, to, cause, fenced and 1 or 0)
end

-- Needs state, epoch, streak loaded.
local function open(escalating, cause)
  local from = g.state
  local ms = cooldown
  if escalating then
    set('streak', g.streak + 1)
    ms = cooldown_eff(g.streak)
  end
  if sla_cap > 0 then
    -- SLA-adaptive: base × (2 − R), R the window's success rate: base + base × failed / samples
    if g.a0 == nil then load('a0', 'f0', 'a1', 'f1') end
    if g.win_id == nil then load('win_id') end
    -- the window as it reads now: a bucket that has rotated out no longer counts
    local id = math.floor(clock() / bucket)
    local samples, failed = 0, 0
    if id <= g.win_id then
      samples, failed = g.a0 + g.a1, g.f0 + g.f1
    elseif id == g.win_id + 1 then
      samples, failed = g.a0, g.f0
    end
    failed = math.min(failed, samples)
    if samples > 0 then ms = ms + math.floor(ms * failed / samples) end
    ms = math.max(math.min(ms, math.max(sla_cap, sla_floor)), sla_floor)
  end
  set('state', 'OPEN')
  set('epoch', g.epoch + 1)
  set('open_until', clock() + ms)
  set('probe_until', nil)
  set('closed_since', nil)
  set('probe_ok', 0)
  transition = { from, 'OPEN', cause }
end

-- Rotates the two buckets to now's window id, then counts one attempt (and a failure, or a
-- slow success). Needs win_id loaded; loads the buckets when it must rotate or they are not
-- loaded yet.
local function count(failed, slow)
  local id = math.floor(clock() / bucket)
  if id <= g.win_id and g.a0 == nil then
    -- the common path: same bucket, a plain success; nothing else needs the counts
    if not failed and not slow then
      redis.call('HINCRBY', key, 'a0', 1)
      return
    end
    load('a0', 'f0', 'a1', 'f1', 's0', 's1')
  elseif g.a0 == nil or g.s0 == nil then
    load('a0', 'f0', 'a1', 'f1', 's0', 's1')
  end
  if id > g.win_id then
    if id == g.win_id + 1 then
      set('a1', g.a0)
      set('f1', g.f0)
      set('s1', g.s0)
    else
      set('a1', 0)
      set('f1', 0)
      set('s1', 0)
    end
    set('a0', 0)
    set('f0', 0)
    set('s0', 0)
    set('win_id', id)
  end
  set('a0', g.a0 + 1)
  if failed then set('f0', g.f0 + 1) end
  if slow then set('s0', g.s0 + 1) end
end

local function fenced(epoch)
  return tonumber(epoch) ~= g.epoch
end
