-- release: ARGV[3] permit id. Releasing twice is harmless.
redis.call('ZREM', leases, ARGV[3])
return 1
