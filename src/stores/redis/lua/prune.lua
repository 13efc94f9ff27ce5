-- The pruning an ack does (ack_fn.lua: archived events older than archive_retention, dead
-- letters dead longer than dead_retention, up to 1,000 of each per call), without an ack: a
-- partition whose keys went quiet sees no ack, yet what it holds must still go once past its
-- retention (redis_partitioned.cpp, the beat; docs/redis.md, Partitions).
-- ARGV: B, archive (1/0), retention ("<archive_retention_ms>" or
-- "<archive_retention_ms>,<dead_retention_ms>", as ack_fn.lua's). Returns the dead letters deleted.
local r = ARGV[3]
local comma = string.find(r, ',', 1, true)
local retention = tonumber(comma and string.sub(r, 1, comma - 1) or r) or 0
local dead_retention = comma and tonumber(string.sub(r, comma + 1)) or 0
local now = now_ms()
if ARGV[2] == '1' and retention > 0 then
  local old = redis.call('ZRANGEBYSCORE', B .. 'v3:archive', '-inf', now - retention, 'LIMIT', 0, 1000)
  bulk('HDEL', B .. 'v3:archived', old)
  bulk('HDEL', B .. 'v3:archived_at', old)
  bulk('ZREM', B .. 'v3:archive', old)
end
if dead_retention > 0 and redis.call('EXISTS', B .. 'v3:died') == 1 then
  return delete_dead(redis.call('ZRANGEBYSCORE', B .. 'v3:died', '-inf', now - dead_retention,
    'LIMIT', 0, 1000))
end
return 0
