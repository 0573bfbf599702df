-- now.lua: the first part of every script. ARGV[1] is now in ms (an injected clock), or ''
-- for the Redis server clock, so that workers whose clocks disagree agree on the time.
local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function read_now()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  return server_time()
end

-- The retry_after contract of one gate (breaker.rs `Gate::retry_after`): OPEN → the time left
-- until open_until, never above max_cooldown; else 0.
local function retry_wait(state, open_until, at, max_cooldown)
  if state ~= 'OPEN' then return 0 end
  return math.min(math.max(open_until - at, 0), max_cooldown)
end
