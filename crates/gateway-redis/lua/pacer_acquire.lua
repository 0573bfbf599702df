-- acquire: ARGV[4] lease TTL in ms, ARGV[5] the call's token estimate. Returns
-- {1, id, gen, ep, n, granted, tokens} or {0, limit, inflight}.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local inflight = redis.call('ZCARD', leases)
local early = limit < 1 and ready ~= nil and now < ready
local cost = math.max(tonumber(ARGV[5]), 1)
local seq = tonumber(redis.call('HGET', state, 'seq')) or 0
local spent = left(requests, now, seq) < 1 or left(tokens, now, tokens_spent) < cost
if inflight >= limit or early or spent then return { 0, fmt(limit), inflight } end
local id = redis.call('HINCRBY', state, 'seq', 1)
tokens_spent = tokens_spent + cost
redis.call('ZADD', leases, now + tonumber(ARGV[4]), id)
store()
touch()
return { 1, id, gen, ep, inflight, now, tokens_spent }
