-- release_probe: ARGV[3] epoch. Hands the lease back so the next try_enter probes at once.
load('state', 'epoch', 'probe_until')
if fenced(ARGV[3]) then return reply('-', true) end
if g.state == 'HALF_OPEN' and g.probe_until ~= nil then set('probe_until', nil) end
return reply('-', false)
