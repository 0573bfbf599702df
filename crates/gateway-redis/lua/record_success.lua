-- record_success: ARGV[13] epoch, ARGV[14] real (0|1).
if fenced(ARGV[13]) then return reply('', true) end
local real = ARGV[14] == '1'
if g.state == 'CLOSED' then
  if g.failures ~= 0 then g.failures = 0; dirty = true end
  if real then
    count(false)
    decay_streak()
  end
elseif g.state == 'HALF_OPEN' then
  g.probe_ok = g.probe_ok + 1
  g.probe_until = nil
  if g.probe_ok >= P.half_open_successes then
    g.state = 'CLOSED'
    g.failures = 0
    g.closed_since = now
    transition = { 'HALF_OPEN', 'CLOSED', 'probe_succeeded' }
  end
  dirty = true
end
return reply('', false)
