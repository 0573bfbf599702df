-- acquire: ARGV[4] lease TTL in ms, ARGV[5] the call's token estimate. Returns
-- {1, id, gen, ep, n, granted, tokens, room} (room: 1 when one more place fits under the limit
-- after this one) or {0, limit, inflight, ready_in} (ready_in: ms until time
-- alone lifts what refused, as aimd/mod.rs's try_acquire; -1 when only a release frees a place).
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local inflight = redis.call('ZCARD', leases)
local cost = math.max(tonumber(ARGV[5]), 1)
local seq = tonumber(stored[#FIELDS]) or 0
-- Time lifts a refusal of these when the last of them lifts.
local timed = nil
local function later(t) if t ~= nil and (timed == nil or t > timed) then timed = t end end
if limit < 1 and ready ~= nil and now < ready then later(ready) end
later(ready_at(requests, now, seq, 1))
later(ready_at(tokens, now, tokens_spent, cost))
if inflight >= limit or timed ~= nil then return { 0, fmt(limit), inflight, timed and (timed - now) or -1 } end
local id = redis.call('HINCRBY', state, 'seq', 1)
tokens_spent = tokens_spent + cost
redis.call('ZADD', leases, now + tonumber(ARGV[4]), id)
store()
touch()
return { 1, id, gen, ep, inflight, now, tokens_spent, (inflight + 1 < limit) and 1 or 0 }
