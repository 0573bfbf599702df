-- pacer.lua: shared part of the pacer scripts. It mirrors crates/gateway-core/src/aimd/mod.rs
-- rule for rule, float operation for float operation.
--
-- KEYS[1] state HASH   KEYS[2] leases ZSET (lease id -> lease end ms)
-- ARGV[1] now in ms, or '' for the Redis server clock; ARGV[2] key TTL in ms; ARGV[3] the
-- initial limit (min(8, ceiling), computed by the caller); ARGV[4..] the operation's own.
-- The HASH: limit (L), gen (cut generation), seq (lease ids), w and held (the refused ceiling,
-- absent when none), ep (its epoch), srtt and t429 (EWMAs in ms), r1 and r2 (when the last two
-- 429s were answered, the latest first), ready (below one in flight: the next lease no sooner),
-- tk (the token estimates of every lease granted), and the provider's reported budgets as
-- aimd/budget.rs keeps them, rq_* for requests and tk_* for tokens: rem, refill, full, lim (the
-- advertised limit, absent when none), by, at, spent, till.
-- Floats are stored and returned as '%.17g' strings: exact doubles, never Redis's integer
-- conversion of a Lua number.

local now = read_now()
local key_ttl = tonumber(ARGV[2])
local state, leases = KEYS[1], KEYS[2]
local function fmt(x) return string.format('%.17g', x) end

-- Literal tables: a script builds whatever it builds again on every run.
local BUDGET = { 'rem', 'refill', 'full', 'lim', 'by', 'at', 'spent', 'till' }
local FIELDS = { 'limit', 'gen', 'w', 'held', 'ep', 'srtt', 't429', 'r1', 'r2', 'ready', 'tk',
  'rq_rem', 'rq_refill', 'rq_full', 'rq_lim', 'rq_by', 'rq_at', 'rq_spent', 'rq_till',
  'tk_rem', 'tk_refill', 'tk_full', 'tk_lim', 'tk_by', 'tk_at', 'tk_spent', 'tk_till', 'seq' }
-- How each of the first 11 fields is written ('%.17g' past them, held as its text).
local FORMATS = { '%.17g', '%d', '%d', false, '%d', '%.17g', '%.17g', '%d', '%d', '%d', '%d' }
local stored = redis.call('HMGET', state, unpack(FIELDS))
local limit = tonumber(stored[1]) or tonumber(ARGV[3])
local gen = tonumber(stored[2]) or 0
local w = tonumber(stored[3])
local held = stored[4] == '1'
local ep = tonumber(stored[5]) or 0
local srtt = tonumber(stored[6])
local t429 = tonumber(stored[7])
local r1 = tonumber(stored[8])
local r2 = tonumber(stored[9])
local ready = tonumber(stored[10])
local tokens_spent = tonumber(stored[11]) or 0

-- A budget from the stored fields starting at index i (nil when none is kept).
local function budget_at(i)
  local rem = tonumber(stored[i])
  if rem == nil then return nil end
  return { rem = rem, refill = tonumber(stored[i + 1]), full = tonumber(stored[i + 2]), lim = tonumber(stored[i + 3]),
    by = tonumber(stored[i + 4]), at = tonumber(stored[i + 5]), spent = tonumber(stored[i + 6]), till = tonumber(stored[i + 7]) }
end
local requests, tokens = budget_at(12), budget_at(20)

-- What is left of budget b at t when the account has spent `spent` in all (budget.rs's left).
local function left(b, t, spent)
  if b == nil or t >= b.till then return math.huge end
  local elapsed = math.max(t - b.at, 0)
  return math.min(b.rem + b.refill * elapsed, b.full) - math.max(spent - b.spent, 0)
end

-- When `need` is left of budget b again, if less is left at t (budget.rs's ready_at): the
-- refill's first whole millisecond that covers it, or the reset; nil when enough is left.
local function ready_at(b, t, spent, need)
  local short = need - left(b, t, spent)
  if short <= 0 then return nil end
  if b.refill > 0 and need + math.max(spent - b.spent, 0) <= b.full then
    return math.min(t + math.ceil(short / b.refill), b.till)
  end
  return b.till
end

-- Writes the fields that differ from what is stored; deletes those that became none. A value
-- is formatted only when it differs from the stored one as a number (a format, like a parse,
-- costs more than most steps of a script; an unchanged value formats to the text stored). A
-- budget's fields are looked at only when it is kept now or its rem is stored: a budget, once
-- kept, stays, and its rem is never absent (budget_at, kept).
local function store()
  local values = { limit, gen, w, w and (held and '1' or '0') or nil, ep, srtt, t429, r1, r2, ready, tokens_spent }
  local last = 11
  for k, b in ipairs({ requests or false, tokens or false }) do
    local base = 11 + (k - 1) * #BUDGET
    if b or stored[base + 1] then
      if b then
        for j, name in ipairs(BUDGET) do values[base + j] = b[name] end
      end
      last = base + #BUDGET
    end
  end
  local set, del = {}, {}
  -- By index: the table has holes, so its length is no guide.
  for i = 1, last do
    local name, v, old = FIELDS[i], values[i], stored[i]
    if old == false then old = nil end
    if v == nil then
      if old ~= nil then del[#del + 1] = name end
    elseif type(v) == 'string' then
      if v ~= old then set[#set + 1] = name; set[#set + 1] = v end
    elseif old == nil or v ~= tonumber(old) then
      local text = string.format(FORMATS[i] or '%.17g', v)
      if text ~= old then set[#set + 1] = name; set[#set + 1] = text end
    end
  end
  if #set > 0 then redis.call('HSET', state, unpack(set)) end
  if #del > 0 then redis.call('HDEL', state, unpack(del)) end
end

local function touch()
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, key_ttl) end
end
