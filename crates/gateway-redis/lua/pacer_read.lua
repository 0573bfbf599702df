-- read: the limit, the leases in flight now and the refused ceiling. Returns {limit, inflight,
-- w or -1, held (1 or 0)}; writes nothing.
return { fmt(limit), redis.call('ZCOUNT', leases, '(' .. now, '+inf'), w or -1, held and 1 or 0 }
