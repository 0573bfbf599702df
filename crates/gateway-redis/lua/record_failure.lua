-- record_failure: ARGV[3] epoch. The rate channel is checked before the consecutive one.
load('state', 'epoch', 'failures', 'win_id', 'a0', 'f0', 'a1', 'f1', 'streak')
if fenced(ARGV[3]) then return reply('-', true) end
if g.state == 'CLOSED' then
  set('failures', g.failures + 1)
  count(true, false)
  local samples = g.a0 + g.a1
  local failed = g.f0 + g.f1
  local evidence = rate_channel and samples >= min_calls
  local rate = 0
  if samples > 0 then rate = failed / samples end
  if evidence and rate >= fail_rate then
    open(true, 'rate_channel')
    set('failures', threshold)
  elseif g.failures >= threshold and not (evidence and rate < fail_rate) then
    open(false, 'consecutive_channel')
  end
elseif g.state == 'HALF_OPEN' then
  open(true, 'probe_failed')
end
return reply('-', false)
