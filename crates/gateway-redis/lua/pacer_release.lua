-- release: ARGV[4] lease id, ARGV[5] its generation, ARGV[6] its epoch, ARGV[7] its n,
-- ARGV[8] when it was granted (ms), ARGV[9] effect ('increase', 'decrease', 'round_trip' or
-- 'nothing'), ARGV[10] ceiling, ARGV[11] the lease's token count, ARGV[12..14] the request
-- report (limit, remaining, reset in ms; '' when absent), ARGV[15..17] the token report and
-- ARGV[18] the advertised limits' window in ms.
-- Returns the limit after. The rules are aimd/mod.rs's and budget.rs's.
redis.call('ZREM', leases, ARGV[4])
local lid = tonumber(ARGV[4])
local lgen, lep, n, granted = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
-- budget.rs's Budget::of and keep_freshest.
local function kept(b, i, spent)
  local rem = tonumber(ARGV[i + 1])
  if rem == nil or (b ~= nil and lid <= b.by) then return b end
  local lim, reset = tonumber(ARGV[i]), tonumber(ARGV[i + 2])
  local full, refill = rem, 0
  if lim ~= nil and reset > 0 and lim > rem then
    full, refill = lim, (lim - rem) / reset
  elseif lim ~= nil then
    full = math.max(lim, rem)
  end
  return { rem = rem, refill = refill, full = full, lim = lim, by = lid, at = granted, spent = spent, till = granted + reset }
end
requests = kept(requests, 12, lid)
tokens = kept(tokens, 15, tonumber(ARGV[11]))
local effect, ceiling = ARGV[9], math.max(tonumber(ARGV[10]), 1)
local took = math.max(now - granted, 0)
local below_one = limit < 1
local function ewma(old, sample) if old == nil then return sample end return old + (sample - old) / 8 end
local function cut() limit = math.max(limit * 0.7, 0.0625); gen = gen + 1 end
if effect == 'increase' then
  srtt = ewma(srtt, took)
  if w ~= nil and lep == ep and n >= w then w = nil; held = false end
  local d = 1
  if w ~= nil and held and limit >= w - 1 then d = 0.125 end
  limit = math.min(limit + d / limit, ceiling)
elseif effect == 'round_trip' then
  srtt = ewma(srtt, took)
elseif effect == 'decrease' then
  t429 = ewma(t429, took)
  local window = 4 * t429
  local recent = 0
  if r1 ~= nil and math.max(now - r1, 0) <= window then recent = recent + 1 end
  if r2 ~= nil and math.max(now - r2, 0) <= window then recent = recent + 1 end
  local burst = recent + 1 >= 3
  r2, r1 = r1, now
  if lgen == gen then
    if below_one then
      cut()
    elseif w ~= nil and n >= w then
      w, held, ep = n, true, ep + 1
      limit = math.max(math.min(limit, n - 1), 1)
    elseif burst then
      w, held, ep = n, false, ep + 1
      -- from the flight the burst met (its own lease included), not from an unused limit
      limit = math.min(limit, math.max(n + 1, redis.call('ZCOUNT', leases, '(' .. now, '+inf') + 1))
      cut()
    elseif w ~= nil and redis.call('ZCOUNT', leases, '(' .. now, '+inf') >= w then
      -- an overtaken probe: the flight it met is at or above W; held there
      held, ep = true, ep + 1
      limit = math.max(math.min(limit, w - 1), 1)
    end
  end
end
-- The advertised request limit caps L and W.
if requests ~= nil and requests.lim ~= nil and srtt ~= nil then
  local cap = 2 * requests.lim * srtt / math.max(tonumber(ARGV[18]), 1)  -- budget.rs ADVERTISED_HEADROOM
  limit = math.min(limit, math.max(cap, 0.0625))
  local top = math.max(math.ceil(cap), 1)
  if w ~= nil and w > top then w = top end
end
if limit < 1 then
  ready = now + math.floor((srtt or 1000) * (1 / limit - 1))
else
  ready = nil
end
store()
touch()
return fmt(limit)
