-- settle.lua: an attempt's records in one script (gateway_core::combined): the account's place
-- (pacer_release.lua), the gate's record (gate.lua), the permit's actual tokens and its release
-- (quota_settle.lua, quota_release.lua). Each part is its own script, whole, as a function of
-- its KEYS and ARGV (scripts.rs builds them above this, then now.lua and parts.lua), run in
-- that order.
--
-- ARGV[1]  the parts present, in order: 'p' the account's place, 'g' the gate's record, 's' the
--          permit's tokens, 'r' the permit's release, 'w' the capacity freed handed on in the
--          line across processes (line.lua's 'freed': now, the process, '1' when a call waits
--          in it, the prefix of the scope's channels, the grace in ms)
-- ARGV[2..] for each part, the count of its arguments, then its arguments
-- KEYS     the pacer's two keys, the gate's HASH, the quota's four keys (once, for 's' and 'r'),
--          the line's two keys, of the parts present
--
-- Returns { the limit after the release or false, the gate's reply or false, 1 when another
-- process was handed the capacity freed else 0 }.

local limit, reply, elsewhere = false, false, 0
if has('p') then limit = pacer_release(part(2)) end
if has('g') then reply = gate(part(1)) end
if has('s') then quota_settle(part(4, has('r'))) end
if has('r') then quota_release(part(4)) end
if has('w') then
  local keys, args = part(2)
  elsewhere = line(keys, { args[1], 'freed', args[2], args[3], args[4], args[5] })
end
return { limit, reply, elsewhere }
