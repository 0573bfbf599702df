-- retry_after: the minimum over the gates of their retry_after (now.lua's retry_wait).
-- KEYS: the gate HASHes. ARGV[1] now ('' = TIME), ARGV[1 + i] the max_cooldown_ms of KEYS[i].
local at = read_now()
local best = nil
for i, key in ipairs(KEYS) do
  local fields = redis.call('HMGET', key, 'state', 'open_until')
  local wait = retry_wait(fields[1], tonumber(fields[2]) or 0, at, tonumber(ARGV[1 + i]))
  if best == nil or wait < best then best = wait end
end
return best or 0
