-- now.lua: the first part of every script. ARGV[1] is now in ms (an injected clock), or ''
-- for the Redis server clock, so that workers whose clocks disagree agree on the time.
local function read_now()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
