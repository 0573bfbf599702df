-- quota.lua: shared part of the quota scripts. It mirrors crates/gateway-core/src/quota.rs.
--
-- KEYS[1] leases ZSET (permit id → lease end ms)   KEYS[2] starts ZSET (permit id → start ms)
-- KEYS[3] tokens HASH (permit id → charged tokens, and the account's `incarnation`)
-- KEYS[4] id sequence
-- ARGV[1] now in ms, or '' for the Redis server clock; ARGV[2] key TTL in ms; ARGV[3..] the
-- operation's own arguments.

local now = read_now()
local key_ttl = tonumber(ARGV[2])
local leases, starts, tokens, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local WINDOW = 60000

local function touch()
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, key_ttl) end
end
