-- record_failure, fast path (runs before the shared prelude): a failure at the current epoch on
-- a CLOSED gate, within the current bucket, that opens neither channel only counts. The
-- channel rules are the full script's (record_failure.lua), evaluated on the same numbers;
-- anything that would open, rotate or is stale falls through to it.
local f = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1')
if (not f[1] or f[1] == 'CLOSED') and tonumber(ARGV[3]) == (tonumber(f[2]) or 0) then
  local threshold, min_calls, fail_rate, bucket_ms, rate_flag =
    string.match(ARGV[2], '^(%d+) %d+ %d+ (%d+) (%S+) (%d+) %d+ %d+ ([01]) ')
  local at = read_now()
  if bucket_ms and math.floor(at / tonumber(bucket_ms)) <= (tonumber(f[4]) or 0) then
    local failures = (tonumber(f[3]) or 0) + 1
    local a0, f0 = (tonumber(f[5]) or 0) + 1, (tonumber(f[6]) or 0) + 1
    local samples, failed = a0 + (tonumber(f[7]) or 0), f0 + (tonumber(f[8]) or 0)
    local evidence = rate_flag == '1' and samples >= tonumber(min_calls)
    local rate = 0
    if samples > 0 then rate = failed / samples end
    local by_rate = evidence and rate >= tonumber(fail_rate)
    local by_count = failures >= tonumber(threshold) and not (evidence and rate < tonumber(fail_rate))
    if not by_rate and not by_count then
      redis.call('HSET', KEYS[1], 'failures', failures, 'a0', a0, 'f0', f0)
      return '- CLOSED ' .. (f[2] or '0') .. ' 0 - - - 0'
    end
  end
end
