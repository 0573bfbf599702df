-- release_probe: ARGV[13] epoch. Hands the lease back so the next try_enter probes at once.
if fenced(ARGV[13]) then return reply('', true) end
if g.state == 'HALF_OPEN' and g.probe_until ~= nil then
  g.probe_until = nil
  dirty = true
end
return reply('', false)
