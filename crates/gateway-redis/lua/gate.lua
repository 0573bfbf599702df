-- gate.lua: one operation on one breaker gate. It is `Gate::apply` of
-- crates/gateway-core/src/breaker.rs, rule for rule; the differential contract suite replays
-- random operation sequences on both and compares every reply and state.
--
-- KEYS[1]  the gate HASH (fields named as in SPEC §3)
-- ARGV[1]  now in ms, or '' to use the Redis server clock (TIME, read only when needed)
-- ARGV[2]  the gate parameters in one string (one argument crosses into Lua far cheaper than
--          twelve): 'threshold cooldown_ms max_cooldown_ms min_calls fail_rate bucket_ms
--          half_open_successes probe_ttl_ms key_ttl_ms slow_rate(- when off) sla_floor_ms
--          sla_cap_ms(0 when off)'
-- ARGV[3]  the operation: enter | success | failure | force_open | release
-- ARGV[4]  the admission epoch of a record (success, failure, release)
-- ARGV[5]  how a success counts: real | slow | unusable
--
-- Returns one string, 'verdict state epoch retry_after_ms from to cause fenced', with '-' for
-- an empty item. An argument this script cannot read is an error reply that starts with
-- MALFORMED (the client reads it as a malformed request, never as an unavailable Redis).

local key = KEYS[1]
local now = nil
local function clock()
  if now == nil then now = read_now() end
  return now
end

local p = { string.match(ARGV[2], '^(%d+) (%d+) (%d+) (%d+) (%S+) (%d+) (%d+) (%d+) (%d+) (%S+) (%d+) (%d+)$') }
if #p ~= 12 or tonumber(p[5]) == nil then return redis.error_reply('MALFORMED gate parameters: ' .. ARGV[2]) end
local threshold, cooldown, max_cooldown, min_calls = tonumber(p[1]), tonumber(p[2]), tonumber(p[3]), tonumber(p[4])
local fail_rate, bucket, half_open_successes, probe_ttl = tonumber(p[5]), tonumber(p[6]), tonumber(p[7]), tonumber(p[8])
local key_ttl, slow_rate, sla_floor, sla_cap = tonumber(p[9]), tonumber(p[10]), tonumber(p[11]), tonumber(p[12])
local op = ARGV[3]

-- The gate. Absent numeric fields read as 0, absent optional ones (probe_until, closed_since)
-- as nil, an absent state as CLOSED.
local FIELDS = { 'state', 'epoch', 'open_until', 'probe_until', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1',
  's0', 's1', 'streak', 'closed_since', 'probe_ok' }
