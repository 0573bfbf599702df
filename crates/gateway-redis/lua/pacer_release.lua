-- release: ARGV[4] lease id, ARGV[5] the lease's generation, ARGV[6] effect ('increase',
-- 'decrease' or 'nothing'), ARGV[7] ceiling. Returns the limit after. A decrease cuts only
-- when no cut came since the lease was taken (one cut per round trip).
redis.call('ZREM', leases, ARGV[4])
local effect, ceiling = ARGV[6], math.max(tonumber(ARGV[7]), 1)
if effect == 'increase' then
  limit = math.min(limit + 1 / limit, ceiling)
elseif effect == 'decrease' and tonumber(ARGV[5]) == gen then
  limit = math.max(limit * 0.5, 1)
  gen = gen + 1
end
store()
touch()
return fmt(limit)
