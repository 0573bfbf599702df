-- release: ARGV[3] incarnation, ARGV[4] permit id. Releasing twice, or a permit of another
-- incarnation (granted before Redis lost the account), is harmless.
if redis.call('HGET', tokens, 'incarnation') == ARGV[3] then
  redis.call('ZREM', leases, ARGV[4])
end
return 1
