-- acquire: ARGV[4] lease TTL in ms. Returns {1, id, gen, ep, n, granted} or {0, limit, inflight}.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local inflight = redis.call('ZCARD', leases)
local early = limit < 1 and ready ~= nil and now < ready
if inflight >= limit or early then return { 0, fmt(limit), inflight } end
local id = redis.call('HINCRBY', state, 'seq', 1)
redis.call('ZADD', leases, now + tonumber(ARGV[4]), id)
store()
touch()
return { 1, id, gen, ep, inflight, now }
