-- try_enter: admit (CLOSED), grant the single probe lease, or deny with retry_after.
load('state', 'epoch')
if g.state == 'CLOSED' then return reply('allowed', false) end
load('open_until', 'probe_until')
if g.state == 'OPEN' then
  if clock() < g.open_until then return reply('denied', false) end
  set('state', 'HALF_OPEN')
  set('probe_ok', 0)
  set('probe_until', clock() + probe_ttl)
  transition = { 'OPEN', 'HALF_OPEN', 'cooldown_elapsed' }
  return reply('probe', false)
else
  if g.probe_until ~= nil and clock() < g.probe_until then return reply('denied', false) end
  -- lazy reissue: the holder of the expired lease is presumed lost
  set('probe_until', clock() + probe_ttl)
  return reply('probe', false)
end
