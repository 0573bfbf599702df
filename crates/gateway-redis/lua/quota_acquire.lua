-- acquire: ARGV[3] max_concurrency, ARGV[4] rpm, ARGV[5] tpm (-1 = unlimited),
-- ARGV[6] permit_ttl_ms, ARGV[7] estimated tokens, ARGV[8] the incarnation an account not
-- stored takes (decimal text).
-- Returns {1, incarnation, id} or {0, limit, retry_after_ms}.
local max_concurrency, rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local permit_ttl, estimate = tonumber(ARGV[6]), tonumber(ARGV[7])

-- prune: expired leases, starts that left the rolling minute (and their charges)
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local old = redis.call('ZRANGEBYSCORE', starts, '-inf', now - WINDOW)
if #old > 0 then
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - WINDOW)
  redis.call('HDEL', tokens, unpack(old))
end

local limit, wait = nil, 0
local function refuse(name, ms)
  if limit == nil then limit = name end
  if ms > wait then wait = ms end
end
local function leaves_in(at) return math.max(at + WINDOW - now, 0) end

if max_concurrency >= 0 and redis.call('ZCARD', leases) >= max_concurrency then
  refuse('max_concurrency', 0)
end
local n = redis.call('ZCARD', starts)
if rpm == 0 then
  refuse('rpm', WINDOW)
elseif rpm > 0 and n >= rpm then
  local leaving = redis.call('ZRANGE', starts, n - rpm, n - rpm, 'WITHSCORES')
  refuse('rpm', leaves_in(tonumber(leaving[2])))
end
if tpm >= 0 and n > 0 then
  local entries = redis.call('ZRANGE', starts, 0, -1, 'WITHSCORES')
  local ids = {}
  for i = 1, #entries, 2 do ids[#ids + 1] = entries[i] end
  local charged = redis.call('HMGET', tokens, unpack(ids))
  local used = 0
  for i = 1, #charged do used = used + (tonumber(charged[i]) or 0) end
  if used > 0 and used + estimate > tpm then
    local need = math.max(tpm - estimate, 0)
    local left = used
    local last_at = tonumber(entries[#entries])
    for i = 1, #ids do
      left = left - (tonumber(charged[i]) or 0)
      if left <= need and estimate <= tpm then
        last_at = tonumber(entries[2 * i])
        break
      end
    end
    refuse('tpm', leaves_in(last_at))
  end
end
if limit ~= nil then return { 0, limit, wait } end

local incarnation = redis.call('HGET', tokens, 'incarnation')
if not incarnation then
  incarnation = ARGV[8]
  redis.call('HSET', tokens, 'incarnation', incarnation)
end
local id = redis.call('INCR', seq)
redis.call('ZADD', leases, now + permit_ttl, id)
redis.call('ZADD', starts, now, id)
redis.call('HSET', tokens, id, estimate)
touch()
return { 1, incarnation, id }
