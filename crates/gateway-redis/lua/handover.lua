-- handover.lua: a release carried by the next waiter's admission in one script
-- (gateway_core::combined's record_then_admit): settle.lua's records, then admit.lua's
-- admission, so that the admission finds what the records freed (scripts.rs wraps the two as
-- `settled` and `admitted` above this, after now.lua and parts.lua).
--
-- ARGV     the records' plan and parts (settle.lua's ARGV), then the admission's plan and parts
--          (admit.lua's ARGV)
-- KEYS     the records' keys, then the admission's
--
-- Returns { settle.lua's reply, admit.lua's reply or false, why the admission failed or false }:
-- an admission that fails (a part's error, its earlier parts handed back as admit.lua does)
-- leaves the records made and answered.

local recorded = settled()
plan = ARGV[next_arg]
next_arg = next_arg + 1
local ok, admission = pcall(admitted)
if not ok then
  return { recorded, false, type(admission) == 'table' and admission.err or tostring(admission) }
end
if type(admission) == 'table' and admission.err then return { recorded, false, admission.err } end
return { recorded, admission, false }
