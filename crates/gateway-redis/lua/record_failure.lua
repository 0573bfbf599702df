-- record_failure: ARGV[13] epoch. The rate channel is checked before the consecutive one.
if fenced(ARGV[13]) then return reply('', true) end
if g.state == 'CLOSED' then
  g.failures = g.failures + 1
  count(true)
  local samples = g.a0 + g.a1
  local failed = g.f0 + g.f1
  local evidence = P.rate_channel and samples >= P.min_calls
  local rate = 0
  if samples > 0 then rate = failed / samples end
  if evidence and rate >= P.fail_rate then
    open(true, 'rate_channel')
    g.failures = P.threshold
  elseif g.failures >= P.threshold and not (evidence and rate < P.fail_rate) then
    open(false, 'consecutive_channel')
  end
elseif g.state == 'HALF_OPEN' then
  open(true, 'probe_failed')
end
return reply('', false)
