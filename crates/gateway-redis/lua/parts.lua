-- parts.lua: the first part of admit.lua and settle.lua, after now.lua: reading the plan
-- (ARGV[1]) and each part's keys and arguments in turn (ARGV[2..]: each part's count, then its
-- arguments), with one time for every part.

local plan = ARGV[1]
local next_key, next_arg = 1, 2
local function has(p) return string.find(plan, p, 1, true) ~= nil end

-- The server's time, read once for every part whose now argument is '' (the server's clock,
-- not an injected one): the parts agree on it, and TIME is one call (a redis.call costs more
-- than most of a part's own work).
local server_now = nil

-- The next part's keys and arguments; `again`: its keys are the next part's too; `lazily`: a
-- now of '' is left to the part unless the time was read already (a part that may not need it:
-- the gate's enter, whose fast path reads no time).
local function part(count, again, lazily)
  local keys, args = {}, {}
  for i = 1, count do keys[i] = KEYS[next_key + i - 1] end
  if not again then next_key = next_key + count end
  local n = tonumber(ARGV[next_arg])
  for i = 1, n do args[i] = ARGV[next_arg + i] end
  next_arg = next_arg + n + 1
  if args[1] == '' and not (lazily and server_now == nil) then
    if server_now == nil then server_now = server_time() end
    args[1] = server_now
  end
  return keys, args
end
