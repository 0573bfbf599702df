-- acquire: ARGV[4] lease TTL in ms. Returns {1, id, gen} or {0, limit, inflight}.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local inflight = redis.call('ZCARD', leases)
if inflight >= limit then return { 0, fmt(limit), inflight } end
local id = redis.call('HINCRBY', state, 'seq', 1)
redis.call('ZADD', leases, now + tonumber(ARGV[4]), id)
store()
touch()
return { 1, id, gen }
