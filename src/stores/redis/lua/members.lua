-- ARGV: B (the outbox's own "{prefix}:"), token, ms. The partitioned relays' membership record
-- (docs/redis.md, Partitions): hash token -> expiry (server ms). Renews `token` for `ms` (ms 0:
-- removes it, a relay that stops), drops the expired members, returns the live tokens sorted,
-- so every relay computes the same assignment of partitions.
local now = now_ms()
local h = B .. 'members'
if ARGV[3] == '0' then
  redis.call('HDEL', h, ARGV[2])
else
  redis.call('HSET', h, ARGV[2], now + tonumber(ARGV[3]))
end
local all = redis.call('HGETALL', h)
local live = {}
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < now then redis.call('HDEL', h, all[i]) else live[#live + 1] = all[i] end
end
table.sort(live)
return live
