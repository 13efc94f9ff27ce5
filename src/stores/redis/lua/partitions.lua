-- ARGV: B (the outbox's own "{prefix}:"), partitions, create ('1': record them when missing).
-- The outbox's partition count (docs/redis.md, Partitions): the recorded one, or with create the
-- given one, recorded now. An outbox whose unpartitioned key space still holds events (live or
-- dead, any layout) is not partitioned: -1, so they are delivered before the switch, never
-- stranded. Returns the partition count (0: none recorded and not created).
local cur = redis.call('GET', B .. 'partitions')
if cur then return tonumber(cur) end
if ARGV[3] ~= '1' then return 0 end
if redis.call('EXISTS', B .. 'live', B .. 'dead') == 1 or redis.call('ZCARD', B .. 'v3:live') > 0 or
    redis.call('ZCARD', B .. 'v3:dead') > 0 then
  return -1
end
redis.call('SET', B .. 'partitions', ARGV[2])
return tonumber(ARGV[2])
