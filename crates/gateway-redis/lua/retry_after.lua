-- retry_after: the minimum over the gates of OPEN → open_until − now (capped at the gate's
-- max_cooldown), else 0. KEYS: the gate HASHes. ARGV[1] now ('' = TIME), ARGV[1 + i] the
-- max_cooldown_ms of KEYS[i].
local now = read_now()
local best = nil
for i, key in ipairs(KEYS) do
  local fields = redis.call('HMGET', key, 'state', 'open_until')
  local wait = 0
  if fields[1] == 'OPEN' then
    wait = math.min(math.max(tonumber(fields[2]) - now, 0), tonumber(ARGV[1 + i]))
  end
  if best == nil or wait < best then best = wait end
end
return best or 0
