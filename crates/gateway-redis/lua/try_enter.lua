-- try_enter: admit (CLOSED), grant the single probe lease, or deny with retry_after.
if g.state == 'CLOSED' then
  return reply('allowed', false)
elseif g.state == 'OPEN' then
  if now < g.open_until then return reply('denied', false) end
  g.state = 'HALF_OPEN'
  g.probe_ok = 0
  g.probe_until = now + P.probe_ttl
  transition = { 'OPEN', 'HALF_OPEN', 'cooldown_elapsed' }
  dirty = true
  return reply('probe', false)
else
  if g.probe_until ~= nil and now < g.probe_until then return reply('denied', false) end
  -- lazy reissue: the holder of the expired lease is presumed lost
  g.probe_until = now + P.probe_ttl
  dirty = true
  return reply('probe', false)
end
