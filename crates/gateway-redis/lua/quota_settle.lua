-- settle: ARGV[3] permit id, ARGV[4] actual tokens. Nothing once the start left the window.
-- The TTL set by acquire (which outlives the lease and the window) is left as it is.
if redis.call('ZSCORE', starts, ARGV[3]) then
  redis.call('HSET', tokens, ARGV[3], ARGV[4])
end
return 1
