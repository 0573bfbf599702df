-- pacer.lua: shared part of the pacer scripts. It mirrors crates/gateway-core/src/aimd.rs.
--
-- KEYS[1] state HASH (limit, gen, seq)   KEYS[2] leases ZSET (lease id -> lease end ms)
-- ARGV[1] now in ms, or '' for the Redis server clock; ARGV[2] key TTL in ms; ARGV[3] the
-- initial limit (min(8, ceiling), computed by the caller); ARGV[4..] the operation's own.
-- Limits are stored and returned as '%.17g' strings: exact doubles, never Redis's integer
-- conversion of a Lua number.

local now = read_now()
local key_ttl = tonumber(ARGV[2])
local state, leases = KEYS[1], KEYS[2]
local function fmt(x) return string.format('%.17g', x) end

local stored = redis.call('HMGET', state, 'limit', 'gen')
local limit = tonumber(stored[1]) or tonumber(ARGV[3])
local gen = tonumber(stored[2]) or 0
-- Writes the limit and generation when they differ from what is stored (a new account's are not).
local function store()
  if fmt(limit) ~= stored[1] or tostring(gen) ~= stored[2] then redis.call('HSET', state, 'limit', fmt(limit), 'gen', gen) end
end

local function touch()
  for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, key_ttl) end
end
