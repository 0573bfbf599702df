-- record_success, fast path (runs before the shared prelude): a real success at the current
-- epoch on a CLOSED gate with no streak to decay and no bucket to rotate resets the
-- consecutive count and counts one attempt. Everything else falls through to the full script.
if ARGV[4] == '1' then
  local f = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'failures', 'win_id', 'streak')
  if (not f[1] or f[1] == 'CLOSED') and tonumber(ARGV[3]) == (tonumber(f[2]) or 0)
      and (tonumber(f[5]) or 0) == 0 then
    local at = read_now()
    local bucket_ms = tonumber(string.match(ARGV[2], '^%d+ %d+ %d+ %d+ %S+ (%d+) '))
    if math.floor(at / bucket_ms) <= (tonumber(f[4]) or 0) then
      if (tonumber(f[3]) or 0) ~= 0 then redis.call('HSET', KEYS[1], 'failures', 0) end
      redis.call('HINCRBY', KEYS[1], 'a0', 1)
      return '- CLOSED ' .. (f[2] or '0') .. ' 0 - - - 0'
    end
  end
end
