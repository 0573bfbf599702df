-- admit.lua: an attempt's admission in one script (gateway_core::combined): the account's place
-- (pacer_acquire.lua), the gate (gate.lua's enter), a quota permit (quota_acquire.lua), each
-- its own whole script as a function of its KEYS and ARGV (scripts.rs builds them above this,
-- then now.lua and parts.lua),
-- in that order; the first refusal ends it and hands back what the parts before it took, as the
-- client would: a probe lease released (gate.lua's release), then the account's place with no
-- effect (pacer_release.lua). A part that fails hands back the same before the error goes on.
--
-- ARGV[1]  the parts present, in order: 'l' the process's standing in the line across
--          processes (line.lua: a refusal of shared capacity renews it, 'waits'; an admission,
--          or a refusal by a quota the call's tenant has to itself, sets it to the oldest other
--          waiter's start or ends it, 'served'; a gate's denial leaves it), 'p' the account,
--          'g' the gate (always), 'q' the permit
-- ARGV[2..] for each part, the count of its arguments, then its arguments; the line's are now,
--          the process, the ms its oldest waiter (the call included) has waited, the ms the
--          oldest other has ('' : none), the ms its standing lasts, and '1' when the permit's
--          quota is shared (no tenant's own); after the account's, what its hand-back needs
--          that the grant does not say: a count of 2, the ceiling and the advertised limits'
--          window in ms
-- KEYS     the line's two keys, the pacer's two keys, the gate's HASH, the quota's four, of the
--          parts present
--
-- Returns { the account's reply or false, the gate's reply or false, the quota's or false }.

local pace, entry, permit = false, false, false
local line_keys, line_args
if has('l') then line_keys, line_args = part(2) end

-- The process's standing in the line after the call was refused shared capacity ('waits') or
-- admitted ('served', also for a refusal by its tenant's own quota).
local function stand(op)
  if not line_keys then return end
  local a = line_args
  if op == 'waits' then
    line(line_keys, { a[1], 'waits', a[2], a[3], a[5] })
  else
    line(line_keys, { a[1], 'served', a[2], a[4], a[5] })
  end
end
local pace_keys, pace_args, extra
local gate_keys, gate_args

-- What the parts before a refusal took: the probe lease (when `probe`), the account's place.
local function hand_back(probe)
  if probe then
    local _, _, inc, ep = string.match(entry, '^(%S+) (%S+) (%S+) (%S+)')
    local args = {}
    for i, v in ipairs(gate_args) do args[i] = v end
    args[2], args[3], args[4] = 'release', inc, ep
    gate(gate_keys, args)
  end
  if pace then
    local a = pace_args
    pacer_release(pace_keys, {
      a[1], a[2], a[3], tostring(pace[2]), tostring(pace[3]), tostring(pace[4]), tostring(pace[5]),
      tostring(pace[6]), 'nothing', extra[1], tostring(pace[7]), '', '', '', '', '', '', extra[2],
    })
  end
end

if has('p') then
  pace_keys, pace_args = part(2)
  extra = select(2, part(0))
  pace = pacer_acquire(pace_keys, pace_args)
  if pace[1] ~= 1 then
    stand('waits')
    return { pace, false, false }
  end
end

-- The gate's enter reads the time only on its slow path.
gate_keys, gate_args = part(1, false, true)
local ok, reply = pcall(gate, gate_keys, gate_args)
if not ok or type(reply) ~= 'string' then
  hand_back(false)
  if not ok then error(reply) end
  return reply
end
entry = reply
local verdict = string.match(entry, '^(%S+)')
if verdict ~= 'allowed' and verdict ~= 'probe' then
  hand_back(false)
  return { pace, entry, false }
end

if has('q') then
  local quota_keys, quota_args = part(4)
  local done, answer = pcall(quota_acquire, quota_keys, quota_args)
  if not done or type(answer) ~= 'table' or answer.err then
    hand_back(verdict == 'probe')
    if not done then error(answer) end
    return answer
  end
  permit = answer
  if permit[1] ~= 1 then
    hand_back(verdict == 'probe')
    if line_args and line_args[6] == '1' then stand('waits') else stand('served') end
    return { pace, entry, permit }
  end
end
stand('served')
return { pace, entry, permit }
