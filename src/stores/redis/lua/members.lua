-- ARGV: B (the outbox's own "{prefix}:"), token, ms. The partitioned relays' membership record
-- (docs/redis.md, Partitions): hash token -> expiry (server ms), and B.."joined" token -> when it
-- joined (ms, for `outpost partitions`). Renews `token` for `ms` (ms 0: removes it, a relay that
-- stops), drops the expired members, returns the live tokens sorted, so every relay computes
-- the same assignment of partitions.
local now = now_ms()
local h, joined = B .. 'members', B .. 'joined'
if ARGV[3] == '0' then
  redis.call('HDEL', h, ARGV[2])
  redis.call('HDEL', joined, ARGV[2])
else
  redis.call('HSET', h, ARGV[2], now + tonumber(ARGV[3]))
  redis.call('HSETNX', joined, ARGV[2], now)
end
local all = redis.call('HGETALL', h)
local live = {}
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) < now then
    redis.call('HDEL', h, all[i])
    redis.call('HDEL', joined, all[i])
  else
    live[#live + 1] = all[i]
  end
end
table.sort(live)
return live
