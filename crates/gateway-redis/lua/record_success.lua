-- record_success: ARGV[3] epoch, ARGV[4] real (0: not real, 1: real, 2: real and slow).
load('state', 'epoch', 'failures', 'win_id', 'streak')
if fenced(ARGV[3]) then return reply('-', true) end
local real = ARGV[4] ~= '0'
local slow = ARGV[4] == '2' and slow_rate ~= nil
if g.state == 'CLOSED' then
  if g.failures ~= 0 then set('failures', 0) end
  if real then
    count(false, slow)
    local samples = (g.a0 or 0) + (g.a1 or 0)
    if slow and samples >= min_calls and (g.s0 + g.s1) / samples >= slow_rate then
      open(true, 'slow_channel')
    else
      if g.streak > 0 then load('closed_since') end
      -- decay on this success, after 2 × cooldown_eff of stable CLOSED (never on a timer)
      if g.streak > 0 and g.closed_since ~= nil and clock() - g.closed_since >= 2 * cooldown_eff(g.streak) then
        set('streak', 0)
      end
    end
  end
elseif g.state == 'HALF_OPEN' then
  load('probe_ok')
  set('probe_ok', g.probe_ok + 1)
  set('probe_until', nil)
  if g.probe_ok >= half_open_successes then
    set('state', 'CLOSED')
    set('failures', 0)
    set('closed_since', clock())
    -- the window starts afresh (see breaker.rs)
    for _, name in ipairs({ 'a0', 'f0', 's0', 'a1', 'f1', 's1' }) do set(name, 0) end
    transition = { 'HALF_OPEN', 'CLOSED', 'probe_succeeded' }
  end
end
return reply('-', false)
