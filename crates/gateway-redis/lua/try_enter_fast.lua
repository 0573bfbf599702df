-- try_enter, fast path (runs before the shared prelude): a CLOSED gate admits at once.
local fast = redis.call('HMGET', KEYS[1], 'state', 'epoch')
if not fast[1] or fast[1] == 'CLOSED' then
  return 'allowed CLOSED ' .. (fast[2] or '0') .. ' 0 - - - 0'
end