local OPTIONAL = { probe_until = true, closed_since = true }
local g = {}
do
  local values = redis.call('HMGET', key, unpack(FIELDS))
  for i, name in ipairs(FIELDS) do
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
  if g[name] == value then return end
  g[name] = value
  if value == nil then
    cleared[#cleared + 1] = name
  else
    changed[#changed + 1] = name
    changed[#changed + 1] = value
  end
end

local transition = nil

local function reply(verdict, fenced)
  if #changed > 0 then redis.call('HSET', key, unpack(changed)) end
  if #cleared > 0 then redis.call('HDEL', key, unpack(cleared)) end
  -- Every operation keeps the gate for key_ttl more, as the memory gates do (a missing key
  -- stays missing: a gate nothing was written to is a new gate).
  redis.call('PEXPIRE', key, key_ttl)
  local wait = 0
  if g.state == 'OPEN' then wait = retry_wait(g.state, g.open_until, clock(), max_cooldown) end
  local from, to, cause = '-', '-', '-'
  if transition then from, to, cause = transition[1], transition[2], transition[3] end
  return string.format('%s %s %d %d %s %s %s %d', verdict, g.state, g.epoch, wait, from, to, cause, fenced and 1 or 0)
end

-- min(cooldown × 2^(streak−1), max_cooldown); the plain cooldown for streak ≤ 1.
local function cooldown_eff(streak)
  if streak <= 1 then return math.min(cooldown, max_cooldown) end
  return math.min(cooldown * (2 ^ (streak - 1)), max_cooldown)
end

-- Every cause but the consecutive channel escalates the streak.
local function open(cause)
  local from = g.state
  local ms = cooldown
  if cause ~= 'consecutive_channel' then
    set('streak', g.streak + 1)
    ms = cooldown_eff(g.streak)
  end
  if sla_cap > 0 then
    -- SLA-adaptive: base × (2 − R), R the window's success rate, read as of now (a bucket that
    -- has rotated out no longer counts): base + base × failed / samples, in integers.
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
-- slow success). A clock that stepped back keeps writing the newest bucket.
local function count(failed, slow)
  local id = math.floor(clock() / bucket)
  if id > g.win_id then
    local shift = id == g.win_id + 1
    local a0, f0, s0 = g.a0, g.f0, g.s0
    set('a1', shift and a0 or 0)
    set('f1', shift and f0 or 0)
    set('s1', shift and s0 or 0)
    set('a0', 0)
    set('f0', 0)
    set('s0', 0)
    set('win_id', id)
  end
  set('a0', g.a0 + 1)
  if failed then set('f0', g.f0 + 1) end
  if slow then set('s0', g.s0 + 1) end
end

if op == 'enter' then
  if g.state == 'CLOSED' then return reply('allowed', false) end
  if g.state == 'OPEN' then
    if clock() < g.open_until then return reply('denied', false) end
    set('state', 'HALF_OPEN')
    set('probe_ok', 0)
    set('probe_until', clock() + probe_ttl)
    transition = { 'OPEN', 'HALF_OPEN', 'cooldown_elapsed' }
    return reply('probe', false)
  end
  if g.probe_until ~= nil and clock() < g.probe_until then return reply('denied', false) end
  -- lazy reissue: the holder of the expired lease is presumed lost
  set('probe_until', clock() + probe_ttl)
  return reply('probe', false)
end

if op == 'force_open' then
  if g.state ~= 'OPEN' then open('forced_open') end
  return reply('-', false)
end

if op ~= 'success' and op ~= 'failure' and op ~= 'release' then
  return redis.error_reply('MALFORMED gate operation: ' .. tostring(op))
end
local epoch = tonumber(ARGV[4])
if epoch == nil then return redis.error_reply('MALFORMED gate epoch: ' .. tostring(ARGV[4])) end
if epoch ~= g.epoch then return reply('-', true) end

if op == 'release' then
  if g.state == 'HALF_OPEN' then set('probe_until', nil) end
  return reply('-', false)
end

if op == 'success' then
  local kind = ARGV[5]
  if kind ~= 'real' and kind ~= 'slow' and kind ~= 'unusable' then
    return redis.error_reply('MALFORMED success kind: ' .. tostring(kind))
  end
  if g.state == 'CLOSED' then
    set('failures', 0)
    if kind ~= 'unusable' then
      local slow = kind == 'slow' and slow_rate ~= nil
      count(false, slow)
      local samples = g.a0 + g.a1
      if slow and samples >= min_calls and (g.s0 + g.s1) / samples >= slow_rate then
        open('slow_channel')
      elseif g.streak > 0 and g.closed_since ~= nil and clock() - g.closed_since >= 2 * cooldown_eff(g.streak) then
        -- decay on this success, after 2 × cooldown_eff of stable CLOSED (never on a timer)
        set('streak', 0)
      end
    end
  elseif g.state == 'HALF_OPEN' then
    set('probe_ok', g.probe_ok + 1)
    set('probe_until', nil)
    if g.probe_ok >= half_open_successes then
      set('state', 'CLOSED')
      set('failures', 0)
      set('closed_since', clock())
      -- the window starts afresh (see breaker.rs)
      for _, name in ipairs({ 'a0', 'f0', 's0', 'a1', 'f1', 's1' }) do set(name, 0) end
      transition = { 'HALF_OPEN', 'CLOSED', 'probe_succeeded' }
    end
  end
  return reply('-', false)
end

-- failure: the rate channel is checked first; the consecutive channel opens only without
-- health evidence (min_calls samples in the window, which then read below fail_rate).
if g.state == 'CLOSED' then
  set('failures', g.failures + 1)
  count(true, false)
  local samples, failed = g.a0 + g.a1, g.f0 + g.f1
  local evidence = samples >= min_calls
  if evidence and failed / samples >= fail_rate then
    open('rate_channel')
    set('failures', threshold)
  elseif g.failures >= threshold and not evidence then
    open('consecutive_channel')
  end
elseif g.state == 'HALF_OPEN' then
  open('probe_failed')
end
return reply('-', false)
