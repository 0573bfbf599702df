-- gate.lua: one operation on one breaker gate. It is `Gate::apply` of
-- crates/gateway-core/src/breaker.rs, rule for rule; the differential contract suite replays
-- random operation sequences on both and compares every reply and state.
--
-- KEYS[1]    the gate HASH (fields named as in SPEC §3)
-- ARGV[1]    now in ms, or '' to use the Redis server clock (TIME, read only when needed)
-- ARGV[2]    the operation: enter | success | failure | force_open | release
-- ARGV[3]    the incarnation: of the admission, for a record (success, failure, release); the
--            one a gate not stored takes, for enter and force_open (Gate::apply_stored)
-- ARGV[4]    the admission epoch of a record, else '-'
-- ARGV[5]    how a success counts: real | slow | unusable, else '-'
-- ARGV[6..]  the gate parameters, in the order of the constants THRESHOLD..SLA_CAP below ('-'
--            for an absent slow_rate, 0 0 for absent SLA bounds); each is read when a rule
--            first uses it, so one no rule of this operation uses is not checked
--
-- Returns one string, 'verdict state incarnation epoch retry_after_ms from to cause fenced',
-- with '-' for an empty item and incarnation 0 for a gate not stored. An argument this script cannot read is an error reply that starts with
-- MALFORMED (the client reads it as a malformed request, never as an unavailable Redis).
--
-- Speed: every value crossing between Redis and Lua, and every table or closure a run builds,
-- costs a fraction of a microsecond, so a parameter is converted when first used, the fields
-- are read when first needed (one HMGET on an operation's common path), and only the fields
-- that changed are written (one HSET).

local key = KEYS[1]

local now = nil
local function clock()
  if now == nil then now = read_now() end
  return now
end

-- The parameters: ARGV[6..17], each converted on first use (a parameter that is not a number
-- is an error naming it; only slow_rate may be '-', absent).
if #ARGV ~= 17 then return redis.error_reply('MALFORMED gate arguments: expected 17, got ' .. #ARGV) end
local THRESHOLD, COOLDOWN, MAX_COOLDOWN, MIN_CALLS, FAIL_RATE, BUCKET = 6, 7, 8, 9, 10, 11
local HALF_OPEN_SUCCESSES, PROBE_TTL, KEY_TTL, SLOW_RATE, SLA_FLOOR, SLA_CAP = 12, 13, 14, 15, 16, 17
local params = {}
local function p(i)
  local v = params[i]
  if v == nil then
    v = tonumber(ARGV[i])
    if v == nil and not (i == SLOW_RATE and ARGV[i] == '-') then
      error(redis.error_reply('MALFORMED gate parameter ' .. (i - 5) .. ': ' .. tostring(ARGV[i])))
    end
    params[i] = v
  end
  return v
end

local op = ARGV[2]
-- Incarnations are compared and stored as the decimal text they arrive as (a u64 does not fit
-- a Lua number).
local incarnation = ARGV[3]
if not string.match(incarnation, '^[0-9]+$') then return redis.error_reply('MALFORMED gate incarnation: ' .. incarnation) end

-- The reply, 'verdict state incarnation epoch retry_after_ms from to cause fenced': its one
-- encoder.
local function reply_text(verdict, state, inc, epoch, wait, transition, fenced)
  local change = '- - -'
  if transition then change = transition[1] .. ' ' .. transition[2] .. ' ' .. transition[3] end
  return verdict .. ' ' .. state .. ' ' .. (inc or '0') .. ' ' .. string.format('%d %d', epoch, wait) .. ' ' .. change .. (fenced and ' 1' or ' 0')
end

-- The window's bucket at `at`.
local function bucket_of(at)
  return math.floor(at / p(BUCKET))
end

-- The two channels of a failure in CLOSED (the rate channel first; the consecutive one only
-- without health evidence: min_calls samples, which then read below fail_rate), given the
-- consecutive failures and the window after it: the cause that opens the gate, or nil.
local function failure_opens(failures, samples, failed)
  local evidence = samples >= p(MIN_CALLS)
  if evidence and failed / samples >= p(FAIL_RATE) then return 'rate_channel' end
  if failures >= p(THRESHOLD) and not evidence then return 'consecutive_channel' end
  return nil
end

-- Fast paths: an operation on a CLOSED gate under the current fence whose whole effect is
-- nothing (enter; or creating the gate, for an enter on a gate not stored) or a count within the current bucket of a window that has rotated before (a real
-- success with no streak to decay, a failure that opens no channel) is answered here, through the helpers above, without the
-- machinery below; everything else falls through to the body. They change no field but the
-- bucket's counts, so they keep the TTL as it is (Gate::keeps_longer_than). The differential
-- suite runs both paths against Gate::apply. What a fast path read before it fell through is
-- handed to the body (`read`: the names and their values), which does not read it again.
local read = nil
if op == 'enter' then
  local f = redis.call('HMGET', key, 'state', 'epoch', 'incarnation')
  if not f[3] then
    -- A gate not stored (or stored by a build before incarnations): this enter creates it, and
    -- a change beyond the counts keeps it key_ttl longer.
    redis.call('HSET', key, 'incarnation', incarnation)
    redis.call('PEXPIRE', key, p(KEY_TTL))
    f[3] = incarnation
  end
  if not f[1] or f[1] == 'CLOSED' then return reply_text('allowed', 'CLOSED', f[3], tonumber(f[2]) or 0, 0, nil, false) end
  read = { { 'state', 'epoch', 'incarnation' }, f }
elseif op == 'success' and ARGV[5] == 'real' then
  local f = redis.call('HMGET', key, 'state', 'epoch', 'failures', 'win_id', 'streak', 'a0', 'incarnation')
  local epoch = tonumber(f[2]) or 0
  local win = tonumber(f[4]) or 0
  if (not f[1] or f[1] == 'CLOSED') and f[7] == incarnation and tonumber(ARGV[4]) == epoch and (tonumber(f[5]) or 0) == 0
      and win > 0 and bucket_of(clock()) <= win then
    local a0 = (tonumber(f[6]) or 0) + 1
    if (tonumber(f[3]) or 0) ~= 0 then
      redis.call('HSET', key, 'failures', 0, 'a0', a0)
    else
      redis.call('HSET', key, 'a0', a0)
    end
    return reply_text('-', 'CLOSED', f[7], epoch, 0, nil, false)
  end
  read = { { 'state', 'epoch', 'failures', 'win_id', 'streak', 'a0', 'incarnation' }, f }
elseif op == 'failure' then
  local f = redis.call('HMGET', key, 'state', 'epoch', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1', 'incarnation')
  local epoch = tonumber(f[2]) or 0
  local win = tonumber(f[4]) or 0
  if (not f[1] or f[1] == 'CLOSED') and f[9] == incarnation and tonumber(ARGV[4]) == epoch and win > 0 and bucket_of(clock()) <= win then
    local failures, a0, f0 = (tonumber(f[3]) or 0) + 1, (tonumber(f[5]) or 0) + 1, (tonumber(f[6]) or 0) + 1
    if failure_opens(failures, a0 + (tonumber(f[7]) or 0), f0 + (tonumber(f[8]) or 0)) == nil then
      redis.call('HSET', key, 'failures', failures, 'a0', a0, 'f0', f0)
      return reply_text('-', 'CLOSED', f[9], epoch, 0, nil, false)
    end
  end
  read = { { 'state', 'epoch', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1', 'incarnation' }, f }
end

-- The gate: a field is read when first needed (fields set are known). Absent numeric fields
-- read as 0, absent optional ones (probe_until, closed_since) as nil, an absent state as CLOSED,
-- the incarnation as its text (nil: the gate is not stored).
local g, loaded = {}, {}
local function decode(name, v)
  loaded[name] = true
  if name == 'state' then
    g.state = v or 'CLOSED'
  elseif name == 'incarnation' then
    g.incarnation = v or nil
  elseif name == 'probe_until' or name == 'closed_since' then
    g[name] = tonumber(v)
  else
    g[name] = tonumber(v) or 0
  end
end
local function need(...)
  local first = next(loaded) == nil
  local names = first and { ... } or {}
  if not first then
    for i = 1, select('#', ...) do
      local name = select(i, ...)
      if not loaded[name] then names[#names + 1] = name end
    end
    if #names == 0 then return end
  end
  local values = redis.call('HMGET', key, unpack(names))
  for i, name in ipairs(names) do decode(name, values[i]) end
end
if read then
  for i, name in ipairs(read[1]) do decode(name, read[2][i]) end
end

-- Changed fields, written by reply() as they end: one HSET of those with a value, one HDEL of
-- those cleared.
local dirty, written = {}, {}
-- Whether a change beyond the current bucket's counts was made (Gate::keeps_longer_than).
local keep = false
-- A field set is known from then on: a later need() must not read it back from the HASH.
-- (Clearing a field must know whether it is there.)
local function set(name, value)
  if value == nil then need(name) end
  loaded[name] = true
  if g[name] == value then return end
  g[name] = value
  if name ~= 'a0' and name ~= 'f0' and name ~= 's0' and name ~= 'failures' then keep = true end
  if not written[name] then
    written[name] = true
    dirty[#dirty + 1] = name
  end
end

local transition = nil

local function reply(verdict, fenced)
  if #dirty > 0 then
    local values, cleared = {}, {}
    for _, name in ipairs(dirty) do
      if g[name] == nil then
        cleared[#cleared + 1] = name
      else
        values[#values + 1] = name
        values[#values + 1] = g[name]
      end
    end
    if #values > 0 then redis.call('HSET', key, unpack(values)) end
    if #cleared > 0 then redis.call('HDEL', key, unpack(cleared)) end
    -- A window that never rotated (a clock before the first bucket's end) is kept by every
    -- change: its counts are the key's first write.
    if g.win_id == 0 then keep = true end
  end
  -- A gate is kept key_ttl past its last change beyond the current bucket's counts, as the
  -- memory gates keep it.
  if keep then redis.call('PEXPIRE', key, p(KEY_TTL)) end
  local wait = 0
  if g.state == 'OPEN' then
    need('open_until')
    wait = retry_wait(g.state, g.open_until, clock(), p(MAX_COOLDOWN))
  end
  return reply_text(verdict, g.state, g.incarnation, g.epoch, wait, transition, fenced)
end

-- min(cooldown × 2^(streak−1), max_cooldown); the plain cooldown for streak ≤ 1.
local function cooldown_eff(streak)
  if streak <= 1 then return math.min(p(COOLDOWN), p(MAX_COOLDOWN)) end
  return math.min(p(COOLDOWN) * (2 ^ (streak - 1)), p(MAX_COOLDOWN))
end

-- Every cause but the consecutive channel escalates the streak.
local function open(cause)
  need('streak', 'probe_until', 'closed_since')
  local from = g.state
  local ms = p(COOLDOWN)
  if cause ~= 'consecutive_channel' then
    set('streak', g.streak + 1)
    ms = cooldown_eff(g.streak)
  end
  if p(SLA_CAP) > 0 then
    -- SLA-adaptive: base × (2 − R), R the window's success rate, read as of now (a bucket that
    -- has rotated out no longer counts): base + base × failed / samples, in integers.
    need('win_id', 'a0', 'f0', 'a1', 'f1')
    local id = bucket_of(clock())
    local samples, failed = 0, 0
    if id <= g.win_id then
      samples, failed = g.a0 + g.a1, g.f0 + g.f1
    elseif id == g.win_id + 1 then
      samples, failed = g.a0, g.f0
    end
    failed = math.min(failed, samples)
    if samples > 0 then ms = ms + math.floor(ms * failed / samples) end
    ms = math.max(math.min(ms, math.max(p(SLA_CAP), p(SLA_FLOOR))), p(SLA_FLOOR))
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
  need('win_id', 'a0')
  local id = bucket_of(clock())
  if id > g.win_id then
    need('f0', 's0')
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
  if failed then
    need('f0')
    set('f0', g.f0 + 1)
  end
  if slow then
    need('s0')
    set('s0', g.s0 + 1)
  end
end


if op == 'enter' then
  -- (a CLOSED gate, and a gate not stored, were answered by the fast path)
  need('state', 'epoch', 'open_until', 'probe_until', 'incarnation')
  if g.state == 'OPEN' then
    if clock() < g.open_until then return reply('denied', false) end
    set('state', 'HALF_OPEN')
    set('probe_ok', 0)
    set('probe_until', clock() + p(PROBE_TTL))
    transition = { 'OPEN', 'HALF_OPEN', 'cooldown_elapsed' }
    return reply('probe', false)
  end
  if g.probe_until ~= nil and clock() < g.probe_until then return reply('denied', false) end
  -- lazy reissue: the holder of the expired lease is presumed lost
  set('probe_until', clock() + p(PROBE_TTL))
  return reply('probe', false)
end

if op == 'force_open' then
  need('state', 'epoch', 'streak', 'incarnation')
  -- a dead source is dead whatever Redis lost: a gate not stored is created, then opened
  if g.incarnation == nil then set('incarnation', incarnation) end
  if g.state ~= 'OPEN' then open('forced_open') end
  return reply('-', false)
end

local epoch = tonumber(ARGV[4])
if epoch == nil then return redis.error_reply('MALFORMED gate epoch: ' .. tostring(ARGV[4])) end
-- A record is fenced by the admission's incarnation and epoch; on a gate not stored (lost
-- since the admission) it is fenced too, and stores nothing.
local function stale()
  return g.incarnation ~= incarnation or epoch ~= g.epoch
end

if op == 'release' then
  need('state', 'epoch', 'probe_until', 'incarnation')
  if stale() then return reply('-', true) end
  if g.state == 'HALF_OPEN' then set('probe_until', nil) end
  return reply('-', false)
end

if op == 'success' then
  local kind = ARGV[5]
  if kind ~= 'real' and kind ~= 'slow' and kind ~= 'unusable' then return redis.error_reply('MALFORMED success kind: ' .. tostring(kind)) end
  need('state', 'epoch', 'failures', 'win_id', 'streak', 'a0', 'incarnation')
  if stale() then return reply('-', true) end
  if g.state == 'CLOSED' then
    set('failures', 0)
    if kind ~= 'unusable' then
      local slow = kind == 'slow' and p(SLOW_RATE) ~= nil
      count(false, slow)
      if slow then need('a1', 's0', 's1') end
      if slow and g.a0 + g.a1 >= p(MIN_CALLS) and (g.s0 + g.s1) / (g.a0 + g.a1) >= p(SLOW_RATE) then
        open('slow_channel')
      elseif g.streak > 0 then
        -- decay on this success, after 2 × cooldown_eff of stable CLOSED (never on a timer)
        need('closed_since')
        if g.closed_since ~= nil and clock() - g.closed_since >= 2 * cooldown_eff(g.streak) then set('streak', 0) end
      end
    end
  elseif g.state == 'HALF_OPEN' then
    need('probe_ok', 'probe_until', 'closed_since', 'f0', 's0', 'a1', 'f1', 's1')
    set('probe_ok', g.probe_ok + 1)
    set('probe_until', nil)
    if g.probe_ok >= p(HALF_OPEN_SUCCESSES) then
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

if op ~= 'failure' then return redis.error_reply('MALFORMED gate operation: ' .. tostring(op)) end
-- failure: the channels of failure_opens.
need('state', 'epoch', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1', 'streak', 'incarnation')
if stale() then return reply('-', true) end
if g.state == 'CLOSED' then
  set('failures', g.failures + 1)
  count(true, false)
  local cause = failure_opens(g.failures, g.a0 + g.a1, g.f0 + g.f1)
  if cause then open(cause) end
  -- a rate channel open tops the consecutive count up to the threshold
  if cause == 'rate_channel' then set('failures', p(THRESHOLD)) end
elseif g.state == 'HALF_OPEN' then
  open('probe_failed')
end
return reply('-', false)
