-- release: ARGV[4] lease id, ARGV[5] its generation, ARGV[6] its epoch, ARGV[7] its n,
-- ARGV[8] when it was granted (ms), ARGV[9] effect ('increase', 'decrease', 'round_trip' or
-- 'nothing'), ARGV[10] ceiling. Returns the limit after. The rules are aimd/mod.rs's.
redis.call('ZREM', leases, ARGV[4])
local lgen, lep, n, granted = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
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
      cut()
    end
  end
end
if limit < 1 then
  ready = now + math.floor((srtt or 1000) * (1 / limit - 1))
else
  ready = nil
end
store()
touch()
return fmt(limit)
