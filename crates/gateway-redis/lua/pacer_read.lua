-- read: the limit and the leases in flight now. Returns {limit, inflight}; writes nothing.
return { fmt(limit), redis.call('ZCOUNT', leases, '(' .. now, '+inf') }
