-- The partitioned store's append over several partitions on a single master (prologue.lua,
-- append_fn.lua, then this; redis_partitioned.cpp): one call instead of one per partition, and
-- one wake. Every part is checked before any is written, so the call is atomic across its
-- partitions (a duplicate id anywhere in it rejects it whole). Not on Redis Cluster: the
-- partitions are in other slots.
-- ARGV: B (the outbox's own base), n_parts, then each part: its length L and L arguments laid
-- out like append.lua's ARGV (the partition's B first). Returns the number of events.
-- The wake goes to the first part's channel only: partitioned relays listen on every
-- partition's (a pattern, redis_partitioned.cpp).
local np = tonumber(ARGV[2])
local parts, i = {}, 3
for p = 1, np do
  local L = tonumber(ARGV[i])
  local A = {}
  for j = i + 1, i + L do A[#A + 1] = ARGV[j] end
  parts[p] = A
  i = i + 1 + L
end
local seen, ids = {}, {}
for p = 1, np do
  B = parts[p][1]
  local bad, got = append_check(parts[p], seen)
  if bad then return bad end
  ids[p] = got
end
local now, n = now_ms(), 0
for p = 1, np do
  B = parts[p][1]
  n = n + append_write(parts[p], ids[p], now)
end
redis.call('PUBLISH', parts[1][1] .. 'wake', '1')
return n
