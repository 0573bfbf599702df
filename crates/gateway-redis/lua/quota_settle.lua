-- settle: ARGV[3] incarnation, ARGV[4] permit id, ARGV[5] actual tokens. Nothing once the start
-- left the window, or for a permit of another incarnation.
-- The TTL set by acquire (which outlives the lease and the window) is left as it is.
if redis.call('HGET', tokens, 'incarnation') == ARGV[3] and redis.call('ZSCORE', starts, ARGV[4]) then
  redis.call('HSET', tokens, ARGV[4], ARGV[5])
end
return 1
