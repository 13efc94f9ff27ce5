-- `outpost partitions` on a partitioned outbox (docs/redis.md, Partitions), read only.
-- ARGV: B, 'partition': B is one partition's "{prefix:pK}:". Returns {holder of its writer lease
-- ('' = none), the lease's ms left (PTTL), fence, when the fence last moved to a new holder (ms,
-- '' = not recorded), now (ms), undelivered events, events leased now}.
-- ARGV: B, 'members': B is the outbox's own "{prefix}:". Returns {now (ms), then per live member
-- its token, expiry (ms) and when it joined (ms, '' = not recorded)}.
local now = now_ms()
if ARGV[2] == 'members' then
  local out = {now}
  local all = redis.call('HGETALL', B .. 'members')
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) >= now then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
      out[#out + 1] = redis.call('HGET', B .. 'joined', all[i]) or ''
    end
  end
  return out
end
local w = redis.call('HMGET', B .. 'writer', 'fence', 'moved_at')
return {redis.call('GET', B .. 'lock') or '', redis.call('PTTL', B .. 'lock'),
  tonumber(w[1] or '0') or 0, w[2] or '', now, redis.call('ZCARD', B .. 'v3:live'),
  redis.call('ZCOUNT', B .. 'v3:leased', '(' .. now, '+inf')}
